package proxyrun

import (
	"os"
	"strconv"
	"strings"

	"github.com/rebound-go/rebound/proxy"
)

// DefaultBodyMemory is --max-body-memory's default: a quarter of the
// memory the process may use (the machine's, or its cgroup's limit if
// lower), at most 1 GiB; 1 GiB when neither can be read.
func DefaultBodyMemory() int64 {
	limit := int64(proxy.DefaultMaxBodyMemory)
	if m := memoryLimit(); m > 0 {
		limit = min(limit, m/4)
	}
	return limit
}

// memoryLimit returns the memory the process may use, in bytes: the
// machine's (/proc/meminfo's MemTotal) or, when lower, its cgroup's
// limit (v2's memory.max, v1's memory.limit_in_bytes); 0 when none can be
// read.
func memoryLimit() int64 {
	var total int64
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.SplitSeq(string(data), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
				if err == nil && kb > 0 {
					total = kb << 10
				}
				break
			}
		}
	}
	for _, f := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// "max", or v1's near-2^63 "no limit", leave the machine's.
		if n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64); err == nil && n > 0 && (total == 0 || n < total) {
			total = n
		}
	}
	return total
}
