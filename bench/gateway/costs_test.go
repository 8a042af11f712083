package main

import (
	"os"
	"strings"
	"testing"
)

func TestParseStraceSummaryCountsEachCall(t *testing.T) {
	summary := `% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 77.21    0.000210         210       100           munmap
 22.79    0.000062          62        40        40 connect
  0.00    0.000000           0         1           read
------ ----------- ----------- --------- --------- ----------------
100.00    0.000272           3       141        40 total
`
	calls, total, err := parseStraceSummary(strings.NewReader(summary))
	if err != nil || total != 141 || calls["munmap"] != 100 || calls["connect"] != 40 || calls["read"] != 1 || len(calls) != 3 {
		t.Errorf("calls %v, total %d, error %v", calls, total, err)
	}
	if _, _, err := parseStraceSummary(strings.NewReader("strace: attach: ptrace(PTRACE_SEIZE, 1): Operation not permitted\n")); err == nil {
		t.Error("no table, yet no error")
	}
}

// TestMeasureUsageSeesThisProcessWork checks the /proc readings against
// this process: its CPU time grows as it works, and it has switched
// context at least once.
func TestMeasureUsageSeesThisProcessWork(t *testing.T) {
	pids := processTree(os.Getpid())
	before, err := measureUsage(pids)
	if err != nil {
		t.Fatal(err)
	}
	for after := before; after.ticks == before.ticks; {
		for i := range 1 << 20 {
			_ = strings.Repeat("x", i%7)
		}
		if after, err = measureUsage(pids); err != nil {
			t.Fatal(err)
		}
	}
	if before.voluntary+before.involuntary == 0 {
		t.Errorf("no context switch counted: %+v", before)
	}
}
