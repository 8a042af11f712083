// Command prometheus shows rebound's OpenTelemetry metrics in Prometheus'
// format: it serves them on a loopback port while it sends calls through
// rebound.Transport to an in-process chaos server.
//
//	go run ./otel/example/prometheus                # serve until interrupted
//	go run ./otel/example/prometheus --once         # one round of calls, print the scrape, exit
//	go run ./otel/example/prometheus --for 30s --addr 127.0.0.1:9464
//
// The first line on stdout is "listening on http://HOST:PORT/metrics".
// Each round sends --calls calls to the target "summarise", whose requests
// fail at random (--fail-rate, --seed), and 10 to the target "fallback",
// whose server is down: its circuit breaker opens and refuses the later
// ones. Serving, a round runs every second; a line on stderr reports each.
// With --once, the program scrapes its own /metrics over HTTP after one
// round, prints the scrape on stdout and exits. Nothing leaves loopback.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
	"github.com/rebound-go/rebound/chaos"
	reboundotel "github.com/rebound-go/rebound/otel"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	var usage usageError
	switch {
	case errors.Is(err, flag.ErrHelp):
	case errors.As(err, &usage):
		fmt.Fprintln(os.Stderr, "prometheus:", err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "prometheus:", err)
		os.Exit(1)
	}
}

type usageError struct{ error }

type options struct {
	addr     string
	calls    int
	workers  int
	failRate float64
	seed     uint64
	once     bool
	serveFor time.Duration
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("prometheus", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // a bad flag gets a one-line reason, -h the defaults
	fs.StringVar(&o.addr, "addr", "127.0.0.1:0", "address to serve /metrics on (a loopback one)")
	fs.IntVar(&o.calls, "calls", 200, "calls to the flaky target per round")
	fs.IntVar(&o.workers, "workers", 8, "calls in flight at once")
	fs.Float64Var(&o.failRate, "fail-rate", 0.35, "share of the flaky target's requests that fail")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the chaos server's failures")
	fs.BoolVar(&o.once, "once", false, "run one round, print the scrape of /metrics and exit")
	fs.DurationVar(&o.serveFor, "for", 0, "stop serving after this long (0: until interrupted)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "usage: prometheus [--once] [--for D] [--addr 127.0.0.1:0] [--calls N] [--workers N] [--fail-rate F] [--seed N]")
			fs.SetOutput(stderr)
			fs.PrintDefaults()
		}
		return o, usageError{err}
	}
	switch {
	case fs.NArg() > 0:
		return o, usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	case o.calls < 0, o.workers < 1:
		return o, usageError{errors.New("--calls must not be negative and --workers must be positive")}
	case o.serveFor < 0:
		return o, usageError{errors.New("--for must not be negative")}
	}
	return o, nil
}

// run is the program: it returns when ctx ends, --for has passed, or the
// --once scrape is printed.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parse(args, stderr)
	if err != nil {
		return err
	}

	// The chaos server, on a loopback port of its own.
	srv, err := chaos.New(chaos.Config{Mode: chaos.ModeRandom, FailRate: o.failRate, Seed: o.seed, Profile: chaos.ProfileOpenAI})
	if err != nil {
		return usageError{err}
	}
	chaosURL, stopChaos, err := serve("127.0.0.1:0", srv)
	if err != nil {
		return err
	}
	defer stopChaos()

	// OpenTelemetry's Prometheus exporter, read by a registry of its own.
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return err
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer provider.Shutdown(context.Background())
	obs := reboundotel.New(reboundotel.Config{MeterProvider: provider})

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	metricsURL, stopMetrics, err := serve(o.addr, mux)
	if err != nil {
		return err
	}
	defer stopMetrics()
	metricsURL += "/metrics"
	fmt.Fprintln(stdout, "listening on", metricsURL)

	w := newWorkload(chaosURL, obs, o)
	if o.once {
		w.round(ctx, 1, stderr)
		scrape, err := get(ctx, metricsURL)
		if err != nil {
			return err
		}
		_, err = io.WriteString(stdout, scrape)
		return err
	}
	if o.serveFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.serveFor)
		defer cancel()
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for n := 1; ; n++ {
		w.round(ctx, n, stderr)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// serve serves h on addr until the returned function is called, and
// returns its base URL.
func serve(addr string, h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	s := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(ln)
	}()
	return "http://" + ln.Addr().String(), func() {
		s.Close()
		<-done
	}, nil
}

// get returns the body of a GET of url.
func get(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(body), err
}

// workload is the calls of each round: the flaky target and the dead one,
// each with a client of its own.
type workload struct {
	url         string
	o           options
	flaky, dead *http.Client
	mu          sync.Mutex // guards the counts
	ok, failed  int
}

func newWorkload(url string, obs *reboundotel.Observer, o options) *workload {
	policy := rebound.Policy{
		BaseDelay: 5 * time.Millisecond, MaxDelay: 50 * time.Millisecond, MaxAttempts: 4, Observer: obs,
	}
	client := func(p rebound.Policy) *http.Client {
		return &http.Client{Transport: &rebound.Transport{Policy: p}, Timeout: 10 * time.Second}
	}
	dead := policy
	dead.Breaker = breaker.New("fallback", breaker.Config{ConsecutiveFailures: 3, Cooldown: time.Minute, OnStateChange: obs.BreakerStateChange})
	return &workload{url: url, o: o, flaky: client(policy), dead: client(dead)}
}

// round makes one round of calls and reports it on log.
func (w *workload) round(ctx context.Context, n int, log io.Writer) {
	start := time.Now()
	jobs := make(chan bool) // true: the dead target
	var wg sync.WaitGroup
	for range w.o.workers {
		wg.Go(func() {
			for dead := range jobs {
				w.call(ctx, dead)
			}
		})
	}
	for i := range w.o.calls + 10 {
		select {
		case jobs <- i >= w.o.calls:
		case <-ctx.Done():
		}
	}
	close(jobs)
	wg.Wait()
	w.mu.Lock()
	fmt.Fprintf(log, "round %d: %d calls ok, %d failed so far; %v\n", n, w.ok, w.failed, time.Since(start).Round(time.Millisecond))
	w.mu.Unlock()
}

// call sends one chat request, to the dead target or the flaky one.
func (w *workload) call(ctx context.Context, dead bool) {
	if ctx.Err() != nil {
		return
	}
	client, target, mode := w.flaky, "summarise", chaos.ModeRandom
	if dead {
		client, target, mode = w.dead, "fallback", chaos.ModeDown
	}
	req, err := http.NewRequestWithContext(rebound.WithTarget(ctx, target), http.MethodPost,
		w.url+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		panic(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(chaos.HeaderMode, mode)
	resp, err := client.Do(req)
	ok := err == nil && resp.StatusCode == http.StatusOK
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	w.mu.Lock()
	if ok {
		w.ok++
	} else {
		w.failed++
	}
	w.mu.Unlock()
}
