package tool_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/tool"
)

// TestUnknownKindIsNeverRepeatedAfterACut: a tool registered with the zero
// Spec, of which nothing is known, is run once when its call may have run
// (a lost reply, a server error after the request left), however many
// attempts its Policy allows, and the model is told to check.
func TestUnknownKindIsNeverRepeatedAfterACut(t *testing.T) {
	for _, cut := range []error{errTimeout, errBusy} {
		var calls atomic.Int64
		var r tool.Registry
		r.Register("act", tool.Spec{Policy: rebound.Policy{MaxAttempts: 10}}, flaky(&calls, nil, cut, cut))
		res := r.Execute(context.Background(), tool.Call{ID: "c1", Name: "act"})
		if f := res.Failure; calls.Load() != 1 || f == nil || !f.MayHaveTakenEffect {
			t.Errorf("after %v: %d calls, failure %+v; want one call that may have taken effect", cut, calls.Load(), f)
		}
	}
	if tool.Unknown.Safe() || tool.Kind(0) != tool.Unknown || tool.SideEffects.Safe() || tool.Kind(9).Safe() {
		t.Error("a kind other than read-only or idempotent is called safe to repeat")
	}
	if !tool.ReadOnly.Safe() || !tool.Idempotent.Safe() {
		t.Error("read-only or idempotent is not called safe to repeat")
	}
}

// TestKindsReadFromAConfigFile: a JSON object of tool names to kinds
// decodes, and encodes back, by the names config files use; the zero Kind
// has no such name, and a wrong name is one line naming it.
func TestKindsReadFromAConfigFile(t *testing.T) {
	var kinds map[string]tool.Kind
	if err := json.Unmarshal([]byte(`{"create_entities": "idempotent", "read_graph": "read-only", "send": "side-effects"}`), &kinds); err != nil {
		t.Fatal(err)
	}
	if kinds["create_entities"] != tool.Idempotent || kinds["read_graph"] != tool.ReadOnly || kinds["send"] != tool.SideEffects {
		t.Errorf("kinds %v", kinds)
	}
	b, err := json.Marshal(kinds)
	if err != nil || !strings.Contains(string(b), `"send":"side-effects"`) {
		t.Errorf("marshalled %s, %v", b, err)
	}
	for _, bad := range []string{`{"x": "maybe"}`, `{"x": "unknown"}`, `{"x": ""}`} {
		err = json.Unmarshal([]byte(bad), &kinds)
		if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "read-only, idempotent or side-effects") {
			t.Errorf("%s: %v", bad, err)
		}
	}
	if _, err := tool.Unknown.MarshalText(); err == nil {
		t.Error("the zero kind marshalled")
	}
	if got := tool.Kind(9).String(); got != "Kind(9)" {
		t.Error(got)
	}
	if got := tool.Unknown.String(); got != "unknown" {
		t.Error(got)
	}
}
