package runes

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCutKeepsWholeRunes(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"hello", 10, "hello"},
		{"hello", 5, "hello"},
		{"hello", 3, "hel"},
		{"héllo", 2, "h"}, // é is two bytes: not half of it
		{"héllo", 3, "hé"},
		{"日本語", 4, "日"},
		{"日本語", 2, ""},
		{"abc", 0, ""},
		{"abc", -1, ""},
		{"", 3, ""},
	} {
		if got := Cut(c.s, c.n); got != c.want {
			t.Errorf("Cut(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}

func FuzzCut(f *testing.F) {
	f.Add("héllo wörld", 4)
	f.Add(strings.Repeat("語", 10), 7)
	f.Add("\xff\xfe", 1)
	f.Fuzz(func(t *testing.T, s string, n int) {
		got := Cut(s, n)
		if len(got) > max(n, 0) && len(s) > n {
			t.Fatalf("Cut(%q, %d) = %q: longer than %d", s, n, got, n)
		}
		if !strings.HasPrefix(s, got) {
			t.Fatalf("Cut(%q, %d) = %q: not a start of it", s, n, got)
		}
		if len(got) < len(s) && utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("Cut(%q, %d) = %q: half a rune", s, n, got)
		}
	})
}
