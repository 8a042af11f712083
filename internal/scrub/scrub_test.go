package scrub

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func request(t *testing.T, rawURL string, headers ...string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	return req
}

func TestKnownSecretsInEveryForm(t *testing.T) {
	key := "AIzaSy+Key/With=Odd+Chars0123456789"
	req := request(t, "http://p.test/v1?alt=sse&key="+url.QueryEscape(key), "Authorization", "Bearer tok-ABCDEFGH12345678",
		"X-Api-Key", "anthropic-key-0000111122223333")
	s := Of(req)
	for _, echoed := range []string{
		key, url.QueryEscape(key), url.PathEscape(key), strings.ToLower(url.QueryEscape(key)),
		"Bearer tok-ABCDEFGH12345678", "tok-ABCDEFGH12345678", "anthropic-key-0000111122223333",
	} {
		text := `{"error":"bad credential ` + echoed + ` given"}`
		got := s.String(text)
		if strings.Contains(got, echoed) || !strings.Contains(got, Redacted) {
			if echoed == strings.ToLower(url.QueryEscape(key)) {
				// Lower-case escapes are another spelling nobody sent:
				// the key shape still catches the key's start.
				if strings.Contains(got, "AIzaSy") {
					t.Errorf("%q: key start survived: %s", echoed, got)
				}
				continue
			}
			t.Errorf("%q survived: %s", echoed, got)
		}
	}
}

func TestShapesWithoutARequest(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"invalid key sk-proj-abcdefghijklmnop1234 given", "invalid key [redacted] given"},
		{"sk-ant-api03-abcdefghijklmnopqrstuvwxyz", "[redacted]"},
		{"key=AIzaSyA1234567890abcdefghijklmnopqrstu&x=1", "key=[redacted]&x=1"},
		{"Authorization: Bearer abcdefgh12345678", "Authorization: Bearer [redacted]"},
		{"gsk_0123456789abcdefghijABCDEFGHIJ", "[redacted]"},
		{"use sk-learn for this", "use sk-learn for this"},                               // too short for a key
		{"task-0123456789abcdef01234567 failed", "task-0123456789abcdef01234567 failed"}, // "sk-" inside a word
		{"Bearer [redacted] twice", "Bearer [redacted] twice"},                           // already done
		{"no secrets here at all", "no secrets here at all"},
	} {
		if got := Text(c.in); got != c.want {
			t.Errorf("Text(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// A credential cut in two by a length limit loses its first characters
// too.
func TestCutDropsAPartialCredential(t *testing.T) {
	secret := "azure-0123456789abcdefXYZ"
	s := Of(request(t, "http://p.test/", "Api-Key", secret))
	text := strings.Repeat("x", 100) + " " + secret + " tail"
	for n := 90; n < len(text); n++ {
		got, _ := s.Cut(text, n)
		for k := minPartial; k <= len(secret); k++ {
			if strings.Contains(got, secret[:k]) {
				t.Fatalf("cut at %d keeps %q: %q", n, secret[:k], got)
			}
		}
		b := s.CutBytes([]byte(text[:min(n, len(text))]), n)
		for k := minPartial; k <= len(secret); k++ {
			if strings.Contains(string(b), secret[:k]) {
				t.Fatalf("byte cut at %d keeps %q: %q", n, secret[:k], b)
			}
		}
	}
	// Unknown keys too, by their shape.
	shaped := "error sk-proj-abcdefghij"
	if got, _ := (Secrets{}).Cut(shaped+"klmnopqrstuvwxyz", len(shaped)); strings.Contains(got, "sk-proj") {
		t.Errorf("shaped key survived a cut: %q", got)
	}
	if got := (Secrets{}).CutBytes([]byte("token Bearer abc"), 100); strings.Contains(string(got), "abc") {
		t.Errorf("a bearer token's start survived: %q", got)
	}
}

func TestHeaderIsRedactedInACopy(t *testing.T) {
	secret := "sk-SECRETSECRETSECRET"
	s := Of(request(t, "http://p.test/", "Authorization", "Bearer "+secret))
	h := http.Header{"Authorization": {"Bearer " + secret}, "X-Echo": {"got " + secret}, "Retry-After": {"2"}}
	got := s.Header(h)
	if got.Get("Authorization") != Redacted || strings.Contains(got.Get("X-Echo"), secret) || got.Get("Retry-After") != "2" {
		t.Errorf("header %v", got)
	}
	if h.Get("Authorization") != "Bearer "+secret {
		t.Error("the original header was changed")
	}
	clean := http.Header{"Retry-After": {"2"}}
	if got := s.Header(clean); got.Get("Retry-After") != "2" {
		t.Errorf("clean header %v", got)
	}
}

func TestNothingToScrubAllocatesNothing(t *testing.T) {
	s := Of(request(t, "http://p.test/", "Authorization", "Bearer sk-SECRETSECRETSECRET"))
	body := []byte(`{"error":{"message":"overloaded","type":"overloaded_error"}}`)
	if n := testing.AllocsPerRun(100, func() { _ = s.Bytes(body) }); n != 0 {
		t.Errorf("%v allocations", n)
	}
}

func FuzzScrub(f *testing.F) {
	f.Add("Bearer sk-abcdefghijklmnopqrstuvwxyz", 10)
	f.Add("key=AIzaSyA1234567890abcdefghijklmnopqrstu", 20)
	f.Fuzz(func(t *testing.T, text string, n int) {
		secret := "sk-SECRETSECRETSECRET"
		s := Of(request(t, "http://p.test/", "Authorization", "Bearer "+secret))
		got := s.String(text + secret + text)
		if strings.Contains(got, secret) {
			t.Fatalf("secret survived: %q", got)
		}
		if n < 0 || n > 1<<16 {
			return
		}
		cut, _ := s.Cut(text+secret, n)
		if strings.Contains(cut, secret[:minPartial+4]) {
			t.Fatalf("partial survived a cut at %d: %q", n, cut)
		}
	})
}

// Forms of a key with "+", "/" and "=" that servers really write: escapes
// in lower case, and JSON with an escaped solidus (PHP's json_encode).
func TestEscapedForms(t *testing.T) {
	key := "k3y+With/Slash=Padding0123456789"
	basic := "Z2F0ZXdheS11c2VyOnMzY3IzdC9wYXNzK3dvcmQ/"
	s := Of(request(t, "http://p.test/v1?key="+url.QueryEscape(key), "Authorization", "Basic "+basic))
	for _, echoed := range []string{
		`k3y+With\/Slash=Padding0123456789`,
		"k3y%2bWith%2fSlash%3dPadding0123456789",
		`Z2F0ZXdheS11c2VyOnMzY3IzdC9wYXNzK3dvcmQ\/`,
	} {
		if got := s.String(`{"error":{"message":"bad ` + echoed + `"}}`); strings.Contains(got, "Padding01") || strings.Contains(got, "ZXdheS11") {
			t.Errorf("%q survived: %s", echoed, got)
		}
	}
}

// TestKnown: Known replaces the credentials a request carried, and leaves
// a word shaped like a key, which in a response's header may be anything.
func TestKnown(t *testing.T) {
	s := Of(&http.Request{Header: http.Header{"Authorization": {"Bearer operator-key-998877"}}})
	if s.Empty() || !(Secrets{}).Empty() {
		t.Fatal("Empty is wrong")
	}
	in := "Bearer operator-key-998877, id sk-proj-aaaaaaaaaaaaaaaaaaaa"
	if got, want := s.Known(in), Redacted+", id sk-proj-aaaaaaaaaaaaaaaaaaaa"; got != want {
		t.Errorf("Known(%q) = %q, want %q", in, got, want)
	}
}
