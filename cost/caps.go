package cost

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"

	"github.com/rebound-go/rebound"
)

// ErrNoPrice is the error of an attempt refused because the caps' price
// table has no price for its target: a cap it cannot price, it cannot
// keep.
var ErrNoPrice = errors.New("cost: no price for the target in the caps' table")

// ErrUnreadBody is the error of an attempt refused because its request
// body cannot be read for what it may cost, so that it may ask for
// anything: a body sent once (too large for rebound.Transport to buffer,
// see its MaxBufferedBody, and without GetBody), one larger than 64 MiB,
// or one encoded other than in gzip or deflate, or broken in its
// encoding.
var ErrUnreadBody = errors.New("cost: the request body cannot be read for what it may cost")

// CapError is the error of an attempt refused before it was sent because
// what it may cost would take a cap past its limit.
type CapError struct {
	Cap   string  // the cap's name
	Limit float64 // the cap, in US dollars
	// Spent is what attempts have cost so far, settled; Held what
	// attempts under way may still cost.
	Spent, Held float64
	// Need is what the refused attempt may cost.
	Need float64
}

func (e *CapError) Error() string {
	return fmt.Sprintf("cost: spend cap %q of $%.6f would be passed: $%.6f spent, $%.6f held, and this attempt may cost $%.6f",
		e.Cap, e.Limit, e.Spent, e.Held, e.Need)
}

// A Cap is a limit on spend that attempts reserve against before they are
// sent. Limit keeps one in memory (a run's); package reboundredis shares
// one among replicas (a tenant's, a day's).
type Cap interface {
	// Reserve holds usd of the cap for one attempt, or refuses it with a
	// *CapError when what is spent and held would pass the cap.
	Reserve(ctx context.Context, usd float64) (Hold, error)
}

// A Hold is an attempt's reservation against a Cap.
type Hold interface {
	// Settle replaces the hold by what the attempt really cost. It is
	// called once.
	Settle(usd float64)
}

// Limit is a Cap in memory: one run's, one conversation's. Its fields are
// set before first use; it is safe for concurrent use.
type Limit struct {
	// Name names the cap in errors. Empty means "run".
	Name string
	// USD is the cap, in US dollars. Zero allows nothing.
	USD float64

	mu          sync.Mutex // guards spent and held
	spent, held float64
}

// Reserve holds usd, or refuses with a *CapError when spent, held and usd
// together would pass the cap. A hold of nothing is refused once the cap
// is reached.
func (l *Limit) Reserve(_ context.Context, usd float64) (Hold, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if total := l.spent + l.held + usd; total > l.USD || usd <= 0 && total >= l.USD {
		name := l.Name
		if name == "" {
			name = "run"
		}
		return nil, &CapError{Cap: name, Limit: l.USD, Spent: l.spent, Held: l.held, Need: usd}
	}
	l.held += usd
	return &limitHold{l: l, usd: usd}, nil
}

// Spent returns what the attempts settled so far cost, in US dollars.
func (l *Limit) Spent() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.spent
}

// Held returns what the attempts in flight are held at, in US dollars:
// reserved, not yet settled.
func (l *Limit) Held() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held
}

type limitHold struct {
	l    *Limit
	usd  float64
	once sync.Once
}

func (h *limitHold) Settle(usd float64) {
	h.once.Do(func() {
		h.l.mu.Lock()
		defer h.l.mu.Unlock()
		h.l.held -= h.usd
		h.l.spent += max(usd, 0)
	})
}

// WithCaps returns a context whose calls keep to caps: every attempt of
// rebound.Do, Stream and Transport made with it (retries and hedges
// included, and so fallback chains and tool calls) reserves what it may
// cost against each cap before it is sent, and is refused with a
// *CapError, nothing sent, when that would pass one. The attempt's real
// cost then replaces the reservation. Caps of an enclosing WithCaps still
// apply (a cap given twice counts once); prices then replace its table.
//
// What an attempt may cost, priced by prices under its target's name:
//
//   - Transport reads the request as the most generous server would:
//     its model (the dearest, if it names several: the body may name
//     one in several keys, and a Gemini path or an Azure OpenAI
//     deployment names the one served, whatever the body says); its output cap for
//     each answer, the largest any field names (max_tokens,
//     max_completion_tokens, max_output_tokens, Gemini's
//     maxOutputTokens or max_output_tokens, and any other key a server
//     might take for one, in any case or spelling, named once or more),
//     or Price.MaxOutputTokens when its dialect's own field does not
//     name one with a positive number in a body that is JSON
//     throughout; for a Gemini request, its thinking budget beyond that
//     (Price.MaxOutputTokens if it sets none); a predicted output's
//     tokens; all of it times the answers it asks for (the largest of n,
//     best_of, candidateCount or candidate_count, any key ending in
//     "count"), for each prompt of a list of them (a legacy completion's
//     "prompt": ["…", "…"]); and its input, a token for every 4 bytes of the body,
//     2000 more for each image it refers to, and Price.MaxInputTokens
//     more when it refers to context the provider keeps (see Price), all
//     of it at the dearest price input may be billed at (a cache write,
//     where the dialect's provider bills one: Anthropic's, Bedrock's,
//     any other than OpenAI's and Gemini's). A
//     field the estimate does not know can raise it, never lower it. A
//     body it cannot read (sent once, unbuffered; over 64 MiB; encoded
//     other than in gzip or deflate) is refused with ErrUnreadBody. A
//     request that names no model and has no body (a list of models)
//     costs nothing. It settles with the usage the response reports (in the
//     body; for a stream, its final usage event), each kind of token at
//     its price (input read afresh, read from the provider's cache,
//     written into it, output); with its reservation when none came (a stream cut short,
//     or an OpenAI stream without stream_options.include_usage, a body
//     left unread) or when the request may have been sent and no answer
//     came (a timeout); with nothing for a failed response (status 400
//     or above), a redirect or a request that never left (a dial
//     error).
//   - Do and Stream know nothing of the requests their attempts make,
//     so their attempts are admitted only when the context says what
//     each may use (WithEstimate): a tool, an SDK with its own HTTP
//     client. They settle with what the attempt reports (Report); else
//     with the reservation, but with nothing for a failure that carries
//     a provider's answer (a *rebound.HTTPError) or never left.
//
// Within an attempt admitted so, nothing is admitted again: the calls its
// function makes (a nested Do, a request through Transport) are the
// attempt's, reserved and settled once, by what it reports.
//
// A cap is therefore passed only by an attempt whose use passes its
// estimate: input in a script of more tokens a byte than 1 in 4, a
// provider's own tool loop that reads its context more than once, a
// price that rises past a prompt's length (Gemini's and Anthropic's
// beyond 200 000 tokens), or a Gemini model that thinks past the budget
// it was given. A target missing from prices refuses its attempts with
// ErrNoPrice.
func WithCaps(ctx context.Context, prices Table, caps ...Cap) context.Context {
	s := &spender{prices: prices}
	if outer, ok := ctx.Value(spenderKey{}).(*spender); ok {
		s.caps = append(s.caps, outer.caps...)
	}
	for _, c := range caps {
		if !slices.Contains(s.caps, c) {
			s.caps = append(s.caps, c)
		}
	}
	ctx = context.WithValue(ctx, spenderKey{}, s)
	return rebound.WithGuard(ctx, s)
}

type spenderKey struct{}

// estimate is what each attempt of a call may use, for spend caps.
type estimate struct {
	target string
	usage  Usage
}

type estimateKey struct{}

// admittedKey marks the context of an attempt a spender admitted.
type admittedKey struct{}

// WithEstimate returns a context in which each attempt of rebound.Do and
// Stream may use up to u, priced as target, for the caps of WithCaps.
// Give it to calls whose requests do not go through rebound.Transport,
// which reserves for each request itself.
func WithEstimate(ctx context.Context, target string, u Usage) context.Context {
	return context.WithValue(ctx, estimateKey{}, estimate{target: target, usage: u})
}

// spender is the rebound.Guard of WithCaps.
type spender struct {
	prices Table
	caps   []Cap
}

// Admit reserves what an attempt may cost against every cap.
func (s *spender) Admit(ctx context.Context, req *http.Request) (context.Context, func(*http.Response, error), error) {
	if ctx.Value(admittedKey{}) != nil {
		return ctx, func(*http.Response, error) {}, nil // the enclosing attempt's
	}
	var (
		need  float64
		price Price
	)
	if req != nil {
		r, err := readRequest(req)
		if err != nil {
			return ctx, nil, fmt.Errorf("%w (%s %s)", err, req.Method, req.URL.Path)
		}
		if len(r.models) == 0 && r.input == 0 {
			return ctx, func(*http.Response, error) {}, nil // no model, no body: nothing to pay for
		}
		models := r.models
		if len(models) == 0 {
			models = []string{""}
		}
		// A body that names several models (in keys that differ in case,
		// or twice) is held at the dearest: servers differ in which they
		// take.
		for i, m := range models {
			p, ok := s.prices[m]
			if !ok {
				return ctx, nil, fmt.Errorf("%w: %q (%s %s)", ErrNoPrice, m, req.Method, req.URL.Path)
			}
			if c := r.cost(p); i == 0 || c > need {
				need, price = c, p
			}
		}
	} else {
		e, ok := ctx.Value(estimateKey{}).(estimate)
		if !ok {
			return ctx, func(*http.Response, error) {}, nil
		}
		p, ok := s.prices[e.target]
		if !ok {
			return ctx, nil, fmt.Errorf("%w: %q", ErrNoPrice, e.target)
		}
		need, price = p.Of(e.usage), p
	}
	holds := make([]Hold, 0, len(s.caps))
	for _, c := range s.caps {
		h, err := c.Reserve(ctx, need)
		if err != nil {
			for _, h := range holds {
				h.Settle(0)
			}
			return ctx, nil, err
		}
		holds = append(holds, h)
	}
	a := &admission{price: price, need: need, holds: holds}
	ctx = context.WithValue(ctx, admittedKey{}, true)
	if req != nil {
		return ctx, a.response, nil
	}
	return WithRecorder(ctx, &a.reported), a.done, nil
}

// admission is an attempt's holds, until it settles them.
type admission struct {
	price    Price
	need     float64  // what was held
	holds    []Hold   // one per cap
	reported Recorder // what a Do or Stream attempt reports
	once     sync.Once
}

// settle replaces the holds by usd.
func (a *admission) settle(usd float64) {
	a.once.Do(func() {
		for _, h := range a.holds {
			h.Settle(usd)
		}
	})
}

// done settles a Do or Stream attempt: with what it reported, else with
// the hold, but with nothing for a failure that never reached a provider
// or carries its answer.
func (a *admission) done(_ *http.Response, err error) {
	switch u := a.reported.Usage(); {
	case u != Usage{}:
		a.settle(a.price.Of(u))
	case err != nil && unbilled(err):
		a.settle(0)
	default:
		a.settle(a.need)
	}
}

// response settles a Transport attempt: at once for no response, a failed
// one, a redirect or a protocol upgrade, else as its body reports its
// usage.
func (a *admission) response(resp *http.Response, err error) {
	switch {
	case err != nil && unbilled(err), resp != nil && resp.StatusCode >= http.StatusMultipleChoices:
		a.settle(0)
	case err != nil, resp.StatusCode < http.StatusOK:
		a.settle(a.need) // sent, and no account of it will come
	default:
		WatchUsage(resp, func(u Usage, final bool) {
			if final {
				a.settle(a.price.Of(u))
			} else {
				a.settle(max(a.price.Of(u), a.need)) // no final count: the hold, unless more was seen
			}
		})
	}
}

// unbilled reports whether err proves its attempt cost nothing: it never
// left (a dial error), or a provider refused it (an error status).
func unbilled(err error) bool {
	var (
		herr *rebound.HTTPError
		op   *net.OpError
		dns  *net.DNSError
	)
	return errors.As(err, &herr) || errors.As(err, &dns) || errors.As(err, &op) && op.Op == "dial"
}
