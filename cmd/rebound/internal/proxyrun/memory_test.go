package proxyrun

import (
	"runtime"
	"testing"

	"github.com/rebound-go/rebound/proxy"
)

// TestDefaultBodyMemory: --max-body-memory's default is a quarter of
// the memory the process may use, read from the machine, at most 1 GiB.
func TestDefaultBodyMemory(t *testing.T) {
	limit := memoryLimit()
	if runtime.GOOS == "linux" && limit <= 0 {
		t.Fatalf("memoryLimit() = %d on Linux: /proc/meminfo not read", limit)
	}
	got := DefaultBodyMemory()
	want := int64(proxy.DefaultMaxBodyMemory)
	if limit > 0 {
		want = min(want, limit/4)
	}
	t.Logf("memory %d bytes, default body memory %d", limit, got)
	if got != want || got <= 0 {
		t.Errorf("DefaultBodyMemory() = %d, want %d", got, want)
	}
}
