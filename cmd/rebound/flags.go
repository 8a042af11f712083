package main

import (
	"flag"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// intFlag checks an integer flag's value against [lo, hi]; want says
// what is wanted, as "a whole number of days from 1 to 36500".
func intFlag(name string, v, lo, hi int, want string) error {
	if v < lo || v > hi {
		return fmt.Errorf("--%s %d: want %s", name, v, want)
	}
	return nil
}

// floatFlag checks a number flag's value against [lo, hi], refusing NaN
// and infinities, which no comparison would.
func floatFlag(name string, v, lo, hi float64, want string) error {
	if !(v >= lo && v <= hi) || math.IsInf(v, 0) {
		return fmt.Errorf("--%s %v: want %s", name, v, want)
	}
	return nil
}

// foreignFlag returns a one-line reason if a flag given on the command
// line belongs only to scenarios other than scenario: owners maps such a
// flag to the scenarios it applies to; flags not in it apply to all.
func foreignFlag(fs *flag.FlagSet, scenario string, owners map[string][]string) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if of, ok := owners[f.Name]; ok && err == nil && !slices.Contains(of, scenario) {
			err = fmt.Errorf("--%s does not apply to the %s scenario: it belongs to --scenario %s", f.Name, scenario, strings.Join(of, " or "))
		}
	})
	return err
}

// progressEvery is the least wall time between two lines reporting a run
// still under way: a long run is never silent for long, and a short one
// tells only what it finished.
var progressEvery = time.Second

// progressClock says when a line reporting a run still under way is due.
type progressClock struct{ last time.Time }

// due reports whether such a line is due now, and if so counts it.
func (p *progressClock) due() bool {
	now := time.Now()
	if now.Sub(p.last) < progressEvery {
		return false
	}
	p.last = now
	return true
}

// printed notes a line just printed, so the next report waits its turn.
func (p *progressClock) printed() { p.last = time.Now() }
