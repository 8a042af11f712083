package reboundmcp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

func TestLineConnSkipsPastAnUnreadableLine(t *testing.T) {
	in := "this is not JSON\n\n{\"foo\":1}\n" + `{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n"
	c := NewLineConn(strings.NewReader(in), &bytes.Buffer{})
	for range 2 {
		var bad *lineError
		if _, err := c.Read(t.Context()); !errors.As(err, &bad) {
			t.Fatalf("Read = %v; want the bad line reported", err)
		}
	}
	msg, err := c.Read(t.Context())
	if req, ok := msg.(*jsonrpc.Request); err != nil || !ok || req.Method != "ping" {
		t.Fatalf("after the bad lines: %#v, %v; want the ping", msg, err)
	}
}

func TestLineConnReadsAValueThatSpansLinesAndALastLineWithoutNewline(t *testing.T) {
	in := "{\n  \"jsonrpc\": \"2.0\",\n  \"id\": 1,\n  \"result\": {}\n}\n" + `{"jsonrpc":"2.0","method":"notifications/initialized"}`
	c := NewLineConn(strings.NewReader(in), &bytes.Buffer{})
	if msg, err := c.Read(t.Context()); err != nil || msg.(*jsonrpc.Response).ID.Raw() != int64(1) {
		t.Fatalf("the pretty-printed answer: %#v, %v", msg, err)
	}
	if msg, err := c.Read(t.Context()); err != nil || msg.(*jsonrpc.Request).Method != "notifications/initialized" {
		t.Fatalf("the last line: %#v, %v", msg, err)
	}
	if _, err := c.Read(t.Context()); err == nil {
		t.Fatal("Read after the last line: no error")
	}
}

func TestLineConnAnswersABatchInOneLine(t *testing.T) {
	in := `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","id":2,"method":"ping"}]` + "\n"
	var out bytes.Buffer
	c := NewLineConn(strings.NewReader(in), &out)
	var ids []jsonrpc.ID
	for range 3 {
		msg, err := c.Read(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if req := msg.(*jsonrpc.Request); req.IsCall() {
			ids = append(ids, req.ID)
		}
	}
	for i := len(ids) - 1; i >= 0; i-- { // answered out of order
		if out.Len() != 0 {
			t.Fatalf("wrote %q before the batch was answered whole", out.String())
		}
		if err := c.Write(t.Context(), &jsonrpc.Response{ID: ids[i], Result: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	want := `[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","id":2,"result":{}}]` + "\n"
	if out.String() != want {
		t.Errorf("wrote %q, want %q", out.String(), want)
	}
}

// spread is a notification pretty-printed over about n lines, then a
// ping on a line of its own.
func spread(n int) string {
	var b strings.Builder
	b.WriteString("{\n  \"jsonrpc\": \"2.0\",\n  \"method\": \"notifications/message\",\n  \"params\": {\n    \"data\": [\n")
	for range n {
		b.WriteString("      1,\n")
	}
	b.WriteString("      1\n    ]\n  }\n}\n")
	b.WriteString(`{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n")
	return b.String()
}

// readSpread reads spread(n) and returns the bytes its reading allocated.
func readSpread(t *testing.T, n int) uint64 {
	t.Helper()
	c := NewLineConn(strings.NewReader(spread(n)), &bytes.Buffer{})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	note, err := c.Read(t.Context())
	if err != nil || note.(*jsonrpc.Request).Method != "notifications/message" {
		t.Fatalf("the notification over %d lines: %#v, %v", n, note, err)
	}
	ping, err := c.Read(t.Context())
	if err != nil || ping.(*jsonrpc.Request).Method != "ping" {
		t.Fatalf("the ping after it: %#v, %v", ping, err)
	}
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestLineConnReadsAMessageOverManyLinesInLinearWork: reading a message
// pretty-printed over many lines costs in proportion to its size, not to
// its size times its lines: four times the lines allocate about four
// times the bytes (counted, not timed; BenchmarkLineConnMessageOverManyLines
// times it), where reading each line again with all before it made it
// sixteen.
func TestLineConnReadsAMessageOverManyLinesInLinearWork(t *testing.T) {
	const n = 4000
	small, large := readSpread(t, n), readSpread(t, 4*n)
	t.Logf("%d lines: %d bytes allocated; %d lines: %d bytes", n, small, 4*n, large)
	if large > 8*small {
		t.Errorf("four times the lines allocated %.1f times the bytes; want about 4", float64(large)/float64(small))
	}
}

// TestLineConnRefusesAMessageOverTheLimitHoweverItIsSpread: a message
// longer than the SDK's limit is refused whether it comes on one line or
// many, and the next message is read.
func TestLineConnRefusesAMessageOverTheLimitHoweverItIsSpread(t *testing.T) {
	item := `"` + strings.Repeat("x", 1<<10) + `",`
	for _, sep := range []string{"", "\n"} {
		var b strings.Builder
		b.Grow(maxLine + 2*len(item))
		b.WriteString(`{"jsonrpc":"2.0","method":"notifications/message","params":{"data":[` + sep)
		for b.Len() <= maxLine {
			b.WriteString(item + sep)
		}
		b.WriteString(`"x"]}}` + "\n" + `{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n")
		c := NewLineConn(strings.NewReader(b.String()), &bytes.Buffer{})
		var bad *lineError
		if _, err := c.Read(t.Context()); !errors.As(err, &bad) || !strings.Contains(err.Error(), "longer than") {
			t.Fatalf("lines %q: Read = %v; want the message refused for its length", sep, err)
		}
		for {
			msg, err := c.Read(t.Context())
			if errors.As(err, &bad) {
				continue // what is left of the long message
			}
			if err != nil || msg.(*jsonrpc.Request).Method != "ping" {
				t.Fatalf("lines %q: after the long message: %#v, %v; want the ping", sep, msg, err)
			}
			break
		}
	}
}

// BenchmarkLineConnMessageOverManyLines reads a notification
// pretty-printed over 20 000 and 80 000 lines, and a ping after it.
func BenchmarkLineConnMessageOverManyLines(b *testing.B) {
	for _, n := range []int{20000, 80000} {
		in := spread(n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				c := NewLineConn(strings.NewReader(in), io.Discard)
				for range 2 {
					if _, err := c.Read(b.Context()); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
