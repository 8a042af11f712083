package reboundmcp

import "fmt"

var toolRuleNames = [...]string{ToolReadOnly: "read-only", ToolIdempotent: "idempotent", ToolSideEffects: "side-effects"}

// String returns the rule's name in a config file: "read-only",
// "idempotent" or "side-effects".
func (r ToolRule) String() string {
	if int(r) < len(toolRuleNames) && toolRuleNames[r] != "" {
		return toolRuleNames[r]
	}
	return fmt.Sprintf("ToolRule(%d)", uint8(r))
}

// MarshalText returns the rule's name.
func (r ToolRule) MarshalText() ([]byte, error) {
	if int(r) < len(toolRuleNames) && toolRuleNames[r] != "" {
		return []byte(toolRuleNames[r]), nil
	}
	return nil, fmt.Errorf("reboundmcp: no such tool rule %d", uint8(r))
}

// UnmarshalText reads a rule's name, so that a JSON object of tool names
// to "read-only", "idempotent" or "side-effects" decodes into
// Options.Tools.
func (r *ToolRule) UnmarshalText(b []byte) error {
	for i, name := range toolRuleNames {
		if name != "" && name == string(b) {
			*r = ToolRule(i)
			return nil
		}
	}
	return fmt.Errorf("reboundmcp: tool rule %q is not read-only, idempotent or side-effects", b)
}

// safe says whether a call cut short may be sent again.
func (r ToolRule) safe() bool { return r == ToolReadOnly || r == ToolIdempotent }
