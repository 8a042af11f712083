package rebound

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/rebound-go/rebound/internal/provider"
)

// Classify is the default classifier. It knows the Permanent and Retryable
// marks, context errors, HTTP failures (through *HTTPError, judged by
// ClassifyResponse: status, headers, and the error bodies of the hosted
// providers and the local servers), a stream's error events (through
// *StreamError), and network errors. Anything else is transient.
// Along a chain of wrapped errors the outermost one it knows decides.
//
// A connection that broke or timed out may work next time; a certificate
// that does not verify, a host that does not exist or a URL that cannot be
// sent will not. context.DeadlineExceeded is transient because, when the
// caller's own context is still live, it can only come from a per-attempt
// timeout; Do checks the caller's context before asking the classifier.
func Classify(err error) Verdict { return classify(err, time.Now, nil) }

// classify is Classify by the clock now, read only for an HTTP-date wait
// hint without a Date header, with rules asked first about any response.
func classify(err error, now func() time.Time, rules []Rule) Verdict {
	if v, ok := classifyChain(err, now, rules); ok {
		return v
	}
	return Verdict{Kind: KindTransient}
}

// classifyChain walks err's tree as errors.Is does, without errors.As's
// allocations: Classify sits on every retry's path.
func classifyChain(err error, now func() time.Time, rules []Rule) (Verdict, bool) {
	for err != nil {
		if v, ok := classifyOne(err, now, rules); ok {
			return v, true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if v, ok := classifyChain(e, now, rules); ok {
					return v, true
				}
			}
			return Verdict{}, false
		default:
			return Verdict{}, false
		}
	}
	return Verdict{}, false
}

func classifyOne(err error, now func() time.Time, rules []Rule) (Verdict, bool) {
	switch e := err.(type) {
	case *permanentError:
		return Verdict{Kind: KindPermanent}, true
	case *retryableError:
		return Verdict{Kind: KindTransient}, true
	case *HTTPError:
		return classifyResponse(e.StatusCode, e.Header, e.Body, now, rules), true
	case *StreamError:
		return classifyResponse(0, nil, e.Data, now, rules), true
	case *tls.CertificateVerificationError, x509.UnknownAuthorityError, x509.HostnameError,
		x509.CertificateInvalidError:
		return Verdict{Kind: KindPermanent}, true
	case *net.DNSError:
		if e.IsNotFound {
			return Verdict{Kind: KindPermanent}, true
		}
	case *url.Error:
		if e.Err != nil && strings.HasPrefix(e.Err.Error(), "unsupported protocol scheme") {
			return Verdict{Kind: KindPermanent}, true
		}
	case syscall.Errno:
		if e == syscall.ECONNRESET || e == syscall.ECONNREFUSED {
			return Verdict{Kind: KindTransient}, true
		}
	}
	switch err {
	case context.Canceled:
		return Verdict{Kind: KindCanceled}, true
	case context.DeadlineExceeded, io.ErrUnexpectedEOF, io.EOF:
		return Verdict{Kind: KindTransient}, true
	}
	return Verdict{}, false
}

// ClassifyResponse judges a failed HTTP response by its status, headers and
// the start of its body, in any of the error shapes of OpenAI, Azure,
// Anthropic, Gemini, Vertex, Bedrock, OpenRouter, Groq, Mistral, DeepSeek,
// the OpenAI-compatible hosts and the local servers (vLLM, TGI,
// llama.cpp, Ollama, LM Studio).
//
// The status gives a first answer: 408, 409, 424, 425, 5xx and unknown
// statuses are transient, 429 rate-limited, 529 and Groq's 498
// overloaded, 402 quota exhausted, 413 context overflow, other 4xx
// permanent. What the response says overrides it: an OpenAI 429
// insufficient_quota, a 429 naming a daily limit and a DeepSeek
// "Insufficient Balance" are quota exhausted; a 400 "prompt is too long",
// a local server's 500 that the context size was exceeded and a 429 for a
// request larger than the whole per-minute limit are context overflows; a
// 503 "overloaded" is an overload; Bedrock's x-amzn-ErrorType names its
// errors. "x-should-retry: false" always wins; "true" makes a failure
// transient unless the body says quota exhausted, context overflow or
// permanent.
//
// The wait hint comes from retry-after-ms, Retry-After, Gemini's
// RetryInfo.retryDelay, a body "retry_after", a wait named in the error
// message ("Please try again in 7.66s"), and, on a 429 with none of
// these, the reset header of the rate limit that ran out, in that order.
// An HTTP-date is measured from the response's Date header, else from
// now. A hint up to a year is a real (long) request to wait; a negative,
// malformed or longer one is ignored.
func ClassifyResponse(status int, h http.Header, body []byte) Verdict {
	return classifyResponse(status, h, body, time.Now, nil)
}

// classifyResponse is ClassifyResponse by the clock now, read only for an
// HTTP-date wait hint without a Date header, with rules asked first.
func classifyResponse(status int, h http.Header, body []byte, now func() time.Time, rules []Rule) Verdict {
	pe, parsed := provider.Read(h, body)
	if v, ok := applyRules(rules, status, h, body, &pe, parsed, now); ok {
		return v
	}
	v := Verdict{Kind: statusKind(status)}
	if status == 0 && pe.HTTPStatus != 0 {
		v.Kind = statusKind(pe.HTTPStatus) // an error event in a stream, naming a status
	}
	class := pe.Class(status)
	bodyKind, bodySays := kindOf(class)
	switch {
	case !bodySays:
	case status == 0 && pe.HTTPStatus == 0:
		// An error event in a stream that names no status has none to
		// outweigh its body.
		v.Kind = bodyKind
	case bodyKind == KindPermanent && class != provider.Unservable:
		// An error type that blames the request does not outweigh a
		// status that blames the server.
	case bodyKind == KindRateLimited && v.Kind == KindQuotaExhausted:
		// Gemini's 402 RESOURCE_EXHAUSTED: the money is gone.
	default:
		v.Kind = bodyKind
	}
	switch strings.ToLower(strings.TrimSpace(h.Get("X-Should-Retry"))) {
	case "false":
		return Verdict{Kind: KindPermanent}
	case "true":
		// The server's yes lifts a status that would not be retried, but
		// not a body that says the failure cannot succeed; it never makes
		// a failure less retryable.
		bodyForbids := bodySays && (bodyKind == KindPermanent || bodyKind == KindQuotaExhausted || bodyKind == KindContextOverflow)
		if !v.Kind.retryable() && !bodyForbids {
			v.Kind = KindTransient
		}
	}
	v.ServerWait, v.HasServerWait = responseWait(status, h, &pe, parsed, now)
	return v
}

// kindOf is the Kind of what a body says; false if it says nothing.
func kindOf(c provider.Class) (Kind, bool) {
	switch c {
	case provider.QuotaExhausted:
		return KindQuotaExhausted, true
	case provider.ContextOverflow:
		return KindContextOverflow, true
	case provider.Overloaded:
		return KindOverloaded, true
	case provider.RateLimited:
		return KindRateLimited, true
	case provider.Transient:
		return KindTransient, true
	case provider.Permanent, provider.Unservable:
		return KindPermanent, true
	}
	return 0, false
}

// statusKind is the verdict of a status alone.
func statusKind(status int) Kind {
	switch {
	case status == http.StatusTooManyRequests:
		return KindRateLimited
	case status == 529, status == 498: // 498: Groq's flex tier at capacity
		return KindOverloaded
	case status == http.StatusPaymentRequired:
		return KindQuotaExhausted
	case status == http.StatusRequestEntityTooLarge:
		return KindContextOverflow
	case status == http.StatusRequestTimeout, status == http.StatusConflict, status == http.StatusTooEarly,
		status == http.StatusFailedDependency: // 424: a model failed upstream (Bedrock, TGI)
		return KindTransient
	case status >= 400 && status < 500:
		return KindPermanent
	}
	return KindTransient
}

// ErrorCode returns what the provider's error in err (an *HTTPError or a
// *StreamError, wrapped or not, as in the error Do returns) says: the
// error's type (OpenAI's and Anthropic's type, Gemini's status, Bedrock's
// x-amzn-ErrorType, TGI's error_type) and code (OpenAI's code, Anthropic's
// details.error_code, Azure's innererror code). Both are empty when err
// carries no such error. Logs and metrics use them to tell a 400
// context_length_exceeded from a 400 invalid_value; each is at most 64
// bytes, with any control characters dropped.
func ErrorCode(err error) (errType, code string) {
	_, h, body, found := providerResponse(err)
	if !found {
		return "", ""
	}
	pe, ok := provider.Read(h, body)
	if !ok {
		return "", ""
	}
	return pe.Identifiers()
}

// providerResponse returns the status, headers and body of the first
// *HTTPError or *StreamError in err's tree, walked as errors.As walks it
// (a *GiveUpError wraps several). A stream's error has status 0.
func providerResponse(err error) (status int, h http.Header, body []byte, found bool) {
	switch x := err.(type) {
	case nil:
	case *HTTPError:
		return x.StatusCode, x.Header, x.Body, true
	case *StreamError:
		return 0, nil, x.Data, true
	case interface{ Unwrap() error }:
		return providerResponse(x.Unwrap())
	case interface{ Unwrap() []error }:
		for _, e := range x.Unwrap() {
			if status, h, body, ok := providerResponse(e); ok {
				return status, h, body, true
			}
		}
	}
	return 0, nil, nil, false
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

// ProviderSideEffects reports whether req may have side effects, by what
// rebound knows of the providers' HTTP APIs. Set as Transport.SideEffects,
// it keeps the requests that create something at a provider (a file, a
// batch, a fine-tuning job, an upload, a vector store, an assistant, a
// thread's message or run) from being made twice.
//
// A request has none when it is a GET, HEAD, OPTIONS or TRACE, or a POST
// to a model call whose only product is its answer, known by the end of
// its path:
//
//	OpenAI, and the servers that speak its API
//	          …/chat/completions  …/completions  …/responses
//	          …/responses/input_tokens  …/embeddings  …/moderations
//	          …/audio/speech  …/audio/transcriptions  …/audio/translations
//	          …/images/generations  …/images/edits  …/images/variations
//	Anthropic …/v1/messages  …/v1/messages/count_tokens  …/v1/complete
//	Gemini    …:generateContent  …:streamGenerateContent  …:countTokens
//	          …:embedContent  …:batchEmbedContents
//	Ollama    …/api/chat  …/api/generate  …/api/embed  …/api/embeddings
//	rerankers …/rerank
//
// Any other request may: a path rebound does not know is taken to create
// something, and so is a path it knows with any other method, or a
// trailing slash. A model call has side effects too when it asks the
// provider to act beyond answering: a Responses call that adds its turn to
// a stored conversation ("conversation") or lets the provider call a
// remote MCP server (a tool of type "mcp"), a Messages call with
// "mcp_servers". For these, and only these, the body of a Responses or
// Messages call is read, through GetBody (without one, a body that cannot
// be read without being consumed is taken to have them), for the JSON
// strings "conversation", "mcp" and "mcp_servers": a quoted name is found
// only where it is a whole key or value, and one that is not what it
// looks like costs a retry, never a duplicate. A stored or background
// answer (Responses' and Chat Completions' "store", Responses'
// "background") is still only the answer, paid for again on a retry as any
// other answer is, and does not count.
func ProviderSideEffects(req *http.Request) bool { return provider.SideEffects(req) }
