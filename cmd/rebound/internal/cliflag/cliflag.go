// Package cliflag holds the rules rebound's commands share about their
// flags, so that each is written once: how a number out of its range is
// refused, in one line, what an unknown flag is told, a flag that may be
// given several times, and which flags the command line gave.
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

// addressWords are the names a newcomer tries for the listening address,
// which every command that listens calls --addr.
var addressWords = []string{"port", "listen", "host", "bind", "address"}

// Unknown turns the flag package's "flag provided but not defined: -x"
// into a line that also says what to give instead: --addr for a port or
// a host, the nearest defined flag for a misspelling, or else where the
// flags are listed. Any other error is returned unchanged.
func Unknown(fs *flag.FlagSet, err error) error {
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -")
	if !ok {
		return err
	}
	name = strings.TrimLeft(name, "-")
	var hint string
	if addr := fs.Lookup("addr"); addr != nil && containsFold(addressWords, name) {
		placeholder, _ := flag.UnquoteUsage(addr)
		hint = "the address is --addr " + placeholder
	} else if near := nearest(fs, name); near != "" {
		hint = "did you mean --" + near + "?"
	} else {
		hint = "rebound " + fs.Name() + " --help lists the flags"
	}
	return fmt.Errorf("flag provided but not defined: --%s (%s)", name, hint)
}

func containsFold(words []string, s string) bool {
	for _, w := range words {
		if strings.EqualFold(w, s) {
			return true
		}
	}
	return false
}

// nearest returns the defined flag closest to name: one that name begins
// or that begins name (--upstreams, --conf), or one a few edits away
// (--upstraem), or "" when none is close enough to be a good guess.
func nearest(fs *flag.FlagSet, name string) string {
	name = strings.ToLower(name)
	best, bestDist := "", 0
	fs.VisitAll(func(f *flag.Flag) {
		d := distance(name, f.Name)
		if len(name) >= 3 && len(f.Name) >= 3 && (strings.HasPrefix(f.Name, name) || strings.HasPrefix(name, f.Name)) {
			d = min(d, 1)
		}
		if d <= max(1, min(2, len(name)/3)) && (best == "" || d < bestDist) {
			best, bestDist = f.Name, d
		}
	})
	return best
}

// distance is the Levenshtein distance between a and b, in bytes (flag
// names are ASCII).
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
