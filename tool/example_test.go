package tool_test

import (
	"encoding/json"
	"fmt"

	"github.com/rebound-go/rebound/tool"
)

// A config file names each tool's Kind; a tool it leaves out is Unknown,
// and is not repeated once it may have run.
func ExampleKind() {
	var kinds map[string]tool.Kind
	json.Unmarshal([]byte(`{"search": "read-only", "charge": "idempotent", "send": "side-effects"}`), &kinds)
	for _, name := range []string{"search", "charge", "send", "delete"} {
		fmt.Println(name, kinds[name], kinds[name].Safe())
	}
	// Output:
	// search read-only true
	// charge idempotent true
	// send side-effects false
	// delete unknown false
}
