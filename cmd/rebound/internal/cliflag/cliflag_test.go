package cliflag

import (
	"flag"
	"io"
	"math"
	"slices"
	"testing"
)

// TestRangesRefuseOutsideValuesNaNAndInfinities: a value out of range is
// refused in one line naming the flag and what is wanted; NaN and
// infinities are refused even in the widest range.
func TestRangesRefuseOutsideValuesNaNAndInfinities(t *testing.T) {
	if err := Int("days", 0, 1, 10, "a whole number of days from 1 to 10"); err == nil || err.Error() != "--days 0: want a whole number of days from 1 to 10" {
		t.Errorf("Int: %v", err)
	}
	if err := Int("days", 10, 1, 10, "x"); err != nil {
		t.Errorf("Int at the bound: %v", err)
	}
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), -0.5} {
		if err := Float("rate", v, 0, math.MaxFloat64, "a finite number"); err == nil {
			t.Errorf("Float(%v) accepted", v)
		}
	}
	if err := Float("rate", 1, 0, 1, "x"); err != nil {
		t.Errorf("Float at the bound: %v", err)
	}
}

// TestListAndGiven: a list flag gathers every value given, repeated or
// comma-separated, spaces trimmed and empty ones dropped; Given and
// FirstGiven say which flags the command line gave.
func TestListAndGiven(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	var hosts List
	fs.Var(&hosts, "allow-host", "")
	fs.Bool("quiet", false, "")
	fs.Int("n", 0, "")
	if err := fs.Parse([]string{"--allow-host", "a, b,,", "--allow-host=c", "--n", "3"}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "b", "c"}; !slices.Equal(hosts, want) || hosts.String() != "a,b,c" {
		t.Errorf("hosts %q, want %q", hosts, want)
	}
	given := Given(fs)
	if FirstGiven(given, "quiet", "n", "allow-host") != "n" || FirstGiven(given, "quiet") != "" {
		t.Errorf("given %v", given)
	}
}

// TestUnknownFlagSaysWhatToGiveInstead: an unknown flag is named as it is
// written in the docs (--x) with, in one line, --addr for a port or a host,
// the nearest defined flag for a misspelling or a shortening, or else
// where the flags are listed; other errors pass unchanged.
func TestUnknownFlagSaysWhatToGiveInstead(t *testing.T) {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.String("addr", "", "listen on `host:port`")
	fs.String("upstream", "", "")
	fs.String("config", "", "")
	fs.Bool("json", false, "")
	for _, c := range []struct{ arg, want string }{
		{"--port", "flag provided but not defined: --port (the address is --addr host:port)"},
		{"-listen=:9000", "flag provided but not defined: --listen (the address is --addr host:port)"},
		{"--upstreams", "flag provided but not defined: --upstreams (did you mean --upstream?)"},
		{"--upstraem", "flag provided but not defined: --upstraem (did you mean --upstream?)"},
		{"--conf", "flag provided but not defined: --conf (did you mean --config?)"},
		{"--jsn", "flag provided but not defined: --jsn (did you mean --json?)"},
		{"--nope", "flag provided but not defined: --nope (rebound proxy --help lists the flags)"},
	} {
		err := fs.Parse([]string{c.arg})
		if err == nil {
			t.Fatalf("%s: parsed", c.arg)
		}
		if got := Unknown(fs, err).Error(); got != c.want {
			t.Errorf("%s: %q, want %q", c.arg, got, c.want)
		}
	}
	// A command that does not listen has no --addr to point to.
	quiet := flag.NewFlagSet("batch", flag.ContinueOnError)
	quiet.SetOutput(io.Discard)
	quiet.String("out", "", "")
	if err := quiet.Parse([]string{"--port", "1"}); err == nil || Unknown(quiet, err).Error() != "flag provided but not defined: --port (rebound batch --help lists the flags)" {
		t.Errorf("batch --port: %v", Unknown(quiet, err))
	}
	if err := fs.Parse([]string{"--addr"}); err == nil || Unknown(fs, err) != err {
		t.Errorf("a flag without its value: %v changed to %v", err, Unknown(fs, err))
	}
}
