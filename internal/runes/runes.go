// Package runes cuts text on a rune boundary: the one rule for every place
// that bounds a string it shows or keeps (an error body, an identifier, an
// attribute, a value quoted in an error), so that no cut ever leaves half
// a character.
package runes

import "unicode/utf8"

// Cut returns the longest start of s that is at most n bytes and ends on a
// rune boundary: s itself when it is no longer than n.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	n = max(n, 0)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
