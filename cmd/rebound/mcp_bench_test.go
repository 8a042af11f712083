package main

import (
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// byteCopyArg, as the test binary's first argument, makes it a process
// that starts the command after it and only copies bytes between its own
// pipes and the command's: the least any process between an MCP client
// and its server can cost, the floor "rebound mcp" is measured against.
const byteCopyArg = "-rebound.test-byte-copy"

// runByteCopy starts args as a child on pipes and copies stdin to the
// child's stdin and the child's stdout to stdout until the child's stdout
// ends, then exits with 0.
func runByteCopy(args []string) {
	child := exec.Command(args[0], args[1:]...)
	child.Stderr = os.Stderr
	in, err := child.StdinPipe()
	if err != nil {
		os.Exit(2)
	}
	out, err := child.StdoutPipe()
	if err != nil {
		os.Exit(2)
	}
	if err := child.Start(); err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(2)
	}
	go func() {
		io.Copy(in, os.Stdin)
		in.Close()
	}()
	io.Copy(os.Stdout, out)
	child.Wait()
	os.Exit(0)
}

// latencies are the durations of one kind of call, in the order made.
type latencies []time.Duration

// quantile returns the q-quantile (0 < q < 1) of l, by the nearest rank.
func (l latencies) quantile(q float64) time.Duration {
	s := slices.Clone(l)
	slices.Sort(s)
	i := int(q*float64(len(s)) + 0.5)
	return s[min(max(i-1, 0), len(s)-1)]
}

// connectStdio returns a client session over the process cmd (an MCP
// server on stdio, or a process in front of one), closed when b ends.
func connectStdio(b *testing.B, cmd *exec.Cmd) *mcp.ClientSession {
	b.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	cs, err := client.Connect(b.Context(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		b.Fatalf("connect %s: %v", cmd.Args, err)
	}
	b.Cleanup(func() { cs.Close() })
	return cs
}

// BenchmarkMCPAddedLatency measures what "rebound mcp" adds to a
// tools/call over stdio, against what a process that only copies bytes
// adds: three sessions to the same Go SDK server (straight to it, through
// the byte copier, through "rebound mcp" with its defaults but logging
// off), called in turn one call at a time, so that the three see the same
// machine. Reported: the p50 and p99 of the direct call, what each
// process in the path adds to them (its quantile less the direct one),
// and rebound's added p50 as a multiple of the copier's.
func BenchmarkMCPAddedLatency(b *testing.B) {
	server := []string{os.Args[0], mcpServerArg, ""}
	direct := exec.Command(server[0], server[1:]...)
	copier := exec.Command(os.Args[0], append([]string{byteCopyArg}, server...)...)
	rebound := commandProcess(b, append([]string{"mcp", "--log", "off", "--"}, server...)...)
	sessions := []*mcp.ClientSession{connectStdio(b, direct), connectStdio(b, copier), connectStdio(b, rebound)}
	params := &mcp.CallToolParams{Name: "pid", Arguments: map[string]any{}}
	call := func(cs *mcp.ClientSession) time.Duration {
		start := time.Now()
		res, err := cs.CallTool(b.Context(), params)
		if err != nil || res.IsError {
			b.Fatalf("tools/call pid: %v %+v", err, res)
		}
		return time.Since(start)
	}
	for _, cs := range sessions { // the first call of each warms its path
		call(cs)
	}
	took := make([]latencies, len(sessions))
	b.ReportAllocs()
	for b.Loop() {
		for i, cs := range sessions {
			took[i] = append(took[i], call(cs))
		}
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	for _, q := range []struct {
		name string
		q    float64
	}{{"p50", 0.50}, {"p99", 0.99}} {
		base := took[0].quantile(q.q)
		b.ReportMetric(us(base), "direct-"+q.name+"-µs")
		b.ReportMetric(us(took[1].quantile(q.q)-base), "copy-added-"+q.name+"-µs")
		b.ReportMetric(us(took[2].quantile(q.q)-base), "rebound-added-"+q.name+"-µs")
	}
	for i, name := range []string{"direct", "copy", "rebound"} {
		b.ReportMetric(us(slices.Max(took[i])), name+"-max-µs")
	}
	copyAdded := took[1].quantile(0.5) - took[0].quantile(0.5)
	if copyAdded > 0 {
		b.ReportMetric(float64(took[2].quantile(0.5)-took[0].quantile(0.5))/float64(copyAdded), "rebound/copy-p50")
	}
}

// BenchmarkMCPCrashToAnswer measures, through "rebound mcp", the time from
// the server's death (SIGKILL, between calls) to the answer of the next
// read-only call: noticing the death, starting a new server, replaying
// initialize, listing its tools and making the call. --healthy-after is
// 1ns so that every crash is a first crash, restarted at once, as the one
// crash of a server that had been running for a while is; the backoff
// between repeated crashes is the schedule's, not a cost.
func BenchmarkMCPCrashToAnswer(b *testing.B) {
	cs := connectStdio(b, commandProcess(b, append([]string{"mcp", "--log", "off", "--healthy-after", "1ns", "--"},
		os.Args[0], mcpServerArg, "")...))
	params := &mcp.CallToolParams{Name: "pid", Arguments: map[string]any{}}
	pid := func() int {
		res, err := cs.CallTool(b.Context(), params)
		if err != nil || res.IsError {
			b.Fatalf("tools/call pid: %v %+v", err, res)
		}
		n, _ := strconv.Atoi(res.Content[0].(*mcp.TextContent).Text)
		return n
	}
	var took latencies
	for b.Loop() {
		b.StopTimer()
		old := pid()
		b.StartTimer()
		start := time.Now()
		syscall.Kill(old, syscall.SIGKILL)
		if pid() == old {
			b.Fatal("the answer came from the killed server")
		}
		took = append(took, time.Since(start))
	}
	b.ReportMetric(float64(took.quantile(0.5))/float64(time.Millisecond), "p50-ms")
	b.ReportMetric(float64(took.quantile(0.99))/float64(time.Millisecond), "p99-ms")
}
