package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"strconv"
	"strings"
	"testing"
)

// sample is one line of a Prometheus text scrape.
type sample struct {
	name, labels string
	value        float64
}

func parseScrape(t *testing.T, text string) []sample {
	t.Helper()
	var out []sample
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		s := sample{name: line[:i], value: v}
		if j := strings.IndexByte(s.name, '{'); j >= 0 {
			s.name, s.labels = s.name[:j], s.name[j:]
		}
		out = append(out, s)
	}
	return out
}

// total adds up the samples named name that have every one of labels
// (`key="value"`), and says how many there were.
func total(samples []sample, name string, labels ...string) (sum float64, n int) {
next:
	for _, s := range samples {
		if s.name != name {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(s.labels, l) {
				continue next
			}
		}
		sum += s.value
		n++
	}
	return sum, n
}

// checkScrape checks that a scrape after at least one round of calls
// holds rebound's metrics with plausible values.
func checkScrape(t *testing.T, text string, calls int) {
	t.Helper()
	samples := parseScrape(t, text)
	flaky, dead := `rebound_target="summarise"`, `rebound_target="fallback"`
	at := func(name string, labels ...string) float64 {
		t.Helper()
		v, n := total(samples, name, labels...)
		if n == 0 {
			t.Errorf("no %s%v in the scrape", name, labels)
		}
		return v
	}
	okAttempts := at("rebound_attempts_total", flaky, `rebound_outcome="success"`)
	failedAttempts := at("rebound_attempts_total", flaky, `rebound_outcome="failure"`)
	retries := at("rebound_retries_total", flaky)
	recorded := at("rebound_call_duration_seconds_count", flaky)
	switch {
	case okAttempts < float64(calls)*0.9 || okAttempts > recorded:
		t.Errorf("%v successful attempts of %v calls", okAttempts, recorded)
	case recorded < float64(calls):
		t.Errorf("%v calls recorded, rounds of %d", recorded, calls)
	case failedAttempts < float64(calls)*0.1 || retries < float64(calls)*0.1:
		t.Errorf("a 35%% failure rate gave %v failed attempts and %v retries over %d calls", failedAttempts, retries, calls)
	case retries > failedAttempts:
		t.Errorf("%v retries of %v failures", retries, failedAttempts)
	}
	if n := at("rebound_wait_duration_seconds_count", flaky); n != retries {
		t.Errorf("%v waits for %v retries", n, retries)
	}
	if sum := at("rebound_wait_duration_seconds_sum", flaky); sum <= 0 || sum > 0.05*retries {
		t.Errorf("waits add up to %vs over %v retries (each at most 50ms)", sum, retries)
	}
	at("rebound_attempts_total", flaky, `rebound_verdict_kind="rate_limited"`)
	at("rebound_attempts_total", flaky, `rebound_verdict_kind="transient"`)
	if v := at("rebound_retry_budget_available", flaky); v < 0 {
		t.Errorf("retry budget %v", v)
	}
	// The dead target's breaker opened, and refused calls.
	if v := at("rebound_breaker_state", `rebound_breaker_name="fallback"`); v != 2 {
		t.Errorf("breaker state %v, want 2 (open)", v)
	}
	at("rebound_breaker_changes_total", `rebound_breaker_name="fallback"`, `rebound_breaker_state="open"`)
	if v := at("rebound_give_ups_total", dead, `rebound_stop_reason="breaker_open"`); v < 5 {
		t.Errorf("%v calls refused by the open breaker", v)
	}
	if _, n := total(samples, "rebound_call_duration_seconds_bucket", flaky, `le="+Inf"`); n == 0 {
		t.Error("no call duration buckets")
	}
}

// TestOnce runs the program as CI would: one round, the scrape printed.
func TestOnce(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"--once", "--addr", "127.0.0.1:0", "--calls", "100"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	first, scrape, _ := strings.Cut(stdout.String(), "\n")
	if !strings.HasPrefix(first, "listening on http://127.0.0.1:") || !strings.HasSuffix(first, "/metrics") {
		t.Fatalf("first line %q", first)
	}
	if !strings.Contains(stderr.String(), "round 1: ") {
		t.Errorf("stderr %q", stderr.String())
	}
	checkScrape(t, scrape, 100)
}

// TestServe starts the program serving on 127.0.0.1:0 and scrapes it over
// HTTP once its first round is done.
func TestServe(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	stdoutR, stdoutW := io.Pipe()
	stderrR, stderrW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, []string{"--addr", "127.0.0.1:0", "--calls", "50", "--for", "1m"}, stdoutW, stderrW)
		stdoutW.Close()
		stderrW.Close()
		done <- err
	}()

	// The URL comes first, before the first round of calls.
	stdout := bufio.NewReader(stdoutR)
	first, err := stdout.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	url, ok := strings.CutPrefix(strings.TrimSpace(first), "listening on ")
	if !ok || !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("first line %q", first)
	}
	logs, rounds := bufio.NewScanner(stderrR), 0
	for rounds == 0 && logs.Scan() {
		if strings.HasPrefix(logs.Text(), "round 1: ") {
			rounds++
		}
	}
	go func() { _, _ = io.Copy(io.Discard, stderrR) }()
	if rounds == 0 {
		cancel()
		t.Fatalf("no round reported: %v", <-done)
	}

	scrape, err := get(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	checkScrape(t, scrape, 50)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
