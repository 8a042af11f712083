package rebound

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rebound-go/rebound/internal/header"
	"github.com/rebound-go/rebound/internal/provider"
)

// A Rule classifies the failed responses it matches, before the built-in
// rules do: the way to teach rebound a provider whose per-minute limit
// reads like an exhausted quota, or a gateway's own error. A response
// matches when every matcher set in the rule matches it; a rule must set
// at least one. The first rule of Policy.Rules that matches decides.
//
// Rules judge HTTP failures (an *HTTPError, as Transport and NewHTTPError
// make) and error events in a stream (a *StreamError, which has no status
// or headers); Do's other errors pass them by.
type Rule struct {
	// Status matches the response's HTTP status; zero matches any.
	Status int
	// Header matches a response that has this header. HeaderContains,
	// if set, must be in its value; both are compared ignoring case.
	Header, HeaderContains string
	// Type matches the error's type, ignoring case: OpenAI's and
	// Anthropic's type, Gemini's status, Bedrock's x-amzn-ErrorType, TGI's
	// error_type (what ErrorCode returns first).
	Type string
	// Code matches the error's code, ignoring case: OpenAI's code,
	// Anthropic's details.error_code, Azure's innererror code (what
	// ErrorCode returns second).
	Code string
	// Message matches a response whose error message contains it,
	// ignoring case; a body in no known shape is matched whole.
	Message string

	// Kind is the verdict on a matching response. The zero value is
	// KindTransient; KindCanceled cannot be given. A server's
	// "x-should-retry: false" still wins over a kind that would be
	// retried: the verdict is then KindPermanent.
	Kind Kind
	// Wait is the verdict's wait when the response asks for none of its
	// own, taken as a server's wait hint (it counts against WaitBudget and
	// MaxServerWait). Zero means none (computed backoff); NoDelay means
	// retry at once.
	Wait time.Duration
}

// match reports whether r matches a response whose error pe says.
func (r *Rule) match(status int, h http.Header, body []byte, pe *provider.Error, parsed bool) bool {
	if r.Status != 0 && r.Status != status {
		return false
	}
	if r.Header != "" {
		values := h.Values(r.Header)
		if len(values) == 0 || !slices.ContainsFunc(values, func(v string) bool { return containsFold(v, r.HeaderContains) }) {
			return false
		}
	}
	if r.Type != "" && !strings.EqualFold(r.Type, pe.Type) && !strings.EqualFold(r.Type, pe.Status) {
		return false
	}
	if r.Code != "" && !strings.EqualFold(r.Code, pe.Code) && !strings.EqualFold(r.Code, pe.ErrorCode) && !strings.EqualFold(r.Code, pe.InnerCode) {
		return false
	}
	if r.Message != "" {
		msg := pe.Message
		if !parsed || msg == "" {
			msg = string(body)
		}
		if !containsFold(msg, r.Message) {
			return false
		}
	}
	return true
}

// ruleVerdict is the verdict of the first rule that matches the response
// in err's tree, if any: rules are asked before a Policy's Classifier.
func ruleVerdict(err error, now func() time.Time, rules []Rule) (Verdict, bool) {
	if len(rules) == 0 {
		return Verdict{}, false
	}
	status, h, body, found := unmarkedResponse(err)
	if !found {
		return Verdict{}, false
	}
	pe, parsed := provider.Read(h, body)
	return applyRules(rules, status, h, body, &pe, parsed, now)
}

// unmarkedResponse is providerResponse, unless a Permanent or Retryable
// mark comes first in err's tree: the caller's mark outweighs any rule.
func unmarkedResponse(err error) (status int, h http.Header, body []byte, found bool) {
	switch x := err.(type) {
	case *permanentError, *retryableError:
		return 0, nil, nil, false
	case *HTTPError, *StreamError:
		return providerResponse(x)
	case interface{ Unwrap() error }:
		return unmarkedResponse(x.Unwrap())
	case interface{ Unwrap() []error }:
		for _, e := range x.Unwrap() {
			if status, h, body, ok := unmarkedResponse(e); ok {
				return status, h, body, true
			}
		}
	}
	return 0, nil, nil, false
}

// applyRules is the verdict of the first of rules that matches a response
// whose error pe says: its kind, and the response's own wait or else the
// rule's.
func applyRules(rules []Rule, status int, h http.Header, body []byte, pe *provider.Error, parsed bool, now func() time.Time) (Verdict, bool) {
	for i := range rules {
		r := &rules[i]
		if !r.match(status, h, body, pe, parsed) {
			continue
		}
		v := Verdict{Kind: r.Kind}
		if v.Kind.retryable() && strings.EqualFold(strings.TrimSpace(h.Get("X-Should-Retry")), "false") {
			return Verdict{Kind: KindPermanent}, true
		}
		v.ServerWait, v.HasServerWait = responseWait(status, h, pe, parsed, now)
		if !v.HasServerWait && r.Wait != 0 {
			v.ServerWait, v.HasServerWait = durationOr(r.Wait, 0), true
		}
		return v, true
	}
	return Verdict{}, false
}

// containsFold reports whether s contains substr, ignoring case.
func containsFold(s, substr string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(substr))
}

// validate reports the first thing wrong with the rule at key.
func (r *Rule) validate(key string) error {
	switch {
	case r.HeaderContains != "" && r.Header == "":
		return policyErr(key+".header_contains", "needs header, the name of the header to look in")
	case r.Status == 0 && r.Header == "" && r.Type == "" && r.Code == "" && r.Message == "":
		return policyErr(key, "matches every failure; set at least one of status, header, type, code, message")
	case r.Status != 0 && (r.Status < 100 || r.Status > 599):
		return policyErr(key+".status", "want an HTTP status from 100 to 599, got %d", r.Status)
	case r.Header != "" && strings.ContainsFunc(r.Header, func(c rune) bool { return !isTokenChar(c) }):
		return policyErr(key+".header", "%s is not a header name", quote(r.Header))
	case int(r.Kind) >= len(kindNames):
		return policyErr(key+".kind", "unknown value %d", r.Kind)
	case r.Kind == KindCanceled:
		return policyErr(key+".kind", "canceled is the caller's own doing; a response cannot be")
	case r.Wait < 0 && r.Wait != NoDelay:
		return policyErr(key+".wait_ms", "must not be negative (got %v)", r.Wait)
	case r.Wait > header.MaxHint:
		return policyErr(key+".wait_ms", "%v is longer than a year", r.Wait)
	}
	return nil
}

// isTokenChar reports whether c may be in a header name (RFC 9110's
// token).
func isTokenChar(c rune) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", c)
}

// ruleKey names rule i in errors, as a JSON path.
func ruleKey(i int) string { return "rules[" + strconv.Itoa(i) + "]" }

// ruleJSON is a Rule's wire form.
type ruleJSON struct {
	Status         int    `json:"status,omitempty"`
	Header         string `json:"header,omitempty"`
	HeaderContains string `json:"header_contains,omitempty"`
	Type           string `json:"type,omitempty"`
	Code           string `json:"code,omitempty"`
	Message        string `json:"message,omitempty"`
	Kind           Kind   `json:"kind"`
	WaitMS         *int64 `json:"wait_ms,omitempty"`
}

var ruleKeys = []string{"status", "header", "header_contains", "type", "code", "message", "kind", "wait_ms"}

// rulesJSON is rules' wire form.
func rulesJSON(rules []Rule) []ruleJSON {
	if len(rules) == 0 {
		return nil
	}
	out := make([]ruleJSON, len(rules))
	for i, r := range rules {
		out[i] = ruleJSON{Status: r.Status, Header: r.Header, HeaderContains: r.HeaderContains,
			Type: r.Type, Code: r.Code, Message: r.Message, Kind: r.Kind}
		switch {
		case r.Wait == NoDelay:
			out[i].WaitMS = ptr[int64](0)
		case r.Wait > 0:
			out[i].WaitMS = ms(r.Wait)
		}
	}
	return out
}

// rulesValue reads rules: an array of objects, each with a kind.
func rulesValue(v json.RawMessage) ([]Rule, error) {
	var raws []json.RawMessage
	if v[0] != '[' || json.Unmarshal(v, &raws) != nil {
		return nil, policyErr("rules", "want an array of rules, got %s", given(v))
	}
	rules := make([]Rule, len(raws))
	for i, raw := range raws {
		key := ruleKey(i)
		obj, err := jsonObject(key, "an object", raw)
		if err != nil {
			return nil, err
		}
		if err := knownKeys(key, obj, ruleKeys); err != nil {
			return nil, err
		}
		r := &rules[i]
		if v := obj["status"]; v != nil {
			n, err := integer(key+".status", "an HTTP status", v, 32)
			if err != nil {
				return nil, err
			}
			r.Status = int(n)
		}
		for _, f := range []struct {
			key string
			dst *string
		}{{"header", &r.Header}, {"header_contains", &r.HeaderContains}, {"type", &r.Type}, {"code", &r.Code}, {"message", &r.Message}} {
			if v := obj[f.key]; v != nil && (v[0] != '"' || json.Unmarshal(v, f.dst) != nil) {
				return nil, policyErr(key+"."+f.key, "want a string, got %s", given(v))
			}
		}
		v := obj["kind"]
		if v == nil {
			return nil, policyErr(key+".kind", "missing (want %s)", wantList(kindNames[:KindCanceled]))
		}
		k, err := enumValue(key+".kind", v, kindNames[:])
		if err != nil {
			// The same error, listing only the kinds a rule may give.
			_, err = enumValue(key+".kind", v, kindNames[:KindCanceled])
			return nil, err
		}
		r.Kind = Kind(k)
		if r.Wait, err = msValue(key+".wait_ms", obj["wait_ms"], NoDelay); err != nil {
			return nil, err
		}
	}
	return rules, nil
}

// Classify returns the verdict p gives a failed attempt's error, as its
// retries judge it: the first of its Rules that matches, else its
// Classifier, else Classify. A caller handed the final failure of a
// Transport (a response with status 400 or above, as an *HTTPError, or a
// *GiveUpError) learns from it what to do with the request next.
func (p *Policy) Classify(err error) Verdict { return p.classify(err, time.Now) }

// classify is Classify by the clock now.
func (p *Policy) classify(err error, now func() time.Time) Verdict {
	if p.Classifier != nil {
		if v, ok := ruleVerdict(err, now, p.Rules); ok {
			return v
		}
		return p.Classifier(err)
	}
	return classify(err, now, p.Rules)
}
