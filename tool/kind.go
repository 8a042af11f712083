package tool

import "fmt"

// Kind is what a tool's calls may safely do again. It is one word for the
// guard here and for package reboundmcp, which resends an MCP tool call
// cut short by a crash only if its Kind says that is safe; its text form
// ("read-only", "idempotent", "side-effects") is how config files name it.
type Kind uint8

// Kinds of tool.
const (
	// Unknown, the zero Kind, says nothing is known of the tool, and so
	// it is treated as SideEffects: never repeated once it may have run.
	// A tool is only ever retried because someone said it may be.
	Unknown Kind = iota
	// ReadOnly tools change nothing: they are retried under their
	// policy, and may be hedged.
	ReadOnly
	// Idempotent tools have side effects but accept an idempotency key,
	// and so are retried with one: IdempotencyKeyOf the call, the same for
	// every attempt of one Execute. Give each call an ID (Call.ID) to have
	// a repeat of it recognised beyond one Execute.
	Idempotent
	// SideEffects tools may act on the world: they are attempted exactly
	// once.
	SideEffects
)

var kindNames = [...]string{Unknown: "unknown", ReadOnly: "read-only", Idempotent: "idempotent", SideEffects: "side-effects"}

// String returns the kind's name: "unknown", "read-only", "idempotent" or
// "side-effects".
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Safe reports whether a call of this kind may be made again after an
// attempt that may have run: true for ReadOnly and Idempotent, false for
// SideEffects, Unknown and anything else.
func (k Kind) Safe() bool { return k == ReadOnly || k == Idempotent }

// MarshalText returns the kind's name in a config file. Unknown has none:
// a config says what it knows.
func (k Kind) MarshalText() ([]byte, error) {
	if k == Unknown || int(k) >= len(kindNames) {
		return nil, fmt.Errorf("tool: kind %v has no name in a config file", k)
	}
	return []byte(kindNames[k]), nil
}

// UnmarshalText reads a kind's name, so that a JSON object of tool names
// to "read-only", "idempotent" or "side-effects" decodes into a
// map[string]Kind.
func (k *Kind) UnmarshalText(b []byte) error {
	for i, name := range kindNames {
		if Kind(i) != Unknown && name == string(b) {
			*k = Kind(i)
			return nil
		}
	}
	return fmt.Errorf("tool: kind %q is not read-only, idempotent or side-effects", b)
}
