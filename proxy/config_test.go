package proxy_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/rebound-go/rebound/proxy"
)

// TestConfigWithSeveralMistakesNamesEach: a file is put right in one go,
// so each mistake ParseConfig can find is reported, one a line, each
// naming its key, in the file's order (upstreams by name); errors.As
// finds the first as a ConfigError.
func TestConfigWithSeveralMistakesNamesEach(t *testing.T) {
	_, err := proxy.ParseConfig([]byte(`{
		"upstreams": {
			"b": {"url": "https://b.test", "dialect": "anthropic", "key_env": "UNSET_B"},
			"a": {"url": "", "requests_per_minute": -1}
		},
		"routes": [
			{"upstream": "nowhere", "path_prefix": "v1", "fallbacks": [{"upstream": "b"}]},
			{"upstream": "a", "max_body_bytes": -1, "fallbacks": [{"upstream": "b"}],
			 "cache": {"serve": "sometimes"}}
		]
	}`), func(string) string { return "" })
	want := []string{
		`config: upstreams.a.url: empty (want e.g. https://api.openai.com)`,
		`config: upstreams.a: negative limit`,
		`config: upstreams.b.key_env: environment variable UNSET_B is not set`,
		`config: routes[0].upstream: unknown upstream "nowhere"`,
		`config: routes[0].path_prefix: "v1" does not start with /`,
		`config: routes[1].max_body_bytes: negative`,
		`config: routes[1].cache.serve: "sometimes" is neither "on_failure" nor "always"`,
		`config: routes[1].fallbacks[0].upstream: "b" speaks anthropic, the route's upstream openai`,
	}
	if err == nil {
		t.Fatal("accepted")
	}
	if got := strings.Split(err.Error(), "\n"); !slices.Equal(got, want) {
		t.Errorf("errors:\n%s\nwant:\n%s", err, strings.Join(want, "\n"))
	}
	var ce *proxy.ConfigError
	if !errors.As(err, &ce) || ce.Where != "upstreams.a.url" {
		t.Errorf("errors.As: %v, want the first, at upstreams.a.url", ce)
	}
}

// TestConfigJSONErrorSaysLineAndColumn: a JSON mistake is placed where an
// editor finds it.
func TestConfigJSONErrorSaysLineAndColumn(t *testing.T) {
	_, err := proxy.ParseConfig([]byte("{\n  \"upstreams\": {\n    \"a\": {\"url\": \"http://127.0.0.1:1\",}\n  }\n}\n"), nil)
	want := `config: line 3, column 39: invalid character '}' looking for beginning of object key string`
	if err == nil || err.Error() != want {
		t.Errorf("%v, want %s", err, want)
	}
}
