package rebound

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rebound-go/rebound/internal/runes"
)

// NoDelay is the sentinel for an explicit zero duration in a Policy.
//
// A zero field of Policy means "the default", so a zero duration has to be
// asked for: set BaseDelay to NoDelay to retry immediately, WaitBudget to
// NoDelay to allow no waiting at all, MaxServerWait to NoDelay to treat every
// server wait hint as too long. In JSON an explicit 0 means the same.
const NoDelay time.Duration = -1

// Jitter is how a computed delay is randomised.
type Jitter uint8

// Jitters. Brooker's "Exponential Backoff and Jitter" compares them; full
// and decorrelated jitter do the least work under contention.
const (
	// JitterFull waits U(0, d): the default.
	JitterFull Jitter = iota
	// JitterNone waits exactly d.
	JitterNone
	// JitterEqual waits d/2 + U(0, d/2).
	JitterEqual
	// JitterDecorrelated waits min(MaxDelay, U(BaseDelay, 3·previous)),
	// starting from BaseDelay; it replaces the Shape.
	JitterDecorrelated
)

var jitterNames = [...]string{JitterFull: "full", JitterNone: "none", JitterEqual: "equal", JitterDecorrelated: "decorrelated"}

// String returns the JSON name of j.
func (j Jitter) String() string { return enumString(jitterNames[:], int(j), "jitter") }

// MarshalText implements encoding.TextMarshaler.
func (j Jitter) MarshalText() ([]byte, error) { return enumMarshal(jitterNames[:], int(j), "jitter") }

// UnmarshalText implements encoding.TextUnmarshaler.
func (j *Jitter) UnmarshalText(b []byte) error {
	i, err := enumParse(jitterNames[:], string(b), "jitter")
	*j = Jitter(i)
	return err
}

// Shape is how the raw delay grows with the retry number n.
type Shape uint8

// Shapes.
const (
	// ShapeExponential: BaseDelay · Multiplier^(n−1). The default.
	ShapeExponential Shape = iota
	// ShapeLinear: n · BaseDelay.
	ShapeLinear
	// ShapeConstant: BaseDelay.
	ShapeConstant
	// ShapeCustom: Policy.Schedule(n). Set by giving a Schedule; it has
	// no JSON form that can be read back.
	ShapeCustom
)

var shapeNames = [...]string{ShapeExponential: "exponential", ShapeLinear: "linear", ShapeConstant: "constant", ShapeCustom: "custom"}

// String returns the JSON name of s.
func (s Shape) String() string { return enumString(shapeNames[:], int(s), "shape") }

// MarshalText implements encoding.TextMarshaler.
func (s Shape) MarshalText() ([]byte, error) { return enumMarshal(shapeNames[:], int(s), "shape") }

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *Shape) UnmarshalText(b []byte) error {
	i, err := enumParse(shapeNames[:], string(b), "shape")
	*s = Shape(i)
	return err
}

// ServerWait is what the loop does with a server's wait hint.
type ServerWait uint8

// Server wait modes.
const (
	// ServerWaitHonor waits exactly as long as the server asked; a hint
	// beyond MaxServerWait, the wait budget or the caller's deadline stops
	// the call at once with a GiveUpError carrying the hint. The default:
	// retrying sooner than asked only buys another 429.
	ServerWaitHonor ServerWait = iota
	// ServerWaitClamp waits min(hint, MaxServerWait).
	ServerWaitClamp
	// ServerWaitIgnore ignores hints and uses computed backoff.
	ServerWaitIgnore
)

var serverWaitNames = [...]string{ServerWaitHonor: "honor", ServerWaitClamp: "clamp", ServerWaitIgnore: "ignore"}

// String returns the JSON name of w.
func (w ServerWait) String() string { return enumString(serverWaitNames[:], int(w), "server_wait") }

// MarshalText implements encoding.TextMarshaler.
func (w ServerWait) MarshalText() ([]byte, error) {
	return enumMarshal(serverWaitNames[:], int(w), "server_wait")
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (w *ServerWait) UnmarshalText(b []byte) error {
	i, err := enumParse(serverWaitNames[:], string(b), "server_wait")
	*w = ServerWait(i)
	return err
}

func enumString(names []string, i int, what string) string {
	if i >= 0 && i < len(names) {
		return names[i]
	}
	return fmt.Sprintf("%s(%d)", what, i)
}

func enumMarshal(names []string, i int, what string) ([]byte, error) {
	if i >= 0 && i < len(names) {
		return []byte(names[i]), nil
	}
	return nil, fmt.Errorf("rebound: %s: unknown value %d", what, i)
}

func enumParse(names []string, s, what string) (int, error) {
	for i, n := range names {
		if n == s {
			return i, nil
		}
	}
	return 0, fmt.Errorf("rebound: %s: unknown value %q (want %s)", what, s, wantList(names))
}

// wantList lists the values wanted: "a", "a or b", "a, b or c".
func wantList(names []string) string {
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// PolicyError says what is wrong with a Policy, or with the JSON read as
// one.
type PolicyError struct {
	// Key is the JSON key at fault, e.g. "max_delay_ms" or
	// "per_kind.rate_limited.max_attempts"; empty when the fault is in
	// the policy as a whole (a syntax error, an unknown key).
	Key string
	// Reason says what was given and what is wanted, in one line.
	Reason string
}

func (e *PolicyError) Error() string {
	if e.Key == "" {
		return "rebound: policy: " + e.Reason
	}
	return "rebound: policy: " + e.Key + ": " + e.Reason
}

func policyErr(key, format string, args ...any) error {
	return &PolicyError{Key: key, Reason: fmt.Sprintf(format, args...)}
}

// jsonObject decodes data, the value of key ("" for the policy itself),
// as an object. A null value, like an absent key, is left out of it, as
// encoding/json leaves a field alone for null. want says what it is.
func jsonObject(key, want string, data []byte) (map[string]json.RawMessage, error) {
	var obj map[string]json.RawMessage
	err := json.Unmarshal(data, &obj)
	var syntax *json.SyntaxError
	switch {
	case errors.As(err, &syntax):
		return nil, policyErr(key, "%s at byte %d", syntax.Error(), syntax.Offset)
	case err != nil:
		return nil, policyErr(key, "want %s, got %s", want, given(data))
	}
	for k, v := range obj {
		if string(v) == "null" {
			delete(obj, k)
		}
	}
	return obj, nil
}

// knownKeys returns an error for the first key of obj, the value of key,
// that is not one of keys. Keys are matched exactly: the wire form has one
// spelling.
func knownKeys(key string, obj map[string]json.RawMessage, keys []string) error {
	var unknown []string
	for k := range obj {
		if !slices.Contains(keys, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	return policyErr(key, "unknown key %s (want %s)", quote(slices.Min(unknown)), wantList(keys))
}

// msValue reads a duration in milliseconds, as fromMS says.
func msValue(key string, v json.RawMessage, zero time.Duration) (time.Duration, error) {
	if v == nil {
		return 0, nil
	}
	n, err := integer(key, "an integer number of milliseconds", v, 64)
	if err != nil {
		return 0, err
	}
	return fromMS(key, &n, zero)
}

// integer reads v as a JSON integer of bits bits.
func integer(key, want string, v json.RawMessage, bits int) (int64, error) {
	n, err := strconv.ParseInt(string(v), 10, bits)
	switch {
	case err == nil:
		return n, nil
	case errors.Is(err, strconv.ErrRange):
		return 0, policyErr(key, "want %s, got %s (out of range)", want, given(v))
	}
	return 0, policyErr(key, "want %s, got %s", want, given(v))
}

// enumValue reads the name of one of names and returns its index.
func enumValue(key string, v json.RawMessage, names []string) (int, error) {
	var s string
	if v[0] != '"' || json.Unmarshal(v, &s) != nil {
		return 0, policyErr(key, "want a string (%s), got %s", wantList(names), given(v))
	}
	i := slices.Index(names, s)
	if i < 0 {
		return 0, policyErr(key, "unknown value %s (want %s)", quote(s), wantList(names))
	}
	return i, nil
}

// isNumber reports whether the JSON value v is a number.
func isNumber(v json.RawMessage) bool { return v[0] == '-' || '0' <= v[0] && v[0] <= '9' }

// maxGiven is how much of a value an error shows.
const maxGiven = 32

// given shows the JSON value v in an error: as written, cut short if
// long, or "an object" or "an array". A JSON value other than those holds
// no line break.
func given(v []byte) string {
	v = bytes.TrimSpace(v)
	switch {
	case len(v) == 0:
		return "nothing"
	case v[0] == '{':
		return "an object"
	case v[0] == '[':
		return "an array"
	}
	return clip(string(v))
}

// quote shows a string from the input in an error, quoted and cut short if
// long.
func quote(s string) string { return clip(strconv.Quote(s)) }

// clip cuts s to maxGiven bytes, on a rune boundary, marking the cut.
func clip(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if cut := runes.Cut(s, maxGiven); cut != s {
		return cut + "…"
	}
	return s
}

func ptr[T any](v T) *T { return &v }

// ms converts d to whole milliseconds, rounding to the nearest but keeping
// a non-zero duration non-zero.
func ms(d time.Duration) *int64 {
	n := d.Round(time.Millisecond).Milliseconds()
	if n == 0 && d > 0 {
		n = 1
	}
	return &n
}

// fromMS converts a JSON millisecond value: absent is 0 (the default), an
// explicit 0 is zero.
func fromMS(key string, v *int64, zero time.Duration) (time.Duration, error) {
	switch {
	case v == nil:
		return 0, nil
	case *v < 0:
		return 0, policyErr(key, "must not be negative (got %d)", *v)
	case *v == 0:
		return zero, nil
	case *v > math.MaxInt64/int64(time.Millisecond):
		return 0, policyErr(key, "%d ms is too large", *v)
	}
	return time.Duration(*v) * time.Millisecond, nil
}
