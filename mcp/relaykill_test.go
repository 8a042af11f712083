package reboundmcp

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"sync"
	"testing"
)

// relayKill runs the server childArgv names and relays its standard input
// and output line by line, as a client's pipes would, with one exception:
// the first time (of all the relays sharing childLog) a tools/call of
// childTool goes through, the server gets the call, then the relay and
// the server die before its answer reaches the client, as a server killed
// mid-call after it acted. If childTool ends in "!", they die as soon as
// the call is passed on, before the server can act on it.
func relayKill() {
	var argv []string
	if err := json.Unmarshal([]byte(os.Getenv(childArgv)), &argv); err != nil {
		os.Exit(2)
	}
	tool, marker := os.Getenv(childTool), os.Getenv(childLog)
	early := len(tool) > 0 && tool[len(tool)-1] == '!'
	if early {
		tool = tool[:len(tool)-1]
	}
	_, err := os.Stat(marker)
	armed := os.IsNotExist(err)
	server := exec.Command(argv[0], argv[1:]...)
	server.Stderr = os.Stderr
	in, _ := server.StdinPipe()
	out, _ := server.StdoutPipe()
	if err := server.Start(); err != nil {
		os.Exit(2)
	}
	die := func() {
		os.WriteFile(marker, []byte("killed\n"), 0o600)
		server.Process.Kill()
		os.Exit(3)
	}
	var mu sync.Mutex
	var doomed any // the ID of the call whose answer never arrives
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		sc.Buffer(nil, 1<<24)
		for sc.Scan() {
			line := sc.Bytes()
			var req struct {
				ID     any    `json:"id"`
				Method string `json:"method"`
				Params struct {
					Name string `json:"name"`
				} `json:"params"`
			}
			json.Unmarshal(line, &req)
			in.Write(append(line, '\n'))
			if armed && req.Method == "tools/call" && req.Params.Name == tool {
				if early {
					die()
				}
				mu.Lock()
				doomed = req.ID
				mu.Unlock()
			}
		}
		in.Close()
	}()
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var resp struct {
			ID     any             `json:"id"`
			Result json.RawMessage `json:"result"`
		}
		json.Unmarshal(sc.Bytes(), &resp)
		mu.Lock()
		hit := doomed != nil && resp.ID == doomed && resp.Result != nil
		mu.Unlock()
		if hit {
			die()
		}
		os.Stdout.Write(append(sc.Bytes(), '\n'))
	}
	server.Wait()
	os.Exit(0)
}

// killingRelay is cmd behind a relay that kills it the first time tool is
// called (see relayKill).
func killingRelay(t *testing.T, cmd *exec.Cmd, tool string) *exec.Cmd {
	argv, _ := json.Marshal(append([]string{cmd.Path}, cmd.Args[1:]...))
	relay := exec.Command(os.Args[0])
	relay.Env = append(append([]string(nil), cmd.Env...), childMode+"=relay-kill", childArgv+"="+string(argv), childTool+"="+tool, childLog+"="+t.TempDir()+"/killed")
	relay.Stderr = cmd.Stderr
	return relay
}
