package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"testing"
)

// childArgs is the environment variable that makes the test binary run
// the command with the arguments it holds (a JSON array) instead of the
// tests: tests that kill the command run it as a process of its own.
const childArgs = "REBOUND_TEST_COMMAND"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == mcpServerArg {
		runTestMCPServer(os.Args[2:]) // the server "rebound mcp" runs, below the command
	}
	if len(os.Args) > 1 && os.Args[1] == byteCopyArg {
		runByteCopy(os.Args[2:])
	}
	if len(os.Args) > 1 && os.Args[1] == chaosServerArg {
		runChaosMCPServer(os.Args[2:])
	}
	if args := os.Getenv(childArgs); args != "" {
		var a []string
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			os.Stderr.WriteString("bad " + childArgs + ": " + err.Error() + "\n")
			os.Exit(2)
		}
		ctx, stop := signalContext()
		code := run(ctx, a, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// commandProcess returns the command "rebound args..." as a process of its own.
func commandProcess(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	a, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childArgs+"="+string(a))
	return cmd
}
