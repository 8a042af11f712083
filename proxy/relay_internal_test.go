package proxy

import (
	"net/http"
	"reflect"
	"testing"
)

// TestUpstreamHeaderLeavesTheConnectionsOwn: a header a client's
// Connection names (in any case, with spaces) is not sent, nor counted as
// sent (an Idempotency-Key), and the client's header is left as it came.
func TestUpstreamHeaderLeavesTheConnectionsOwn(t *testing.T) {
	in := http.Header{
		"Connection":      {"keep-alive,  idempotency-KEY ", "x-a"},
		"Idempotency-Key": {"k1"},
		"X-A":             {"1"},
		"Te":              {"gzip"},
		"Origin":          {"https://app.example"},
		"X-Empty":         nil,
		"Accept":          {"a", "b"},
	}
	before := in.Clone()
	out := upstreamHeader(in)
	want := http.Header{"X-Empty": nil, "Accept": {"a", "b"}, "User-Agent": {""}}
	if !reflect.DeepEqual(out, want) {
		t.Errorf("sent %v; want %v", out, want)
	}
	if idempotencyKey(in) {
		t.Error("an Idempotency-Key the Connection names counted as sent")
	}
	if !reflect.DeepEqual(in, before) {
		t.Errorf("the client's header became %v", in)
	}
	out["Accept"][0] = "changed"
	if in["Accept"][0] != "a" {
		t.Error("the copy shares the client's values")
	}
}
