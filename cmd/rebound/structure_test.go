package main

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMainPackageAtMost1200Lines: the main package parses flags and
// dispatches; each command's work lives in its own package under
// internal/, so that the command line stays short enough to read at once.
func TestMainPackageAtMost1200Lines(t *testing.T) {
	total := 0
	for _, name := range mainFiles(t) {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		total += bytes.Count(src, []byte("\n"))
	}
	if total > 1200 {
		t.Errorf("the main package has %d lines (non-test); keep it to 1200: move a command's work into its package under internal/", total)
	}
}

// TestMainPackageFunctionsAtMost80Lines: no function of the main package
// runs over 80 lines.
func TestMainPackageFunctionsAtMost80Lines(t *testing.T) {
	fset := token.NewFileSet()
	for _, name := range mainFiles(t) {
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			if n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1; n > 80 {
				t.Errorf("%s: %s has %d lines; keep functions to 80", name, fn.Name.Name, n)
			}
		}
	}
}

// mainFiles returns the main package's files, tests left out.
func mainFiles(t *testing.T) []string {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil || len(names) == 0 {
		t.Fatalf("no Go files here (%v)", err)
	}
	var files []string
	for _, n := range names {
		if !strings.HasSuffix(n, "_test.go") {
			files = append(files, n)
		}
	}
	return files
}
