package reboundmcp

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestToolRulesReadFromAConfigFile(t *testing.T) {
	var rules map[string]ToolRule
	if err := json.Unmarshal([]byte(`{"create_entities": "idempotent", "read_graph": "read-only", "send": "side-effects"}`), &rules); err != nil {
		t.Fatal(err)
	}
	if rules["create_entities"] != ToolIdempotent || rules["read_graph"] != ToolReadOnly || rules["send"] != ToolSideEffects {
		t.Errorf("rules %v", rules)
	}
	b, err := json.Marshal(rules)
	if err != nil || !strings.Contains(string(b), `"send":"side-effects"`) {
		t.Errorf("marshalled %s, %v", b, err)
	}
	err = json.Unmarshal([]byte(`{"x": "maybe"}`), &rules)
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), `"maybe"`) {
		t.Errorf("a rule that is none: %v", err)
	}
	if _, err := ToolRule(0).MarshalText(); err == nil {
		t.Error("the zero rule marshalled")
	}
	if ToolRule(9).String() != "ToolRule(9)" {
		t.Error(ToolRule(9).String())
	}
}
