package rebound

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// layout is the package's files from the ground up (docs/design.md draws
// it): a file uses only names defined in itself or in a file below it.
var layout = []string{
	"doc.go",
	"wire.go",
	"verdict.go",
	"errors.go",
	"classify.go",
	"seams.go",
	"hedge.go",
	"policy.go",
	"policy_json.go",
	"loop.go",
	"engine.go",
	"race.go",
	"do.go",
	"stream.go",
	"transport.go",
	"roundtrip.go",
}

// The shape the package keeps, so that a newcomer can hold it in their
// head: one place that runs the retry protocol, at most 16 files standing
// in the order of layout, a small public face, short files, and nothing
// imported beyond the standard library and the module's own internal
// packages.
func TestPackageShape(t *testing.T) {
	fset := token.NewFileSet()
	names, _ := filepath.Glob("*.go")
	names = slices.DeleteFunc(names, func(n string) bool { return strings.HasSuffix(n, "_test.go") })
	if len(layout) > 16 {
		t.Errorf("the layout has %d files; the root holds at most 16", len(layout))
	}
	if !slices.Equal(slices.Sorted(slices.Values(names)), slices.Sorted(slices.Values(layout))) {
		t.Errorf("the package's files are %v; the layout (docs/design.md) has %v", names, layout)
	}
	var files []*ast.File
	var allowCallers []string
	for _, name := range names {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(src, []byte("\n")); n > 400 {
			t.Errorf("%s has %d lines; keep files under 400", name, n)
		}
		f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") && !strings.HasPrefix(path, "github.com/rebound-go/rebound/internal/") {
				t.Errorf("%s imports %s: the root package uses the standard library only", name, path)
			}
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
	for _, up := range usesAbove(t, fset, files) {
		t.Error(up)
	}
	out, err := exec.Command("go", "doc", "-short", ".").Output()
	if err != nil {
		t.Fatalf("go doc: %v", err)
	}
	// 66 once hedging, the Guard and ProviderSideEffects had come; 60
	// since the readers of the context's marks went to internal/callctx,
	// the Default constants and the Rand type left, and the causes an
	// attempt's context ends with became one group.
	if n := bytes.Count(out, []byte("\n")); n > 60 {
		t.Errorf("%d lines of go doc -short: keep the public face to 60", n)
	}
}

// TestNoModuleFileOver500Lines: no non-test Go file of any module of the
// repository (the root's and those go.work ties to it) runs over 500
// lines, so that a file can be read at once; one that grows past it is
// split where its parts have their own names.
func TestNoModuleFileOver500Lines(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{} // a module's directory, relative to the root -> files read
	for dir := range strings.FieldsSeq(string(out)) {
		rel, err := filepath.Rel(root, dir)
		if err != nil || strings.HasPrefix(rel, "..") {
			t.Fatalf("module %s lies outside the repository", dir)
		}
		seen[rel] = 0
	}
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			// The go command ignores these, as the modules' builds do.
			if path != "." && (name == "testdata" || name == "node_modules" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if n := bytes.Count(src, []byte("\n")); n > 500 {
			t.Errorf("%s has %d lines; keep a non-test file to 500: split it where its parts have their own names", path, n)
		}
		for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
			if _, ok := seen[dir]; ok {
				seen[dir]++
				break
			}
			if dir == "." {
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for dir, n := range seen {
		if n == 0 {
			t.Errorf("no Go file read in module %s: the walk missed it", dir)
		}
	}
}

// usesAbove type-checks the package and returns each use of a name (a
// type, function, variable, constant, field or method) in a file below the
// file that defines it, by layout.
func usesAbove(t *testing.T, fset *token.FileSet, files []*ast.File) []string {
	t.Helper()
	exports := exportData(t)
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	pkg, err := conf.Check("github.com/rebound-go/rebound", fset, files, info)
	if err != nil {
		t.Fatalf("type-checking the package: %v", err)
	}
	floor := map[string]int{}
	for i, name := range layout {
		floor[name] = i
	}
	seen := map[string]bool{}
	var ups []string
	for id, obj := range info.Uses {
		if obj.Pkg() != pkg || !obj.Pos().IsValid() {
			continue
		}
		user, def := fset.Position(id.Pos()).Filename, fset.Position(obj.Pos()).Filename
		if floor[def] <= floor[user] {
			continue
		}
		msg := fmt.Sprintf("%s uses %s, defined above it in %s", user, obj.Name(), def)
		if !seen[msg] {
			seen[msg] = true
			ups = append(ups, msg)
		}
	}
	slices.Sort(ups)
	return ups
}

// exportData maps the import path of each package the root imports, at
// any depth, to the file of its export data: that of this test binary's
// build (with -race under the race detector), which the go command has
// in its cache already; from another build it would compile the
// standard library again, a minute of a cold run.
func exportData(t *testing.T) map[string]string {
	t.Helper()
	args := []string{"list", "-export", "-deps", "-f", "{{.ImportPath}}={{.Export}}", "."}
	if info, ok := debug.ReadBuildInfo(); ok && slices.Contains(info.Settings, debug.BuildSetting{Key: "-race", Value: "true"}) {
		args = slices.Insert(args, 1, "-race")
	}
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	exports := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if path, file, ok := strings.Cut(sc.Text(), "="); ok && file != "" {
			exports[path] = file
		}
	}
	return exports
}
