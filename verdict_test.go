package rebound

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestClassifyHTTPStatus(t *testing.T) {
	want := map[int]Kind{
		400: KindPermanent, 401: KindPermanent, 403: KindPermanent, 404: KindPermanent, 422: KindPermanent,
		413: KindContextOverflow,
		408: KindTransient, 409: KindTransient, 425: KindTransient,
		429: KindRateLimited,
		500: KindTransient, 502: KindTransient, 503: KindTransient, 504: KindTransient, 599: KindTransient,
		529: KindOverloaded,
	}
	for status, kind := range want {
		if v := ClassifyHTTP(status, http.Header{}); v.Kind != kind || v.HasServerWait {
			t.Errorf("%d: %+v, want %v without a hint", status, v, kind)
		}
	}
}

func TestShouldRetryHeader(t *testing.T) {
	for _, tc := range []struct {
		status int
		value  string
		want   Kind
	}{
		{503, "false", KindPermanent},
		{429, "false", KindPermanent},
		{400, "true", KindTransient},
		{429, "true", KindRateLimited},
		{503, "TRUE", KindTransient},
		{400, "maybe", KindPermanent},
	} {
		h := http.Header{"X-Should-Retry": {tc.value}}
		if v := ClassifyHTTP(tc.status, h); v.Kind != tc.want {
			t.Errorf("%d with x-should-retry %q: %v, want %v", tc.status, tc.value, v.Kind, tc.want)
		}
	}
}

func TestServerWaitHint(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	date := func(t time.Time) string { return t.Format(http.TimeFormat) }
	for _, tc := range []struct {
		name string
		h    http.Header
		want time.Duration
		ok   bool
	}{
		{"none", http.Header{}, 0, false},
		{"seconds", http.Header{"Retry-After": {"1"}}, time.Second, true},
		{"zero seconds", http.Header{"Retry-After": {"0"}}, 0, true},
		{"spaces", http.Header{"Retry-After": {" 7 "}}, 7 * time.Second, true},
		{"ms wins", http.Header{"Retry-After": {"5"}, "Retry-After-Ms": {"1500.5"}}, 1500500 * time.Microsecond, true},
		{"bad ms falls back", http.Header{"Retry-After": {"5"}, "Retry-After-Ms": {"soon"}}, 5 * time.Second, true},
		{"negative ms falls back", http.Header{"Retry-After": {"5"}, "Retry-After-Ms": {"-3"}}, 5 * time.Second, true},
		{"NaN ms", http.Header{"Retry-After-Ms": {"NaN"}}, 0, false},
		{"negative seconds", http.Header{"Retry-After": {"-1"}}, 0, false},
		{"fraction seconds", http.Header{"Retry-After": {"1.5"}}, 0, false},
		{"garbage", http.Header{"Retry-After": {"tomorrow-ish"}}, 0, false},
		{"absurd seconds", http.Header{"Retry-After": {"99999999999999999999"}}, 0, false},
		{"huge but parsable seconds", http.Header{"Retry-After": {"9223372036854775807"}}, 0, false},
		{"an hour", http.Header{"Retry-After": {"3600"}}, time.Hour, true},
		{"a day and more", http.Header{"Retry-After": {"90000"}}, 25 * time.Hour, true},
		{"two years", http.Header{"Retry-After": {"63072000"}}, 0, false},
		{"absurd ms", http.Header{"Retry-After-Ms": {"1e300"}}, 0, false},
		{"date", http.Header{"Retry-After": {date(now.Add(90 * time.Second))}}, 90 * time.Second, true},
		{"date against Date header", http.Header{"Retry-After": {date(now.Add(time.Hour + 30*time.Second))}, "Date": {date(now.Add(time.Hour))}}, 30 * time.Second, true},
		{"date in the past", http.Header{"Retry-After": {date(now.Add(-time.Minute))}}, 0, true},
		{"date absurdly far", http.Header{"Retry-After": {date(now.AddDate(5, 0, 0))}}, 0, false},
	} {
		got, ok := ServerWaitHint(tc.h, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: (%v, %v), want (%v, %v)", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

type opaqueError struct{}

func (opaqueError) Error() string { return "something odd" }

func TestClassify(t *testing.T) {
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	refused := &url.Error{Op: "Post", URL: "http://127.0.0.1:1", Err: &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
	for _, tc := range []struct {
		name string
		err  error
		want Kind
	}{
		{"unknown", errors.New("boom"), KindTransient},
		{"opaque type", opaqueError{}, KindTransient},
		{"permanent mark", Permanent(errors.New("bad")), KindPermanent},
		{"wrapped permanent", fmt.Errorf("tool: %w", Permanent(io.EOF)), KindPermanent},
		{"retryable mark over 400", Retryable(&HTTPError{StatusCode: 400}), KindTransient},
		{"http 503", &HTTPError{StatusCode: 503}, KindTransient},
		{"wrapped http 401", fmt.Errorf("call: %w", &HTTPError{StatusCode: 401}), KindPermanent},
		{"joined", errors.Join(errors.New("x"), &HTTPError{StatusCode: 429}), KindRateLimited},
		{"canceled", fmt.Errorf("op: %w", context.Canceled), KindCanceled},
		{"attempt timeout", context.DeadlineExceeded, KindTransient},
		{"reset", reset, KindTransient},
		{"refused", refused, KindTransient},
		{"unexpected EOF", &url.Error{Op: "Get", Err: io.ErrUnexpectedEOF}, KindTransient},
		{"dns not found", &net.DNSError{Err: "no such host", Name: "x.invalid", IsNotFound: true}, KindPermanent},
		{"dns timeout", &net.DNSError{Err: "timeout", IsTimeout: true}, KindTransient},
		{"unknown authority", &url.Error{Op: "Get", Err: x509.UnknownAuthorityError{}}, KindPermanent},
		{"bad scheme", &url.Error{Op: "Get", URL: "ftp://x", Err: errors.New(`unsupported protocol scheme "ftp"`)}, KindPermanent},
	} {
		if v := Classify(tc.err); v.Kind != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, v.Kind, tc.want)
		}
	}
}

func TestClassifyCarriesHint(t *testing.T) {
	v := Classify(&HTTPError{StatusCode: 429, Header: http.Header{"Retry-After": {"2"}}})
	if v.Kind != KindRateLimited || !v.HasServerWait || v.ServerWait != 2*time.Second {
		t.Fatalf("%+v", v)
	}
}

func TestNewHTTPErrorIsBounded(t *testing.T) {
	body := strings.Repeat("x", 3*MaxErrorBody)
	resp := &http.Response{StatusCode: 503, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(body))}
	e := NewHTTPError(resp)
	if len(e.Body) != MaxErrorBody {
		t.Fatalf("kept %d bytes, want %d", len(e.Body), MaxErrorBody)
	}
	if msg := e.Error(); len(msg) > 300 || !strings.HasPrefix(msg, "http 503 Service Unavailable: xxx") {
		t.Fatalf("message %d bytes: %.80q", len(msg), msg)
	}
}

func TestKindText(t *testing.T) {
	for k := KindTransient; k <= KindCanceled; k++ {
		b, err := k.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Kind
		if err := back.UnmarshalText(b); err != nil || back != k {
			t.Fatalf("%v: round trip gives %v, %v", k, back, err)
		}
	}
	if _, err := Kind(99).MarshalText(); err == nil {
		t.Fatal("marshalled an unknown kind")
	}
}
