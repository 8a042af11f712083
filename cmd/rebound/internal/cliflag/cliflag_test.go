package cliflag

import (
	"flag"
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
