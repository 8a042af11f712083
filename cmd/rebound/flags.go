package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// foreignFlag returns a one-line reason if a flag given on the command
// line belongs only to scenarios other than scenario: owners maps such a
// flag to the scenarios it applies to; flags not in it apply to all.
func foreignFlag(fs *flag.FlagSet, scenario string, owners map[string][]string) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if of, ok := owners[f.Name]; ok && err == nil && !slices.Contains(of, scenario) {
			err = fmt.Errorf("--%s does not apply to the %s scenario: it belongs to --scenario %s", f.Name, scenario, strings.Join(of, " or "))
		}
	})
	return err
}

// printJSON prints v as the one JSON object of a --json run and returns
// the exit code.
func printJSON(stdout, stderr io.Writer, v any) int {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(stderr, "rebound: writing JSON: %v\n", err)
		return 1
	}
	return 0
}

// isTerminal reports whether stderr, a command's, is a terminal.
func isTerminal(stderr io.Writer) bool {
	if s, ok := stderr.(cmdStderr); ok {
		stderr = s.Writer
	}
	f, ok := stderr.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
