// Command gateway measures the latency that `rebound proxy` and Portkey's
// open-source AI gateway each add in front of an LLM API, side by side in
// one run, everything on the loopback, with nginx beside them as the floor
// a well-engineered proxy sets.
//
// It starts a minimal upstream that answers every request with a canned
// chat completion (plain, or an SSE stream of a few chunks when the request
// says "stream":true), builds and starts `rebound proxy` in front of it,
// installs (once, with npm, under .portkey) and starts Portkey's gateway
// with Node in front of it too, both configured alike: one upstream,
// retries on. nginx (Debian's package, which run.sh installs when missing)
// runs in front of it as well, as the harness's child with a configuration
// of its own, set up for streaming (proxy_buffering off, HTTP/1.1 and a
// pool of kept-alive connections to the upstream). Beside them run two
// yardsticks: a bare httputil.ReverseProxy (hop) and a relay that copies
// bytes without reading them (relay), the floor under any proxy. Every one
// of them, the upstream included, is a process of its own, so that none
// shares the load generator's process and each pays for the same wake-ups.
// Then it drives each with vegeta, used as a library: at fixed rates (500
// and 2000 requests a second, plain and streamed, in rounds whose medians
// it reports), then a search for the highest rate each sustains with p99
// under 50 ms and no errors, repeated (3 times, 5 s a step) since one
// noisy step can decide a search: the report gives the median and the
// spread.
//
// The latency a target adds is its latency less the upstream's own,
// called directly at the same rate in the same round. A round calls its
// targets in turns of half a second (-slice), round and round, rather
// than each for its whole step in one go: on a shared machine, a noisy
// moment then falls on every target alike, and the ratio of two targets'
// added latencies moved between rounds by a tenth where it had moved by a
// third. A target that cannot keep up with a rate builds a shorter queue
// in a turn than in a whole step, so its latencies there read lower; the
// search for its highest sustained rate, in whole steps, says that it did
// not keep up. Where the hop was measured, the report ends with each
// gateway's figures over the hop's.
//
// With -costs it measures instead what a request costs each target's
// processes at the first rate: CPU time and context switches (from /proc)
// and system calls (with strace). Command legs, in ./legs, splits what a
// proxy adds into the legs of a request's path (in, upstream, out) from a
// packet capture of a run.
//
// Run it from this folder (it is a module of its own so that vegeta stays
// out of rebound's dependencies):
//
//	./run.sh            # or: go run . [flags]
//	./run.sh -json      # one JSON object on stdout, the tables on stderr
//	./run.sh -costs     # what a request costs each process
//
// It needs Go, Node and npm, and nginx (or apt-get to install it). Children
// end with it, on Ctrl-C too.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// knownTargets are the names -targets takes.
var knownTargets = []string{"direct", "relay", "hop", "nginx", "rebound", "portkey"}

// minSearchStep is the shortest step the search may take: one search moved
// from 6 000 to 1 875 requests a second between two runs with 3 s steps.
const minSearchStep = 5 * time.Second

// minSlice is the shortest turn -slice takes.
const minSlice = 100 * time.Millisecond

// options are the command's flags.
type options struct {
	targets    []string
	rates      []int
	rounds     int
	duration   time.Duration
	slice      time.Duration
	warmup     time.Duration
	search     bool
	costs      bool
	searches   int
	searchStep time.Duration
	ceiling    int
	p99Limit   time.Duration
	attempts   int
	reboundBin string
	repo       string
	portkeyDir string
	json       bool
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == serveArg {
		serve(os.Args[2:])
		return
	}
	var o options
	var targets, rates string
	flag.StringVar(&targets, "targets", "direct,relay,hop,nginx,rebound,portkey", "the targets to measure, from direct, relay (a process that copies bytes and reads none: the floor under any proxy), hop (a bare httputil.ReverseProxy), nginx (set up for streaming), rebound and portkey; direct is always measured")
	flag.StringVar(&rates, "rates", "500,2000", "the fixed rates, requests a second")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds of the fixed rates; the report gives each figure's median over them")
	flag.DurationVar(&o.duration, "duration", 5*time.Second, "how long each fixed-rate step lasts")
	flag.DurationVar(&o.slice, "slice", 500*time.Millisecond, "each round measures its targets in turns of this long, round and round until each has had -duration, so that what else the machine does meanwhile falls on all of them alike; 0 measures each target in one step")
	flag.DurationVar(&o.warmup, "warmup", 2*time.Second, "how long each target is warmed up at the first rate before measuring, per mode")
	flag.BoolVar(&o.search, "search", true, "search each target's highest sustained rate")
	flag.BoolVar(&o.costs, "costs", false, "instead of latencies and rates, measure what a request costs each target's processes at the first rate, for -duration: CPU time, context switches, and (with strace, in a step of its own) system calls")
	flag.IntVar(&o.searches, "searches", 3, "how many times the search runs for each target and mode; the report gives the median and the spread")
	flag.DurationVar(&o.searchStep, "search-step", 5*time.Second, "how long each step of the search lasts, at least 5s: a shorter step lets one noisy moment decide")
	flag.IntVar(&o.ceiling, "ceiling", 32000, "the highest rate the search tries, requests a second")
	flag.DurationVar(&o.p99Limit, "p99-limit", 50*time.Millisecond, "a rate is sustained when p99 stays under this, with no errors")
	flag.IntVar(&o.attempts, "attempts", 3, "retry attempts configured in Portkey's gateway")
	flag.StringVar(&o.reboundBin, "rebound-bin", "", "the rebound binary to run as `rebound proxy`; empty builds ./cmd/rebound from -repo")
	flag.StringVar(&o.repo, "repo", "../..", "the rebound repository, to build the rebound binary from")
	flag.StringVar(&o.portkeyDir, "portkey-dir", ".portkey", "where npm installs Portkey's gateway")
	flag.BoolVar(&o.json, "json", false, "print one JSON object on stdout, and the tables on stderr")
	flag.Parse()
	o.targets = strings.Split(targets, ",")
	for _, t := range o.targets {
		if !slices.Contains(knownTargets, t) {
			fmt.Fprintf(os.Stderr, "gateway: unknown target %q in -targets (known: %s)\n", t, strings.Join(knownTargets, ", "))
			os.Exit(2)
		}
	}
	for _, r := range strings.Split(rates, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(r))
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "gateway: bad rate %q in -rates\n", r)
			os.Exit(2)
		}
		o.rates = append(o.rates, n)
	}
	if o.rounds < 1 || len(o.rates) == 0 {
		fmt.Fprintln(os.Stderr, "gateway: -rounds and -rates need at least one")
		os.Exit(2)
	}
	if o.duration <= 0 || o.warmup <= 0 {
		// vegeta attacks without end for a duration of 0.
		fmt.Fprintf(os.Stderr, "gateway: -duration %s, -warmup %s: both must be positive\n", o.duration, o.warmup)
		os.Exit(2)
	}
	if o.slice < 0 || o.slice > 0 && o.slice < minSlice {
		fmt.Fprintf(os.Stderr, "gateway: -slice %s: give 0 (one step per target) or at least %s; a shorter turn is mostly the attack's start and the drain after it\n", o.slice, minSlice)
		os.Exit(2)
	}
	if o.search && (o.searches < 1 || o.searchStep < minSearchStep) {
		fmt.Fprintf(os.Stderr, "gateway: -searches %d, -search-step %s: the search needs at least one run and steps of at least %s\n", o.searches, o.searchStep, minSearchStep)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		stop()
		os.Exit(1)
	}
}

// run starts the upstream and the gateways, measures them, and reports on
// out, with progress on log. It stops every child it started before it
// returns.
func run(ctx context.Context, o options, out, log io.Writer) error {
	upstream, up, err := startServer(ctx, "upstream")
	if err != nil {
		return err
	}
	defer up.stop()

	r := report{
		GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, CPUs: runtime.NumCPU(), Go: runtime.Version(),
		Portkey: portkeyVersion, Nginx: nginxVersion(), Rounds: o.rounds, Duration: o.duration, Slice: o.slice, SearchStep: o.searchStep, Searches: o.searches,
		P99Limit: o.p99Limit, Skipped: map[string]string{},
	}
	if v, err := exec.Command("node", "--version").Output(); err == nil {
		r.Node = strings.TrimSpace(string(v))
	}
	targets := []target{{name: "direct", url: upstream + "/v1/chat/completions", pid: up.pid()}}
	for _, yardstick := range []string{"relay", "hop"} {
		if !slices.Contains(o.targets, yardstick) {
			continue
		}
		base, c, err := startServer(ctx, yardstick, upstream)
		if err != nil {
			return err
		}
		defer c.stop()
		targets = append(targets, target{name: yardstick, url: base + "/v1/chat/completions", pid: c.pid()})
	}

	if slices.Contains(o.targets, "nginx") {
		_, t, stopNginx, err := startNginx(ctx, upstream)
		if err != nil {
			r.Skipped["nginx"] = err.Error()
			fmt.Fprintln(log, "nginx: skipped:", err)
		} else {
			defer stopNginx()
			targets = append(targets, t)
		}
	}
	if slices.Contains(o.targets, "rebound") {
		t, stopRebound, err := reboundTarget(ctx, o, upstream)
		if err != nil {
			r.Skipped["rebound"] = err.Error()
			fmt.Fprintln(log, "rebound: skipped:", err)
		} else {
			defer stopRebound()
			targets = append(targets, t)
		}
	}
	if slices.Contains(o.targets, "portkey") {
		t, stopPortkey, err := portkeyTarget(ctx, o, upstream)
		if err != nil {
			r.Skipped["portkey"] = err.Error()
			fmt.Fprintln(log, "portkey: skipped:", err)
		} else {
			defer stopPortkey()
			targets = append(targets, t)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}

	modes := []mode{plain, streamed}
	for _, t := range targets {
		for _, m := range modes {
			p := step(ctx, t, m, o.rates[0], o.warmup)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if p.Errors > 0 {
				return fmt.Errorf("%s does not answer %s requests: %d errors in warm-up, the first: %s", t.name, m, p.Errors, p.FirstError)
			}
		}
	}
	fmt.Fprintf(log, "warmed up %d targets\n", len(targets))

	if o.costs {
		for _, m := range modes {
			for _, t := range targets {
				c, err := measureCosts(ctx, t, m, o.rates[0], o.duration)
				if err != nil {
					return err
				}
				fmt.Fprintf(log, "costs %-8s %-8s cpu %s/req voluntary %.2f involuntary %.2f syscalls %.1f\n", m, t.name, c.CPU, c.Voluntary, c.Involuntary, c.Syscalls)
				r.Costs = append(r.Costs, c)
			}
		}
		if o.json {
			writeCosts(log, r.Costs)
			return r.writeJSON(out)
		}
		writeCosts(out, r.Costs)
		return nil
	}

	for round := range o.rounds {
		for _, rate := range o.rates {
			for _, m := range modes {
				// Each round starts from another target, so none is always
				// measured right after the same neighbour.
				order := slices.Concat(targets[round%len(targets):], targets[:round%len(targets)])
				var points []point
				if o.slice > 0 {
					points = interleaved(ctx, order, m, rate, o.duration, o.slice)
				} else {
					for _, t := range order {
						points = append(points, step(ctx, t, m, rate, o.duration))
					}
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
				for _, p := range points {
					fmt.Fprintf(log, "round %d %-8s %5d/s %-8s p50 %-9s p99 %-9s errors %d drained in %s\n", round+1, m, rate, p.Target, p.P50, p.P99, p.Errors, p.Drained.Round(time.Millisecond))
					r.Points = append(r.Points, roundPoint{Round: round, point: p})
				}
			}
		}
	}

	if o.search {
		found := map[string][]int{} // by target and mode
		for search := range o.searches {
			for _, m := range modes {
				// Each search starts from another target, as the rounds do.
				for i := range targets {
					t := targets[(i+search)%len(targets)]
					top := searchMax(o.rates[0], o.ceiling, func(rate int) bool {
						p := step(ctx, t, m, rate, o.searchStep)
						ok := p.sustained(o.p99Limit) && ctx.Err() == nil
						fmt.Fprintf(log, "search %d %-8s %-8s %6d/s p99 %-9s requests %d errors %d sustained %t\n", search+1, m, t.name, rate, p.P99, p.Requests, p.Errors, ok)
						r.SearchSteps = append(r.SearchSteps, p)
						return ok
					})
					if ctx.Err() != nil {
						return ctx.Err()
					}
					found[t.name+" "+string(m)] = append(found[t.name+" "+string(m)], top)
				}
			}
		}
		for _, m := range modes {
			for _, t := range targets {
				r.MaxRates = append(r.MaxRates, newMaxRate(t.name, m, found[t.name+" "+string(m)]))
			}
		}
	}

	r.summarize(targets, modes, o.rates)
	if o.json {
		r.writeTables(log)
		return r.writeJSON(out)
	}
	r.writeTables(out)
	return nil
}

// reboundTarget builds rebound unless given a binary, and starts `rebound
// proxy` in front of upstream.
func reboundTarget(ctx context.Context, o options, upstream string) (target, func(), error) {
	bin := o.reboundBin
	if bin == "" {
		dir, err := os.MkdirTemp("", "rebound-gateway-bench-")
		if err != nil {
			return target{}, nil, err
		}
		defer os.RemoveAll(dir) // the running proxy keeps its binary open
		if bin, err = buildRebound(ctx, o.repo, dir); err != nil {
			return target{}, nil, err
		}
	}
	c, t, err := startRebound(ctx, bin, upstream)
	if err != nil {
		return target{}, nil, err
	}
	return t, c.stop, nil
}

// portkeyTarget installs Portkey's gateway if need be and starts it in
// front of upstream.
func portkeyTarget(ctx context.Context, o options, upstream string) (target, func(), error) {
	script, err := installPortkey(ctx, o.portkeyDir)
	if err != nil {
		return target{}, nil, err
	}
	c, t, err := startPortkey(ctx, script, upstream, o.attempts)
	if err != nil {
		return target{}, nil, err
	}
	return t, c.stop, nil
}
