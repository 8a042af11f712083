package relay

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/rebound-go/rebound/internal/scrub"
	"github.com/rebound-go/rebound/internal/sse"
)

// chunks gives its bytes in reads of random sizes, up to max.
type chunks struct {
	b   []byte
	max int
	rng *rand.Rand
}

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(c.b), 1+c.rng.IntN(c.max))
	copy(p, c.b[:n])
	c.b = c.b[n:]
	return n, nil
}

func (c *chunks) Close() error { return nil }

// testErrors makes a stream's errors plain ones.
var testErrors = Errors{
	Incomplete: func(r Reason, events, text int, err error) error {
		return fmt.Errorf("incomplete (reason %d) after %d events: %v", r, events, err)
	},
	Reason: func(error) (Reason, error, bool) { return 0, nil, false },
	Event:  func(name string, data []byte, _ scrub.Secrets) error { return fmt.Errorf("event %s: %s", name, data) },
	Redact: func(err error, _ scrub.Secrets) error { return err },
}

type ends []End

func (e *ends) Ended(x End) { *e = append(*e, x) }

// A stream handed over goes on in the look ahead's buffer; whatever the
// sizes of the reads and of the events (some longer than a read's room,
// so that the buffer is compacted and grown under them), the caller reads
// the stream as it came, whole, and it ends once.
func TestStreamReadsOnInTheLookAheadsBufferAsTheStreamCame(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for round := range 50 {
		var want strings.Builder
		for i := range 1 + rng.IntN(40) {
			text := strings.Repeat("x", rng.IntN(10_000))
			fmt.Fprintf(&want, `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"%d%s"},"finish_reason":null}]}`+"\n\n", i, text)
		}
		want.WriteString("data: [DONE]\n\n")
		body := &chunks{b: []byte(want.String()), max: 1 + rng.IntN(9000), rng: rng}
		head, err := sse.Peek(body, 1<<20, 1<<10)
		if err != nil {
			t.Fatalf("round %d: look ahead: %v", round, err)
		}
		var told ends
		var s Stream
		s.Start(Handover{Head: head, Body: body, Cancel: func() {}, Report: &told, Errors: &testErrors})
		got, err := io.ReadAll(&s)
		if err != nil {
			t.Fatalf("round %d: read: %v", round, err)
		}
		if !bytes.Equal(got, []byte(want.String())) {
			t.Fatalf("round %d: read %d bytes, not the %d the stream sent, or not as it sent them", round, len(got), want.Len())
		}
		s.Close()
		if len(told) != 1 || told[0] != Whole {
			t.Fatalf("round %d: told %+v, want one end, whole", round, told)
		}
	}
}

// An error event after content, marked to be handed on, reaches the
// caller as the provider framed it (CRLF lines, an id, a comment, data
// over two lines), whatever the sizes of the reads, but for a credential
// in it; then the stream ends with the error that carries it, and
// nothing after it is given. Unmarked, the event is held back.
func TestStreamHandsOnAnErrorEventAfterContentWhenAsked(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	const (
		content = `data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}` + "\n\n"
		event   = "id: 7\r\n: the provider's own comment\r\ndata: {\"error\":{\"message\":\"The server had an error\",\r\ndata: \"key\":\"sk-proj-abcdefghijklmnopqrstuvwxyz0123456789\"}}\r\n\r\n"
		after   = `data: {"choices":[{"index":0,"delta":{"content":"lo"}}]}` + "\n\ndata: [DONE]\n\n"
	)
	want := strings.Replace(event, "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789", scrub.Redacted, 1)
	for round := range 20 {
		for _, handOn := range []bool{true, false} {
			body := &chunks{b: []byte(content + event + after), max: 1 + rng.IntN(40), rng: rng}
			head, err := sse.Peek(body, 1<<20, 1<<10)
			if err != nil {
				t.Fatalf("round %d: look ahead: %v", round, err)
			}
			var told ends
			var s Stream
			s.Start(Handover{Head: head, Body: body, Cancel: func() {}, Report: &told, Errors: &testErrors, HandOnError: handOn})
			got, err := io.ReadAll(&s)
			s.Close()
			wantRead := content
			if handOn {
				wantRead += want
			}
			if string(got) != wantRead || err == nil || !strings.Contains(err.Error(), "The server had an error") {
				t.Fatalf("round %d, handed on %v: read %q, %v; want %q and the event's error", round, handOn, got, err, wantRead)
			}
			if len(told) != 1 || told[0] != Broken {
				t.Fatalf("round %d: told %+v, want one end, broken", round, told)
			}
		}
	}
}
