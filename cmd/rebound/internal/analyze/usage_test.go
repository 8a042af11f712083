package analyze

import (
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// TestAnalyzeHelpListsEveryKey checks that "rebound help analyze", where
// the --json form is documented, names every key the command can print.
func TestAnalyzeHelpListsEveryKey(t *testing.T) {
	keys := map[string]bool{}
	var walk func(reflect.Type)
	walk = func(typ reflect.Type) {
		switch typ.Kind() {
		case reflect.Pointer, reflect.Slice:
			walk(typ.Elem())
		case reflect.Struct:
			for f := range typ.Fields() {
				if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
					keys[name] = true
				}
				walk(f.Type)
			}
		}
	}
	walk(reflect.TypeFor[Report]())
	if len(keys) < 30 {
		t.Fatalf("only %d keys found in Report", len(keys))
	}
	for k := range keys {
		if !regexp.MustCompile(`\b` + k + `\b`).MatchString(Usage) {
			t.Errorf("key %q is printed but not documented in the help", k)
		}
	}
}
