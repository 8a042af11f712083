package sim

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/cost"
	"github.com/rebound-go/rebound/fallback"
)

// The cost scenario's traffic: the month of tasks and their calls, the
// two models and their incidents, each drawn from the seed so that every
// strategy meets the same.

// call is one LLM call of the workload, its fate drawn with its task so
// that every strategy meets the same traffic.
type call struct {
	id uint64
	// permanent is the status a request fails with whatever is retried
	// (0 if none); a 413 succeeds once compacted.
	permanent int
	// input is the call's prompt in tokens.
	input int64
}

// request is what a strategy sends for a call.
type request struct {
	*call
	compacted bool
}

// provider models the two models. Whether attempt k of call c on a model
// fails is a pure function of (seed, c, k, model) and of the time, so each
// strategy meets the same odds.
type provider struct {
	seed      uint64
	w         CostWorkload
	clock     *Clock
	incidents *incidents
	// The state of the call being made, per model: the attempts made, and
	// when a 429 said to come back (an attempt sooner meets another 429).
	// A call is made once, so its state goes when the next call starts.
	callID       uint64
	attempts     [2]uint64
	limitedUntil [2]time.Time
}

const (
	primaryName  = "primary"
	fallbackName = "fallback"
	attemptTime  = time.Second // virtual time one attempt takes
	// contextWindow is both models' context window. The workload gives a
	// request that overflows it as many tokens as any other (as the $340 article
	// counted them); compaction takes 40% off.
	contextWindow = 128000
)

func (p *provider) target(name string, model uint64) fallback.Target[request, string] {
	return fallback.Target[request, string]{
		Name:          name,
		ContextWindow: contextWindow,
		Call: func(ctx context.Context, r request) (string, error) {
			return p.attempt(ctx, r, model)
		},
	}
}

func (p *provider) attempt(ctx context.Context, r request, model uint64) (string, error) {
	now := p.clock.Now()
	p.clock.Advance(attemptTime)
	if r.id != p.callID {
		p.callID, p.attempts, p.limitedUntil = r.id, [2]uint64{}, [2]time.Time{}
	}
	k := p.attempts[model]
	p.attempts[model] = k + 1
	input := r.input
	if r.compacted {
		input = input * 6 / 10
	}
	cost.Report(ctx, cost.Usage{InputTokens: input}) // billed, whatever happens

	if r.permanent != 0 && !(r.permanent == http.StatusRequestEntityTooLarge && r.compacted) {
		return "", permanentError(r.permanent)
	}
	if until := p.limitedUntil[model]; now.Before(until) {
		return "", rateLimited(until.Sub(now))
	}
	rng := rand.New(rand.NewPCG(p.seed^r.id, k<<8|model))
	u := rng.Float64()
	switch {
	case model == 0 && p.incidents.cover(now) && u < 0.9:
		return "", overloadedError
	case u < p.w.RateLimitRate:
		hint := time.Duration(1+rng.IntN(3)) * time.Second
		p.limitedUntil[model] = now.Add(hint)
		return "", rateLimited(hint)
	case u < p.w.RateLimitRate+p.w.ServerErrorRate:
		return "", &rebound.HTTPError{StatusCode: []int{500, 502, 503}[rng.IntN(3)]}
	}
	cost.Report(ctx, cost.Usage{OutputTokens: int64(p.w.OutputTokens)})
	return "ok", nil
}

var overloadedError = &rebound.HTTPError{StatusCode: 529,
	Body: []byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)}

func rateLimited(wait time.Duration) error {
	secs := max(int((wait+time.Second-1)/time.Second), 1)
	return &rebound.HTTPError{StatusCode: 429, Header: http.Header{"Retry-After": {fmt.Sprint(secs)}},
		Body: []byte(`{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`)}
}

func permanentError(status int) error {
	body := map[int]string{
		400: `{"error":{"message":"Invalid schema for function 'search'","type":"invalid_request_error","code":"invalid_value"}}`,
		413: `{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}`,
		422: `{"error":{"message":"Unprocessable entity","type":"invalid_request_error"}}`,
		401: `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`,
	}[status]
	return &rebound.HTTPError{StatusCode: status, Body: []byte(body)}
}

const costDay = 24 * time.Hour

// month draws the workload's tasks and calls a day at a time. Every pass
// over it draws the same tasks in the same order, so each strategy meets
// the same traffic while only one day's tasks are held.
type month struct {
	w     CostWorkload
	seed  uint64
	start time.Time
	today []drawnTask // the day being run, reused
	calls []call      // the calls of the task being run, reused
}

// drawnTask is a task of the day as drawn: when in the day it starts, the
// id of its first call, and the generator as it stood before its calls
// were drawn, to draw them again when it runs. A day holds this much a
// task, whatever its calls.
type drawnTask struct {
	at      time.Duration
	firstID uint64
	calls   rand.PCG
}

// each draws the month from its start and runs task for each task, in the
// order the tasks start, and dayDone (if set) after each day. A nil task
// only draws. each stops with ctx's cause when ctx is done, before the
// next task, and returns the generator as it stands after the month.
func (m *month) each(ctx context.Context, task func(at time.Time, calls []call), dayDone func(day int)) (rand.PCG, error) {
	src := rand.NewPCG(m.seed, 1)
	rng := rand.New(src)
	var again rand.PCG
	replay := rand.New(&again)
	var id uint64
	for d := range m.w.Days {
		if ctx.Err() != nil {
			return rand.PCG{}, context.Cause(ctx)
		}
		m.today = m.today[:0]
		for range m.w.TasksPerDay {
			t := drawnTask{at: time.Duration(rng.Int64N(int64(costDay))), firstID: id, calls: *src}
			m.calls = m.drawCalls(rng, id, m.calls[:0])
			id += uint64(len(m.calls))
			m.today = append(m.today, t)
		}
		if task == nil {
			continue
		}
		slices.SortFunc(m.today, func(a, b drawnTask) int { return cmp.Compare(a.at, b.at) })
		dayStart := m.start.Add(time.Duration(d) * costDay)
		for _, t := range m.today {
			if ctx.Err() != nil {
				return rand.PCG{}, context.Cause(ctx)
			}
			again = t.calls
			m.calls = m.drawCalls(replay, t.firstID, m.calls[:0])
			task(dayStart.Add(t.at), m.calls)
		}
		if dayDone != nil {
			dayDone(d + 1)
		}
	}
	return *src, nil
}

// drawCalls draws the calls of one task, numbered from id, onto dst.
func (m *month) drawCalls(rng *rand.Rand, id uint64, dst []call) []call {
	w := m.w
	for range w.MinCalls + rng.IntN(w.MaxCalls-w.MinCalls+1) {
		c := call{id: id, input: int64(w.InputTokens)}
		id++
		if rng.Float64() < w.PermanentRate {
			c.permanent = []int{400, 400, 400, 400, 413, 413, 413, 422, 401, 401}[rng.IntN(10)]
		}
		dst = append(dst, c)
	}
	return dst
}

type incident struct{ from, to time.Time }

// incidents are the month's provider incidents, drawn in time order as
// they are needed: each starts an exponential gap after the last ends.
type incidents struct {
	rng     *rand.Rand
	start   time.Time
	mean    float64       // the mean gap, in nanoseconds
	horizon time.Duration // the month's length
	cur     incident      // the earliest incident not yet over, if ok
	ok      bool
}

// newIncidents starts the incidents of w from the generator state after
// the month's tasks.
func newIncidents(after rand.PCG, w CostWorkload, start time.Time) *incidents {
	in := &incidents{rng: rand.New(&after), start: start, horizon: time.Duration(w.Days) * costDay}
	if w.IncidentsPerDay > 0 {
		in.mean = float64(costDay) / w.IncidentsPerDay
		in.ok = true // the gap before the first counts from the start
		in.cur = incident{to: start}
		in.next()
	}
	return in
}

// next draws the incident after cur, or ends them at the month's end.
func (in *incidents) next() {
	gap := in.rng.ExpFloat64() * in.mean
	// A gap this long ends the incidents of any month, and one of
	// NaN (0 × an infinite mean) would wrap the time.
	if !(gap < math.MaxInt64/2) {
		in.ok = false
		return
	}
	at := in.cur.to.Sub(in.start) + time.Duration(gap)
	if at >= in.horizon {
		in.ok = false
		return
	}
	from := in.start.Add(at)
	in.cur = incident{from: from, to: from.Add(5*time.Minute + time.Duration(in.rng.Int64N(int64(10*time.Minute))))}
}

// cover reports whether t falls within an incident. Successive calls must
// not go back in time.
func (in *incidents) cover(t time.Time) bool {
	for in.ok && in.cur.to.Before(t) {
		in.next()
	}
	return in.ok && !t.Before(in.cur.from)
}
