package rebound

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The shape the package keeps, so that a newcomer can hold it in their
// head: one place that runs the retry protocol, a small public face, short
// files, and nothing imported beyond the standard library and the
// module's own internal packages.
func TestPackageShape(t *testing.T) {
	fset := token.NewFileSet()
	files, _ := filepath.Glob("*.go")
	var allowCallers []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(src, []byte("\n")); n > 400 {
			t.Errorf("%s has %d lines; keep files under 400", name, n)
		}
		f, err := parser.ParseFile(fset, name, src, parser.ImportsOnly|parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") && !strings.HasPrefix(path, "github.com/rebound-go/rebound/internal/") {
				t.Errorf("%s imports %s: the root package uses the standard library only", name, path)
			}
		}
		f, err = parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if call, ok := n.(*ast.CallExpr); ok {
					if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Allow" {
						allowCallers = append(allowCallers, name+": "+fn.Name.Name)
					}
				}
				return true
			})
		}
	}
	if len(allowCallers) != 1 {
		t.Errorf("the breaker is asked from %v: the retry protocol belongs in one place", allowCallers)
	}
	out, err := exec.Command("go", "doc", "-short", ".").Output()
	if err != nil {
		t.Fatalf("go doc: %v", err)
	}
	// 61 until hedging (Hedge, its Delay and Observe, ErrHedgeLost,
	// EventHedge) came, then the Guard that spend caps admit attempts by
	// (Guard, WithGuard), then ProviderSideEffects, which knows the
	// providers' calls that create nothing.
	if n := bytes.Count(out, []byte("\n")); n > 66 {
		t.Errorf("%d lines of go doc -short: keep the public face to 66", n)
	}
}
