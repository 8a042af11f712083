// Package cliflag holds the rules rebound's commands share about their
// flags, so that each is written once: how a number out of its range is
// refused, in one line, a flag that may be given several times, and
// which flags the command line gave.
package cliflag

import (
	"flag"
	"fmt"
	"math"
	"strings"
)

// Int checks an integer flag's value against [lo, hi]; want says what is
// wanted, as "a whole number of days from 1 to 36500".
func Int(name string, v, lo, hi int, want string) error {
	if v < lo || v > hi {
		return fmt.Errorf("--%s %d: want %s", name, v, want)
	}
	return nil
}

// Float checks a number flag's value against [lo, hi], refusing NaN and
// infinities, which no comparison would.
func Float(name string, v, lo, hi float64, want string) error {
	if !(v >= lo && v <= hi) || math.IsInf(v, 0) {
		return fmt.Errorf("--%s %v: want %s", name, v, want)
	}
	return nil
}

// List is a flag that may be given several times, each a value or a
// comma-separated list.
type List []string

func (l *List) String() string { return strings.Join(*l, ",") }

// Set adds the values of v, spaces trimmed, empty ones dropped.
func (l *List) Set(v string) error {
	for s := range strings.SplitSeq(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// Given returns the names of the flags fs's command line gave.
func Given(fs *flag.FlagSet) map[string]bool {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	return given
}

// FirstGiven returns the first of names in given, or "".
func FirstGiven(given map[string]bool, names ...string) string {
	for _, n := range names {
		if given[n] {
			return n
		}
	}
	return ""
}
