package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// The costs mode (-costs) says what one request costs each target's
// process at a fixed rate, from outside it, as the kernel counts: CPU time,
// context switches (voluntary: the process slept, waiting for the network
// or a lock; involuntary: the scheduler took its core), and, in a step of
// its own with strace attached (which slows every system call), system
// calls by name. Its workers are counted with it: every thread, and for
// nginx the worker processes.

// procCost is what one target's processes spent on a step's requests.
type procCost struct {
	Target      string             `json:"target"`
	Mode        mode               `json:"mode"`
	Rate        int                `json:"rate"`
	Requests    int                `json:"requests"`
	CPU         time.Duration      `json:"cpu_per_request_ns"`
	Voluntary   float64            `json:"voluntary_switches_per_request"`
	Involuntary float64            `json:"involuntary_switches_per_request"`
	Syscalls    float64            `json:"syscalls_per_request"`
	ByName      map[string]float64 `json:"syscalls_by_name_per_request,omitempty"`
	Note        string             `json:"note,omitempty"`
}

// usage is what the kernel counted for a set of processes so far.
type usage struct {
	ticks                  int64 // user and system CPU time, in clock ticks
	voluntary, involuntary int64
}

// clockTick is the unit of /proc's CPU times: USER_HZ, 100 on Linux.
const clockTick = 10 * time.Millisecond

// processTree returns pid and the processes whose parent it is.
func processTree(pid int) []int {
	pids := []int{pid}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil || child == pid {
			continue
		}
		if f, err := statFields(child); err == nil && len(f) > 1 && f[1] == strconv.Itoa(pid) {
			pids = append(pids, child)
		}
	}
	return pids
}

// statFields returns the fields of /proc/pid/stat after the command's
// name: state, ppid, ... (field 3 of proc(5) first).
func statFields(pid int) ([]string, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the name may hold spaces
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	return strings.Fields(s[i+1:]), nil
}

// measureUsage reads what the kernel counted for pids: CPU time from
// /proc/PID/stat (all threads, living or not) and context switches from
// each thread's /proc/PID/task/TID/status.
func measureUsage(pids []int) (usage, error) {
	var u usage
	for _, pid := range pids {
		f, err := statFields(pid)
		if err != nil {
			return u, err
		}
		if len(f) < 13 {
			return u, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
		}
		utime, _ := strconv.ParseInt(f[11], 10, 64) // field 14
		stime, _ := strconv.ParseInt(f[12], 10, 64) // field 15
		u.ticks += utime + stime
		tasks, err := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "status"))
		if err != nil {
			return u, err
		}
		for _, t := range tasks {
			file, err := os.Open(t)
			if err != nil {
				continue // the thread ended
			}
			lines := bufio.NewScanner(file)
			for lines.Scan() {
				k, v, _ := strings.Cut(lines.Text(), ":")
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				switch k {
				case "voluntary_ctxt_switches":
					u.voluntary += n
				case "nonvoluntary_ctxt_switches":
					u.involuntary += n
				}
			}
			file.Close()
		}
	}
	return u, nil
}

// measureCosts runs two steps against t at rate in mode m, each lasting d:
// one read from /proc, one with strace counting system calls.
func measureCosts(ctx context.Context, t target, m mode, rate int, d time.Duration) (procCost, error) {
	c := procCost{Target: t.name, Mode: m, Rate: rate}
	pids := processTree(t.pid)
	before, err := measureUsage(pids)
	if err != nil {
		return c, err
	}
	p := step(ctx, t, m, rate, d)
	after, err := measureUsage(pids)
	if err != nil {
		return c, err
	}
	if p.Requests == 0 || p.Errors > 0 {
		return c, fmt.Errorf("%s: %d errors in %d requests, the first: %s", t.name, p.Errors, p.Requests, p.FirstError)
	}
	// The drain after the step is one more request at most; the
	// warm-up's, none.
	n := float64(p.Requests)
	c.Requests = p.Requests
	c.CPU = time.Duration(float64(after.ticks-before.ticks) * float64(clockTick) / n)
	c.Voluntary = float64(after.voluntary-before.voluntary) / n
	c.Involuntary = float64(after.involuntary-before.involuntary) / n

	calls, total, err := straceStep(ctx, t, pids, m, rate, d)
	switch {
	case err != nil:
		c.Note = "no system calls: " + err.Error()
	default:
		c.Syscalls = total
		c.ByName = calls
	}
	return c, nil
}

// straceStep runs a step with strace -c attached to pids and returns the
// system calls per request, by name and in all.
func straceStep(ctx context.Context, t target, pids []int, m mode, rate int, d time.Duration) (map[string]float64, float64, error) {
	bin, err := exec.LookPath("strace")
	if err != nil {
		return nil, 0, err
	}
	out, err := os.CreateTemp("", "gateway-strace-*.txt")
	if err != nil {
		return nil, 0, err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	args := []string{"-c", "-f", "-o", out.Name()}
	for _, pid := range pids {
		args = append(args, "-p", strconv.Itoa(pid))
	}
	cmd := exec.Command(bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, 0, err
	}
	// strace says on stderr when it has attached; give it a moment.
	select {
	case <-time.After(time.Second):
	case <-ctx.Done():
	}
	p := step(ctx, t, m, rate, d)
	cmd.Process.Signal(os.Interrupt)
	if err := cmd.Wait(); err != nil && !strings.Contains(err.Error(), "interrupt") && cmd.ProcessState.ExitCode() > 0 {
		return nil, 0, fmt.Errorf("strace: %v: %s", err, stderr.String())
	}
	if p.Requests == 0 {
		return nil, 0, fmt.Errorf("no request went through under strace")
	}
	calls, total, err := parseStraceSummary(out)
	if err != nil {
		return nil, 0, err
	}
	// The drain's requests and the second before the step are in the
	// count too: a request or two, against thousands.
	n := float64(p.Requests)
	for k := range calls {
		calls[k] /= n
	}
	return calls, float64(total) / n, nil
}

// parseStraceSummary reads the table strace -c writes: per system call,
// its count in the fourth column (the errors column may be empty).
func parseStraceSummary(r io.Reader) (map[string]float64, int64, error) {
	calls := map[string]float64{}
	var total int64
	lines := bufio.NewScanner(r)
	for lines.Scan() {
		f := strings.Fields(lines.Text())
		if len(f) < 5 || f[0] == "%" || strings.HasPrefix(f[0], "-") {
			continue
		}
		n, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			continue
		}
		name := f[len(f)-1]
		if name == "total" {
			total = n
			continue
		}
		calls[name] = float64(n)
	}
	if total == 0 {
		return nil, 0, fmt.Errorf("strace counted no system calls")
	}
	return calls, total, lines.Err()
}

// writeCosts writes the costs as a table: per request, CPU, context
// switches and system calls, the commonest of these by name.
func writeCosts(w io.Writer, costs []procCost) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\trate/s\ttarget\trequests\tCPU/req\tvoluntary cs/req\tinvoluntary cs/req\tsyscalls/req\tcommonest syscalls/req\t")
	for _, c := range costs {
		names := slices.SortedFunc(maps.Keys(c.ByName), func(a, b string) int {
			if d := c.ByName[b] - c.ByName[a]; d != 0 {
				if d > 0 {
					return 1
				}
				return -1
			}
			return strings.Compare(a, b)
		})
		var top []string
		for _, k := range names[:min(5, len(names))] {
			top = append(top, fmt.Sprintf("%s %.2f", k, c.ByName[k]))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%.0f µs\t%.2f\t%.2f\t%.1f\t%s\t\n", c.Mode, c.Rate, c.Target, c.Requests,
			float64(c.CPU)/float64(time.Microsecond), c.Voluntary, c.Involuntary, c.Syscalls, strings.Join(top, ", ")+c.Note)
	}
	tw.Flush()
}
