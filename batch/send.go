package batch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/relay"
	"github.com/rebound-go/rebound/internal/scrub"
	"github.com/rebound-go/rebound/ratelimit"
)

// client returns the http.Client a run sends with: rebound.Transport over
// ratelimit.Transport over Base, each attempt counted, redirects not
// followed (a provider does not redirect an API call; a redirect to
// another host would carry the key there). closeIdle closes the
// connections of a Base made for the run, so that none outlives it.
func (r *Runner) client(s *state) (c *http.Client, closeIdle func()) {
	base := r.Base
	closeIdle = func() {}
	if base == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = r.concurrency()
		base, closeIdle = t, t.CloseIdleConnections
	}
	limiter := r.Limiter
	if limiter == nil {
		limiter = ratelimit.New(ratelimit.Config{})
	}
	policy := r.Policy
	if policy.AttemptTimeout == 0 {
		policy.AttemptTimeout = DefaultAttemptTimeout
	}
	user := policy.Observer
	policy.Observer = rebound.ObserverFunc(func(e rebound.Event) {
		switch {
		case e.Type == rebound.EventRetry:
			s.retries.Add(1)
			s.retrying.Add(1)
		case e.Type == rebound.EventAttempt && e.Attempt > 1:
			s.retrying.Add(-1)
		}
		if user != nil {
			user.Observe(e)
		}
	})
	adaptive := r.Adaptive
	if adaptive == nil {
		adaptive = ratelimit.NewAdaptive(ratelimit.AdaptiveConfig{Initial: r.concurrency(), Max: r.concurrency()})
	}
	return &http.Client{
		Transport: &rebound.Transport{
			Base:   &ratelimit.Transport{Base: countAttempts{base, &s.attempts}, Limiter: limiter, Adaptive: adaptive},
			Policy: policy,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, closeIdle
}

// attemptsKey is the context key of a request's attempt count.
type attemptsKey struct{}

// countAttempts counts the attempts under the retries: all of them, and
// those of the request whose context carries a count.
type countAttempts struct {
	base http.RoundTripper
	all  *atomic.Int64
}

func (c countAttempts) RoundTrip(req *http.Request) (*http.Response, error) {
	c.all.Add(1)
	if n, ok := req.Context().Value(attemptsKey{}).(*atomic.Int64); ok {
		n.Add(1)
	}
	return c.base.RoundTrip(req)
}

// requestIDHeaders name the provider's id of a request, the first found
// winning: OpenAI's and most others', Anthropic's, Bedrock's, Azure's.
var requestIDHeaders = []string{"x-request-id", "request-id", "x-amzn-requestid", "apim-request-id"}

// send sends the item of claim c, retries and all, and says what came of
// it.
func (s *state) send(ctx context.Context, c Claim) Outcome {
	o := Outcome{ID: c.ID}
	r, ok := s.requests[c.ID]
	if !ok { // the journal's input digest matched, so this cannot be
		o.State, o.ErrorCode, o.ErrorMessage = FailedPermanent, "unknown_custom_id", "the journal handed out a custom_id the input does not have"
		return o
	}
	attempts := new(atomic.Int64)
	ctx = ratelimit.WithPriority(context.WithValue(ctx, attemptsKey{}, attempts), ratelimit.Batch)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, joinURL(s.runner.BaseURL, r.URL), bytes.NewReader(r.Body))
	if err != nil {
		o.State, o.ErrorCode, o.ErrorMessage = FailedPermanent, "invalid_request", err.Error()
		return o
	}
	for k, v := range s.runner.Header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	secrets := scrub.Of(req)
	resp, err := s.client.Do(req)
	o.Attempts = int(attempts.Load())
	if err != nil {
		return s.failed(ctx, o, err, secrets)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponse+1))
	o.StatusCode = resp.StatusCode
	for _, h := range requestIDHeaders {
		if id := resp.Header.Get(h); id != "" {
			o.RequestID = secrets.String(id)
			break
		}
	}
	switch {
	case err != nil:
		return s.failed(ctx, o, err, secrets)
	case len(body) > MaxResponse:
		o.State, o.ErrorCode, o.ErrorMessage = FailedPermanent, "response_too_large", fmt.Sprintf("the response body is larger than %d MiB", MaxResponse>>20)
		return o
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		o.State, o.Body = Succeeded, body
		return o
	}
	o.Body = secrets.Bytes(body)
	return s.failed(ctx, o, &rebound.HTTPError{StatusCode: resp.StatusCode, Header: secrets.Header(resp.Header), Body: o.Body}, secrets)
}

// failed completes o for a request that failed with err: Failed when a
// later run may cure it, FailedPermanent when none will, Pending when the
// run was stopped first. Its message keeps none of the request's secrets.
//
// A request that could not reach its host (its name did not resolve, no
// connection could be made) is Failed, code transient, whatever the
// verdict for the call: an unknown host is permanent for one call, which
// should not retry a mistyped name in a tight loop, but a batch whose
// machine lost its name service for a moment would otherwise be lost
// whole, every request recorded as never to be sent again.
func (s *state) failed(ctx context.Context, o Outcome, err error, secrets scrub.Secrets) Outcome {
	if ctx.Err() != nil {
		return Outcome{ID: o.ID, State: Pending, Attempts: o.Attempts}
	}
	var v rebound.Verdict
	var gu *rebound.GiveUpError
	if errors.As(err, &gu) {
		v = gu.Verdict
	} else {
		v = s.runner.Policy.Classify(err)
	}
	o.State = Failed
	o.ErrorMessage = secrets.String(err.Error())
	switch {
	case o.StatusCode >= 300 && o.StatusCode < 400:
		o.State, v.Kind = FailedPermanent, rebound.KindPermanent
	case o.StatusCode == 0 && relay.Unconnected(err):
		v.Kind = rebound.KindTransient
		if gu != nil { // the call's own verdict, which this one overrides, left unsaid
			n := "attempts"
			if gu.Attempts == 1 {
				n = "attempt"
			}
			o.ErrorMessage = secrets.String(fmt.Sprintf("could not reach the host (%d %s): %v", gu.Attempts, n, gu.Err))
		}
	case v.Kind == rebound.KindPermanent || v.Kind == rebound.KindContextOverflow:
		o.State = FailedPermanent
	}
	o.ErrorCode = v.Kind.String()
	return o
}

// joinURL appends path to base's path, once: a base that ends with the
// path's first segment ("…/v1" and "/v1/chat/completions") does not
// repeat it.
func joinURL(base, path string) string {
	base = strings.TrimRight(base, "/")
	if i := strings.IndexByte(path[1:], '/'); i >= 0 {
		if first := path[:i+1]; strings.HasSuffix(base, first) {
			path = path[i+1:]
		}
	}
	return base + path
}
