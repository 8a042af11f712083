package rebound

import (
	"fmt"
	"strings"
)

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
