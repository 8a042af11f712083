package frontdoor

import (
	"context"
	"encoding/base64"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestAdminTokenMatchesBearerOrBasicPasswordOnly(t *testing.T) {
	const token = "adm-unit-token-9d0e"
	basic := func(pair string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(pair)) }
	tok := NewAdminToken(" " + token + " ")
	for _, c := range []struct {
		auth []string
		want bool
	}{
		{[]string{"Bearer " + token}, true},
		{[]string{"bearer  " + token}, true},
		{[]string{basic("anyone:" + token)}, true},
		{[]string{basic(":" + token)}, true},
		{[]string{basic(token)}, false}, // the token as the user name, no password
		{[]string{basic("anyone:" + token + "x")}, false},
		{[]string{"Basic !!notbase64"}, false},
		{[]string{"Token " + token}, false},
		{[]string{token}, false},
		{[]string{"Bearer wrong", "Bearer " + token}, true},
		{nil, false},
	} {
		r := httptest.NewRequest("GET", "http://localhost/ui", nil)
		r.Header["Authorization"] = c.auth
		if got := tok.Match(r); got != c.want {
			t.Errorf("%q: %v, want %v", c.auth, got, c.want)
		}
	}
	r := httptest.NewRequest("GET", "http://localhost/ui", nil)
	r.Header.Set("Authorization", "Bearer ")
	if NewAdminToken("  ").Set() || NewAdminToken("").Match(r) {
		t.Error("a blank admin token is set, or matches an empty bearer")
	}
}

func TestLocalIsALoopbackConnectionForALoopbackHostWithNoServerInFront(t *testing.T) {
	at := func(local net.Addr, host string, header ...string) *http.Request {
		r := httptest.NewRequest("GET", "http://"+host+"/ui", nil)
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		if local != nil {
			r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, local))
		}
		return r
	}
	loop4 := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	loop6 := &net.TCPAddr{IP: net.IPv6loopback, Port: 8080}
	mapped := &net.TCPAddr{IP: net.ParseIP("::ffff:127.0.0.1"), Port: 8080}
	lan := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 7), Port: 8080}
	for _, c := range []struct {
		name string
		r    *http.Request
		want bool
	}{
		{"127.0.0.1", at(loop4, "127.0.0.1:8080"), true},
		{"localhost over ::1", at(loop6, "localhost:8080"), true},
		{"an IPv4-mapped loopback", at(mapped, "[::1]:8080"), true},
		{"another address", at(lan, "127.0.0.1:8080"), false},
		{"no local address", at(nil, "127.0.0.1:8080"), false},
		{"a rebound name", at(loop4, "rebound.attacker.example:8080"), false},
		{"X-Forwarded-For", at(loop4, "127.0.0.1:8080", "X-Forwarded-For", "203.0.113.9"), false},
		{"Forwarded", at(loop4, "127.0.0.1:8080", "Forwarded", "for=203.0.113.9"), false},
		{"X-Real-Ip", at(loop4, "127.0.0.1:8080", "X-Real-Ip", "203.0.113.9"), false},
	} {
		if got := Local(c.r); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
