package analyze

import (
	"bufio"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"time"
)

// scenario is one sort of call the generator writes.
type scenario struct {
	weight           float64
	status           int
	errType, errCode string
	kind             string // rebound's verdict, as its log names it
	// pSucceed is the chance a retried call gets through in the end.
	pSucceed float64
	// huge: the prompt overflowed the context.
	huge bool
}

// scenarios are the generator's mix: mostly successes, the retryable
// failures a provider sends, and the 4xx that the $340 article found retried for
// nothing.
var scenarios = []scenario{
	{weight: 0.60},
	{weight: 0.07, status: 429, errType: "requests", errCode: "rate_limit_exceeded", kind: "rate_limited", pSucceed: 0.85},
	{weight: 0.04, status: 503, kind: "transient", pSucceed: 0.8},
	{weight: 0.02, status: 502, kind: "transient", pSucceed: 0.8},
	{weight: 0.01, status: 500, errType: "server_error", kind: "transient", pSucceed: 0.7},
	{weight: 0.03, status: 529, errType: "overloaded_error", kind: "overloaded", pSucceed: 0.6},
	{weight: 0.05, status: 400, errType: "invalid_request_error", errCode: "context_length_exceeded", kind: "context_overflow", huge: true},
	{weight: 0.03, status: 400, errType: "invalid_request_error", errCode: "invalid_value", kind: "permanent"},
	{weight: 0.02, status: 400, errType: "invalid_request_error", kind: "context_overflow", huge: true}, // Anthropic's "prompt is too long"
	{weight: 0.02, status: 429, errType: "insufficient_quota", errCode: "insufficient_quota", kind: "quota_exhausted"},
	{weight: 0.01, status: 401, errType: "invalid_request_error", errCode: "invalid_api_key", kind: "permanent"},
	{weight: 0.02, status: 413, errType: "request_too_large", kind: "context_overflow", huge: true},
	{weight: 0.02, kind: "transient", pSucceed: 0.7}, // connection reset
	{weight: 0.01, kind: "canceled"},
}

var (
	genTargets = []string{"gpt-4o:summarise", "gpt-4o:plan", "gpt-4o-mini:classify", "claude-sonnet:code"}
	genModels  = []string{"gpt-4o", "gpt-4o", "gpt-4o-mini", "claude-sonnet"}
	genNoise   = []string{"rebound.retry", "rebound.attempt", "rebound.attempt", "agent.task.done"}
)

// Generate writes n synthetic log lines to w: a seeded mix of rebound's
// records (calls, and the retry and attempt records analysis skips) and
// simple-schema records from a client that retries everything up to three
// times. The same seed gives the same lines.
func Generate(w io.Writer, n int, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 0x72656264))
	var total float64
	for _, s := range scenarios {
		total += s.weight
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	now := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	buf := make([]byte, 0, 512)
	for i := 0; i < n; i++ {
		now = now.Add(time.Duration(rng.ExpFloat64() * float64(800*time.Millisecond)))
		buf = buf[:0]
		pick := rng.Float64() * total
		s := &scenarios[len(scenarios)-1]
		for j := range scenarios {
			if pick -= scenarios[j].weight; pick < 0 {
				s = &scenarios[j]
				break
			}
		}
		switch r := rng.Float64(); {
		case r < 0.08:
			buf = genNoiseLine(buf, rng, now)
		case r < 0.50:
			buf = genReboundLine(buf, rng, now, s)
		default:
			buf = genSimpleLine(buf, rng, s)
		}
		buf = append(buf, '\n')
		if _, err := bw.Write(buf); err != nil {
			return err
		}
	}
	return bw.Flush()
}

func genNoiseLine(b []byte, rng *rand.Rand, now time.Time) []byte {
	msg := genNoise[rng.IntN(len(genNoise))]
	b = genHeader(b, now, "INFO", msg)
	switch msg {
	case "agent.task.done":
		b = append(b, `,"task":"t`...)
		b = strconv.AppendInt(b, rng.Int64N(1e6), 10)
		b = append(b, '"')
	default:
		b = genString(b, "target", genTargets[rng.IntN(len(genTargets))])
		b = genInt(b, "attempt", int64(1+rng.IntN(3)))
		if msg == "rebound.retry" {
			b = genString(b, "kind", "transient")
			b = genInt(b, "wait_ms", rng.Int64N(4000))
		}
	}
	return append(b, '}')
}

func genHeader(b []byte, now time.Time, level, msg string) []byte {
	b = append(b, `{"time":"`...)
	b = now.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","level":"`...)
	b = append(b, level...)
	b = append(b, `","msg":"`...)
	b = append(b, msg...)
	return append(b, '"')
}

// genReboundLine writes a rebound.call record: rebound retries only what
// may succeed, so permanent failures take one attempt.
func genReboundLine(b []byte, rng *rand.Rand, now time.Time, s *scenario) []byte {
	attempts, ok := int64(1), true
	switch {
	case s.status == 0 && s.kind == "": // plain success
		if rng.Float64() < 0.05 {
			attempts = 2
		}
	case s.pSucceed > 0:
		attempts = 1 + rng.Int64N(4)
		ok = attempts > 1 && rng.Float64() < s.pSucceed
	default:
		ok = false
	}
	level := "INFO"
	if !ok {
		level = "WARN"
	}
	b = genHeader(b, now, level, "rebound.call")
	b = genString(b, "target", genTargets[rng.IntN(len(genTargets))])
	b = genInt(b, "attempts", attempts)
	b = append(b, `,"succeeded":`...)
	b = strconv.AppendBool(b, ok)
	if !ok {
		b = genString(b, "kind", s.kind)
		if s.status != 0 {
			b = genInt(b, "status", int64(s.status))
		}
		if s.errType != "" {
			b = genString(b, "error_type", s.errType)
		}
		if s.errCode != "" {
			b = genString(b, "error_code", s.errCode)
		}
		reason := "max_attempts"
		switch {
		case s.kind == "canceled":
			reason = "canceled"
		case s.pSucceed == 0:
			reason = "not_retryable"
		}
		b = genString(b, "reason", reason)
	}
	b = genInt(b, "waited_ms", (attempts-1)*rng.Int64N(2000))
	return append(b, '}')
}

// genSimpleLine writes a simple-schema record from a client that retries
// every failure up to three times, as the $340 article's first strategy did.
func genSimpleLine(b []byte, rng *rand.Rand, s *scenario) []byte {
	attempts, ok := int64(1), true
	switch {
	case s.status == 0 && s.kind == "":
	case s.pSucceed > 0:
		attempts = 2 + rng.Int64N(3)
		ok = rng.Float64() < s.pSucceed
		if !ok {
			attempts = 4
		}
	default:
		attempts, ok = 4, false
	}
	in := int64(400 + math.Exp(rng.Float64()*math.Log(30))*400)
	if s.huge {
		in = 128001 + rng.Int64N(72000)
	}
	out := int64(50 + rng.IntN(1450))
	b = append(b, `{"model":"`...)
	b = append(b, genModels[rng.IntN(len(genModels))]...)
	b = append(b, `","succeeded":`...)
	b = strconv.AppendBool(b, ok)
	if s.status != 0 {
		b = genInt(b, "status", int64(s.status))
	}
	if s.errType != "" {
		b = genString(b, "error_type", s.errType)
	}
	if s.errCode != "" {
		b = genString(b, "error_code", s.errCode)
	}
	b = append(b, `,"retried":`...)
	b = strconv.AppendBool(b, attempts > 1)
	if attempts != 2 || rng.Float64() < 0.5 { // attempts may be left to "retried"
		b = genInt(b, "attempts", attempts)
	}
	b = genInt(b, "input_tokens", in)
	if ok {
		b = genInt(b, "output_tokens", out)
	}
	if rng.Float64() < 0.3 { // some clients log what the call cost
		cost := float64(in*attempts) * 2.5 / 1e6
		if ok {
			cost += float64(out) * 10 / 1e6
		}
		b = append(b, `,"cost":`...)
		b = strconv.AppendFloat(b, cost, 'f', 6, 64)
	}
	return append(b, '}')
}

func genString(b []byte, key, v string) []byte {
	b = append(b, `,"`...)
	b = append(b, key...)
	b = append(b, `":"`...)
	b = append(b, v...)
	return append(b, '"')
}

func genInt(b []byte, key string, v int64) []byte {
	b = append(b, `,"`...)
	b = append(b, key...)
	b = append(b, `":`...)
	return strconv.AppendInt(b, v, 10)
}
