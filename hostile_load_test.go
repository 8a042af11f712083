package rebound_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/memnet"
	"github.com/rebound-go/rebound/observe"
)

// The credentials every hostile call carries; the hostile server echoes
// them in every error.
const (
	hostileToken = "sk-proj-HOSTILESECRET0123456789abcdef"
	hostileKey   = "anthropic-HOSTILEKEY-0123456789"
)

// leakCheck counts outputs that hold a credential: events, log records,
// errors. It is an Observer and an io.Writer for a slog handler.
type leakCheck struct {
	leaks   atomic.Int64
	mu      sync.Mutex // guards example
	example string
}

func (c *leakCheck) check(text string) { c.checkBytes([]byte(text)) }

func (c *leakCheck) checkBytes(text []byte) {
	if bytes.Contains(text, []byte(hostileToken[:12])) || bytes.Contains(text, []byte(hostileKey[:12])) {
		if c.leaks.Add(1) == 1 {
			c.mu.Lock()
			c.example = string(text)
			c.mu.Unlock()
		}
	}
}

func (c *leakCheck) Write(p []byte) (int, error) { c.checkBytes(p); return len(p), nil }

// Observe checks what an event carries that could hold a credential: its
// error's message, and an HTTP error's headers and body, or a stream
// error's data. (The rest of an event is numbers and the target's host.)
func (c *leakCheck) Observe(e rebound.Event) {
	if e.Err == nil {
		return
	}
	c.check(e.Err.Error())
	var he *rebound.HTTPError
	if errors.As(e.Err, &he) {
		c.checkBytes(he.Body)
		for _, vs := range he.Header {
			for _, v := range vs {
				c.check(v)
			}
		}
	}
	var se *rebound.StreamError
	if errors.As(e.Err, &se) {
		c.checkBytes(se.Data)
	}
}

func (c *leakCheck) err() error {
	if n := c.leaks.Load(); n > 0 {
		c.mu.Lock()
		defer c.mu.Unlock()
		return fmt.Errorf("%d outputs held a credential, e.g. %.300s", n, c.example)
	}
	return nil
}

// hostileCall makes one call to mode with the credentials and a deadline
// (none if zero), reads what comes back as an SDK would (its first 256 KiB),
// and returns when it was done and the error, if any.
func hostileCall(client *http.Client, base, mode string, deadline time.Time) (time.Time, error) {
	ctx := context.Background()
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/"+mode, strings.NewReader(`{"model":"m"}`))
	req.Header.Set("Authorization", "Bearer "+hostileToken)
	req.Header.Set("X-Api-Key", hostileKey)
	resp, err := client.Do(req)
	if err != nil {
		return time.Now(), err
	}
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 256<<10))
	resp.Body.Close()
	return time.Now(), err
}

// countingDialer dials loopback and counts the connections open.
type countingDialer struct {
	net.Dialer
	open atomic.Int64
}

func (d *countingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := d.Dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	d.open.Add(1)
	return &countedConn{Conn: c, d: d}, nil
}

type countedConn struct {
	net.Conn
	d    *countingDialer
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.d.open.Add(-1) })
	return c.Conn.Close()
}

// baseTransport is http.DefaultTransport's settings with a counting dialer.
func baseTransport(d *countingDialer) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = d.DialContext
	t.MaxIdleConnsPerHost = 1024
	return t
}

// Each hostile mode alone, in virtual time, with a deadline and without:
// rebound answers by the deadline to the instant, ends without one within
// what the policy allows, sends what can never succeed once, and lets no
// credential out. (Real sockets, resets among them, are TestHostileLoad's.)
func TestHostileBattery(t *testing.T) {
	// What can never succeed is sent once; what broke after content is
	// the caller's. (A wait hint beyond a year is absurd, ignored, and the
	// 429 retried as one without a hint.)
	once := map[string]bool{"ok": true, "quota": true, "gzip-bomb": true, "bare-cr": true,
		"cut-after-content": true, "reset-mid-body": true}
	for _, mode := range rebound.HostileModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				var requests atomic.Int32
				base, stop := memnet.Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					requests.Add(1)
					rebound.HostileHandler.ServeHTTP(w, r)
				}))
				defer stop()
				var leaks leakCheck
				logger := slog.New(slog.NewJSONHandler(&leaks, &slog.HandlerOptions{Level: slog.LevelDebug}))
				tr := &rebound.Transport{Base: base, StreamLookahead: 100 * time.Millisecond, ErrorBodyTimeout: 100 * time.Millisecond,
					Policy: rebound.Policy{BaseDelay: 10 * time.Millisecond, Observer: observe.Multi(&leaks, observe.Slog(logger))}}
				client := &http.Client{Transport: tr}

				deadline := time.Now().Add(500 * time.Millisecond)
				done, err := hostileCall(client, "http://hostile", mode, deadline)
				if done.After(deadline) {
					t.Errorf("done %v after the deadline (%v)", done.Sub(deadline), err)
				}
				if err != nil {
					leaks.check(err.Error())
				}
				if n := requests.Load(); once[mode] && n != 1 {
					t.Errorf("%d requests, want 1", n)
				}
				if mode != "stall" { // with no deadline, nothing but the caller's bounds a stall before the headers, as in net/http
					start := time.Now()
					_, err = hostileCall(client, "http://hostile", mode, time.Time{})
					// The longest a call may take: a 429 asking a second,
					// five attempts and so four waits of it.
					took := time.Since(start)
					t.Logf("before the deadline by %v; without one %v", deadline.Sub(done), took)
					if took > 4*time.Second {
						t.Errorf("without a deadline: %v (%v)", took, err)
					}
					if err != nil {
						leaks.check(err.Error())
					}
				}
				if err := leaks.err(); err != nil {
					t.Error(err)
				}
			})
		})
	}
}

// hostileServer runs the hostile server in a process of its own (this
// test binary, see TestMain) and returns its URL.
func hostileServer(t testing.TB) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	// One core for the server, so that the calls measured always have the
	// other: a deadline kept late because no core was free says nothing of
	// the transport.
	cmd.Env = append(os.Environ(), rebound.HostileEnv+"=1", "GOMAXPROCS=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close() // the server stops when its stdin closes
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok {
		t.Fatalf("hostile server said %q, %v", line, err)
	}
	return url
}

// overruns are how long each call ran past its deadline (0 for one done
// in time).
type overruns []time.Duration

func (o overruns) quantile(q float64) time.Duration {
	s := slices.Clone(o)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func (o overruns) String() string {
	return fmt.Sprintf("p50 %v, p99 %v, max %v", o.quantile(0.5).Round(time.Microsecond),
		o.quantile(0.99).Round(time.Microsecond), o.quantile(1).Round(time.Microsecond))
}

// loadShape is how a round of the load test makes its calls: n calls
// start at random over rampUp, each with a deadline from minDeadline to
// maxDeadline after its start. Most hostile modes hold a call until its
// deadline, so the calls overlap.
type loadShape struct {
	n                        int
	rampUp                   time.Duration
	minDeadline, maxDeadline time.Duration
}

// The shapes of the load test. Without the race detector, 10 000 calls
// within a second: nearly all are in flight at once. Their burst of
// connections keeps both of this 2-core machine's cores busy for a few
// seconds (the hostile server's included), with either transport; the
// deadlines come after it, so that what is measured is how each
// transport keeps a deadline, not how long a goroutine waits for a core.
// Under the race detector, whose code is several times slower, 1 000.
var (
	fullLoad = loadShape{n: 10_000, rampUp: time.Second, minDeadline: 5 * time.Second, maxDeadline: 9 * time.Second}
	raceLoad = loadShape{n: 1_000, rampUp: time.Second, minDeadline: 2 * time.Second, maxDeadline: 4 * time.Second}
)

// round is what one round of calls measured.
type round struct {
	over overruns
	peak int64         // the most calls in flight at once
	cpu  time.Duration // this process's CPU time over the round
}

// hostileRound makes shape's calls through client to a mix of the hostile
// modes; seed fixes the mix, the starts and the deadlines.
func hostileRound(client *http.Client, url string, shape loadShape, seed uint64, leaks *leakCheck) round {
	rng := rand.New(rand.NewPCG(seed, 0))
	type plan struct {
		mode            string
		start, deadline time.Duration // from the round's start
	}
	plans := make([]plan, shape.n)
	for i := range plans {
		start := time.Duration(rng.Int64N(int64(shape.rampUp)))
		plans[i] = plan{mode: rebound.HostileModes[rng.IntN(len(rebound.HostileModes))], start: start,
			deadline: start + shape.minDeadline + time.Duration(rng.Int64N(int64(shape.maxDeadline-shape.minDeadline)))}
	}
	out := round{over: make(overruns, shape.n)}
	var inFlight, peak atomic.Int64
	cpu0 := cpuTime()
	var wg sync.WaitGroup
	begin := time.Now()
	for i, p := range plans {
		wg.Go(func() {
			time.Sleep(time.Until(begin.Add(p.start))) // arrivals spread over the ramp
			deadline := begin.Add(p.deadline)
			for now, top := inFlight.Add(1), peak.Load(); now > top && !peak.CompareAndSwap(top, now); top = peak.Load() {
			}
			done, err := hostileCall(client, url, p.mode, deadline)
			inFlight.Add(-1)
			if err != nil {
				leaks.check(err.Error())
			}
			out.over[i] = max(0, done.Sub(deadline))
		})
	}
	wg.Wait()
	out.peak, out.cpu = peak.Load(), cpuTime()-cpu0
	return out
}

// cpuTime is the CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestHostileLoad sends 10 000 calls (1 000 under the race detector),
// overlapping, through one Transport to a hostile server in another
// process, with random deadlines, three rounds over: goroutines and
// connections return to their baseline after every round, the heap stays
// flat, and no credential appears in any error, event or log record. How
// far past their deadlines the calls end, against net/http's, depends on
// the machine's load: BenchmarkHostileLoad measures it (TestHostileBattery
// holds each mode to its deadline in virtual time).
func TestHostileLoad(t *testing.T) {
	shape := loadShapeHere(t)
	const seed = 1
	url := hostileServer(t)
	var leaks leakCheck
	logger := slog.New(slog.NewJSONHandler(&leaks, nil))
	var dialer countingDialer
	baseline := goleak.IgnoreCurrent()
	heap := func() uint64 {
		// Twice: the first moves sync.Pool's buffers (net/http's among
		// them, as many as the round had calls at once) to the pools'
		// victim caches, the second frees them, so that what is left is
		// what outlives a round.
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	t.Logf("seed %d: %d calls over %v, deadlines %v to %v after their start", seed, shape.n, shape.rampUp, shape.minDeadline, shape.maxDeadline)
	// The runtime keeps, in the heap, every goroutine it ever made, for
	// reuse: make more than a round holds at once (a call, and a
	// connection's reader and writer) before measuring, so that what the
	// heap gains over the rounds is what rebound keeps, whatever the
	// machine's load made of each round's peak.
	makeGoroutines(4 * shape.n)
	tr := &rebound.Transport{Base: baseTransport(&dialer), Policy: rebound.Policy{Observer: observe.Multi(&leaks, observe.Slog(logger))}}
	client := &http.Client{Transport: tr}
	var heaps []uint64
	for i := range 3 {
		r := hostileRound(client, url, shape, seed, &leaks)
		client.CloseIdleConnections()
		if err := goleak.Find(baseline); err != nil {
			t.Errorf("round %d: goroutines outlived the round: %v", i+1, err)
		}
		if open := dialer.open.Load(); open != 0 {
			t.Errorf("round %d: %d connections still open", i+1, open)
		}
		heaps = append(heaps, heap())
		t.Logf("round %d: overrun %v; %d in flight at most, %v CPU; heap after it %d KiB", i+1, r.over, r.peak,
			r.cpu.Round(time.Millisecond), heaps[i]>>10)
	}
	if grown := int64(heaps[2]) - int64(heaps[0]); grown > int64(heaps[0]/4)+2<<20 {
		t.Errorf("the heap grew from %d to %d KiB over three rounds", heaps[0]>>10, heaps[2]>>10)
	}
	if err := leaks.err(); err != nil {
		t.Error(err)
	}
}

// makeGoroutines starts n goroutines, all alive at once, and ends them.
func makeGoroutines(n int) {
	var started, wg sync.WaitGroup
	release := make(chan struct{})
	started.Add(n)
	for range n {
		wg.Go(func() {
			started.Done()
			<-release
		})
	}
	started.Wait()
	close(release)
	wg.Wait()
}

// loadShapeHere is the load test's shape for this build and machine: fewer
// calls under the race detector, and no more than the open files allow.
func loadShapeHere(tb testing.TB) loadShape {
	shape := fullLoad
	if raceEnabled {
		shape = raceLoad
	}
	// Each call in flight holds a file descriptor here and one in the
	// server's process; Go raises the soft limit to the hard one at start.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < uint64(shape.n)+1024 {
		n := max(100, int(lim.Cur)-1024)
		tb.Logf("open files are limited to %d here: %d calls instead of %d", lim.Cur, n, shape.n)
		shape.n = n
	}
	return shape
}

// BenchmarkHostileLoad makes TestHostileLoad's rounds of calls (seed 1),
// one round an iteration, through http.DefaultTransport's settings and
// through rebound.Transport, and reports how far past their deadlines
// the calls ended: the median over the rounds of each round's p99 and
// max. Run both on the same quiet machine and compare them:
//
//	go test -run '^$' -bench HostileLoad -benchtime 3x .
func BenchmarkHostileLoad(b *testing.B) {
	shape := loadShapeHere(b)
	url := hostileServer(b)
	var leaks leakCheck
	arms := []struct {
		name   string
		client func(*countingDialer) *http.Client
	}{
		{"net-http", func(d *countingDialer) *http.Client { return &http.Client{Transport: baseTransport(d)} }},
		{"rebound", func(d *countingDialer) *http.Client {
			return &http.Client{Transport: &rebound.Transport{Base: baseTransport(d), Policy: rebound.Policy{Observer: &leaks}}}
		}},
	}
	for _, arm := range arms {
		b.Run(arm.name, func(b *testing.B) {
			var dialer countingDialer
			client := arm.client(&dialer)
			var p99s, maxes []float64
			for b.Loop() {
				r := hostileRound(client, url, shape, 1, &leaks)
				client.CloseIdleConnections()
				p99s = append(p99s, float64(r.over.quantile(0.99))/1e6)
				maxes = append(maxes, float64(r.over.quantile(1))/1e6)
			}
			slices.Sort(p99s)
			slices.Sort(maxes)
			b.ReportMetric(p99s[len(p99s)/2], "p99-overrun-ms")
			b.ReportMetric(maxes[len(maxes)/2], "max-overrun-ms")
		})
	}
	if err := leaks.err(); err != nil {
		b.Error(err)
	}
}
