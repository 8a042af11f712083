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

func TestClassifyResponseStatus(t *testing.T) {
	want := map[int]Kind{
		400: KindPermanent, 401: KindPermanent, 403: KindPermanent, 404: KindPermanent, 422: KindPermanent,
		413: KindContextOverflow,
		408: KindTransient, 409: KindTransient, 424: KindTransient, 425: KindTransient,
		429: KindRateLimited,
		500: KindTransient, 502: KindTransient, 503: KindTransient, 504: KindTransient, 599: KindTransient,
		529: KindOverloaded, 498: KindOverloaded,
	}
	for status, kind := range want {
		if v := ClassifyResponse(status, http.Header{}, nil); v.Kind != kind || v.HasServerWait {
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
		if v := ClassifyResponse(tc.status, h, nil); v.Kind != tc.want {
			t.Errorf("%d with x-should-retry %q: %v, want %v", tc.status, tc.value, v.Kind, tc.want)
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
