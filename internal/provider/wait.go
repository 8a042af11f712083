package provider

import (
	"strconv"
	"strings"
	"time"

	"github.com/rebound-go/rebound/internal/header"
)

// waitPhrases introduce a wait in an error message: "Please try again in
// 7.66s" (OpenAI, Groq), "Please retry after 6 seconds" (Azure), "Please
// retry in 37.7s" (Gemini).
var waitPhrases = []string{"try again in ", "retry in ", "retry after ", "try again after ", "wait "}

// A unit is a unit of time as messages spell it.
type unit struct {
	name string
	d    time.Duration
}

// units are the units a message's wait may be given in, longest first
// within each prefix so that "ms" is not read as "m".
var units = []unit{
	{"milliseconds", time.Millisecond}, {"millisecond", time.Millisecond}, {"msec", time.Millisecond}, {"ms", time.Millisecond},
	{"seconds", time.Second}, {"second", time.Second}, {"secs", time.Second}, {"sec", time.Second}, {"s", time.Second},
	{"minutes", time.Minute}, {"minute", time.Minute}, {"mins", time.Minute}, {"min", time.Minute}, {"m", time.Minute},
	{"hours", time.Hour}, {"hour", time.Hour}, {"hrs", time.Hour}, {"hr", time.Hour}, {"h", time.Hour},
}

// MessageWait returns the wait an error message names, if any: the first
// well-formed duration after one of the wait phrases, in Go's form
// ("1m30.5s", "859ms") or in words ("6 seconds", "1 minute 30 seconds").
// A duration beyond header.MaxHint is absurd and ignored, like every
// other hint.
func MessageWait(msg string) (time.Duration, bool) {
	lower := strings.ToLower(wording(msg))
	for _, phrase := range waitPhrases {
		for rest := lower; ; {
			i := strings.Index(rest, phrase)
			if i < 0 {
				break
			}
			rest = rest[i+len(phrase):]
			if d, ok := duration(rest); ok {
				return d, true
			}
		}
	}
	return 0, false
}

// duration reads the duration at the start of s: one or more numbers,
// each followed by a unit, optionally after a space.
func duration(s string) (time.Duration, bool) {
	var total float64 // seconds; a float cannot overflow on the way
	n := 0
	for {
		s = strings.TrimLeft(s, " ")
		if n > 0 { // "1 minute and 30 seconds", "1 hour, 30 minutes"
			s = strings.TrimLeft(strings.TrimPrefix(strings.TrimPrefix(s, ","), " and"), " ")
			s = strings.TrimLeft(strings.TrimPrefix(s, "and "), " ")
		}
		if s == "" || s[0] < '0' || s[0] > '9' {
			break // the end of the duration: "20s. Visit", "6 seconds."
		}
		end := 0
		for end < len(s) && end < 32 && (s[end] >= '0' && s[end] <= '9' || s[end] == '.') {
			end++
		}
		f, err := strconv.ParseFloat(s[:end], 64)
		unit, ok := unitAt(strings.TrimLeft(s[end:], " "))
		switch {
		case (err != nil || !ok) && n == 0:
			return 0, false
		case err != nil || !ok:
			// "in 20s, and 5 more": the duration ended before.
			return done(total)
		}
		s = strings.TrimLeft(s[end:], " ")
		s = s[len(unit.name):]
		total += f * unit.d.Seconds()
		n++
	}
	if n == 0 {
		return 0, false
	}
	return done(total)
}

// done is a duration of secs seconds, if it is no longer than
// header.MaxHint.
func done(secs float64) (time.Duration, bool) {
	if !(secs <= header.MaxHint.Seconds()) {
		return 0, false
	}
	return time.Duration(secs * float64(time.Second)), true
}

// unitAt returns the unit s starts with; a unit must end its word.
func unitAt(s string) (unit, bool) {
	for _, u := range units {
		if strings.HasPrefix(s, u.name) && !letterAt(s, len(u.name)) {
			return u, true
		}
	}
	return unit{}, false
}

func letterAt(s string, i int) bool {
	return i < len(s) && s[i] >= 'a' && s[i] <= 'z'
}
