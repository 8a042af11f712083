package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/relay"
	"github.com/rebound-go/rebound/internal/sse"
)

// The relay is the proxy's one step between a client and its route: it
// sends the request (the forwarder makes each upstream's copy of it) and
// writes the answer back. It does what a reverse proxy must and nothing
// rebound has no use for, the request copied once per upstream:
//
//   - Hop-by-hop headers, those RFC 9110 names and those a Connection
//     header lists, go neither way; a client's "TE: trailers" goes on, so
//     that an upstream knows trailers reach the client.
//   - Forwarded and X-Forwarded-* do not go, and none are added: the
//     upstream learns nothing of the client's network from the proxy, nor
//     believes what a client wrote there. An allowed page's Origin stays
//     with the proxy, which has judged it (frontdoor): the upstream's own
//     browser rules (Anthropic's refuses a page without a header of its
//     own) are for pages that call it directly. Host stays too: each
//     upstream gets its own. A request without a User-Agent goes without
//     one, not with Go's.
//   - A query a server could read otherwise than the proxy does (a ";",
//     a bad escape, more parameters than net/url takes) goes as net/url
//     parsed it.
//   - An answer is flushed at each write when it is an event stream or of
//     unknown length (Gemini's JSON array stream), its header at once,
//     or with its first content when the Transport looked ahead to it
//     (relay.LooksInto); one of known length goes out in one piece, with
//     no timer, as soon as its last byte is written: before the call is
//     settled and its access line written.
//   - Trailers the upstream announced are announced to the client and
//     sent after the body; those it did not announce go as
//     http.TrailerPrefix ones. The keys the proxy knows are scrubbed
//     from them, as from the header.
//   - An answer that breaks mid-body breaks the client's too
//     (http.ErrAbortHandler), under a server; a failure before any answer
//     is gatewayError's. A stream the provider ends with its error event
//     after content ends with that event, as the provider sent it but for
//     the credentials in it, and then cleanly: the client's SDK raises
//     the provider's own error.
//   - Informational answers (1xx) are not passed on: the proxy has read
//     the whole body before it sends anything, so the client's 100
//     Continue came from this server already, and an upstream's 103 Early
//     Hints (preloads for a browser's page) mean nothing to an API client;
//     passing them would take a client trace, and its own copy of the
//     request, on every attempt.

// relay sends out, the client's request under the call's context, along
// c's route, and writes the answer to w.
func (p *Proxy) relay(w http.ResponseWriter, out *http.Request, c *call) {
	res, err := p.answer(out, c)
	// A stream goes on without the body: its memory goes back now, not
	// when the answer ends.
	c.body.release()
	if err != nil {
		p.gatewayError(w, out, err)
		return
	}
	h := w.Header()
	for k, vv := range res.Header {
		if len(vv) == 0 {
			// Present but empty, it would keep the server from
			// writing its own (Date, a sniffed Content-Type).
			continue
		}
		if have, ok := h[k]; ok {
			h[k] = append(have, vv...) // the door's Vary, say
		} else {
			h[k] = vv // the answer's header is ours alone from here
		}
	}
	announced := len(res.Trailer)
	if announced > 0 {
		names := make([]string, 0, announced)
		for k := range res.Trailer {
			names = append(names, k)
		}
		h.Add("Trailer", strings.Join(names, ", "))
	}
	w.WriteHeader(res.StatusCode)
	stream, _ := sse.StreamType(res.Header)
	rc := http.NewResponseController(w)
	flush := stream || res.ContentLength == -1
	if flush && !relay.LooksInto(res) {
		// The client knows at once that its answer has come. A stream
		// the Transport looked into has its first content in hand: its
		// header goes with it, in one write.
		rc.Flush()
	}
	length := res.ContentLength
	if announced > 0 {
		length = -1 // chunked, for the trailers: the answer ends with them
	}
	if err := p.copyAnswer(w, rc, res.Body, flush, length); err != nil {
		res.Body.Close()
		if endedOnErrorEvent(err) {
			// The provider's error event has gone on (the mark of
			// callCtx): the stream ends after it, cleanly, so that the
			// client reads it whole. A client whose connection broke
			// would lose what it had not parsed yet (a fetch stream that
			// errors drops the chunks it holds), and the event says the
			// answer is not whole.
			c.aborted = true
			return
		}
		if out.Context().Value(http.ServerContextKey) == nil {
			// Not under an http.Server, nothing would recover the
			// panic: the answer is left cut short.
			return
		}
		panic(http.ErrAbortHandler)
	}
	res.Body.Close() // read to its end: its trailers have come
	if len(res.Trailer) == 0 {
		return
	}
	// Chunked, whatever the body's length: a length would leave no room
	// for trailers.
	rc.Flush()
	prefix := ""
	if len(res.Trailer) != announced {
		prefix = http.TrailerPrefix // some were not announced: none go as announced
	}
	for k, vv := range res.Trailer {
		for _, v := range vv {
			h.Add(prefix+k, p.secrets.Known(v)) // scrubbed as the header was (scrubResponse)
		}
	}
}

var errUnaskedSwitch = errors.New("the upstream switched protocols unasked")

// endedOnErrorEvent reports whether err, from reading a stream the
// Transport handed over, says that the stream ended on the provider's
// error event after content, which it handed on before err.
func endedOnErrorEvent(err error) bool {
	var ie *rebound.IncompleteStreamError
	return errors.As(err, &ie) && ie.Reason == rebound.IncompleteErrorEvent
}

// copyAnswer copies body to w through a pooled buffer, flushing after
// each write if flush. An answer of known length (length ≥ 0) is flushed
// as soon as its last byte is written: the client has all of it before
// the read that finds the body's end, which settles the call (the
// attempt's end, the usage, the upstream's row), and before the handler
// returns and writes the access line; the server would send it only then.
// A failed read is logged, unless the request was cancelled (the client
// went); either failure is returned.
func (p *Proxy) copyAnswer(w io.Writer, rc *http.ResponseController, body io.Reader, flush bool, length int64) error {
	buf := copyBuffers{}.Get()
	defer copyBuffers{}.Put(buf)
	if !flush && length == 0 {
		rc.Flush()
	}
	var written int64
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			written += int64(n)
			if flush || written == length {
				rc.Flush()
			}
		}
		switch {
		case err == io.EOF:
			return nil
		case err == nil:
		case errors.Is(err, context.Canceled):
			return err
		default:
			p.log.Warn("proxy", "error", p.secrets.String("reading the upstream's answer: "+err.Error()))
			return err
		}
	}
}

// hopByHop are the headers that concern one connection, not the message:
// RFC 9110's and those of RFC 2616 that clients (Proxy-Connection: curl)
// and servers (Keep-Alive) still send.
var hopByHop = [...]string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// isHopByHop reports whether the header named k (canonical) is one of
// hopByHop or is listed in connection, the values of a Connection header.
func isHopByHop(connection []string, k string) bool {
	for _, name := range hopByHop {
		if k == name {
			return true
		}
	}
	return hasToken(connection, k)
}

// hasToken reports whether a list header's values (comma-separated)
// hold token, in any ASCII case.
func hasToken(values []string, token string) bool {
	for _, v := range values {
		for t := range strings.SplitSeq(v, ",") {
			if asciiEqualFold(strings.Trim(t, " \t"), token) {
				return true
			}
		}
	}
	return false
}

// asciiEqualFold is strings.EqualFold for header tokens, which are ASCII:
// no other letter folds to one of theirs.
func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// dropHopByHop removes the hop-by-hop headers from h.
func dropHopByHop(h http.Header) {
	connection := h["Connection"]
	for k := range h {
		if isHopByHop(connection, k) {
			delete(h, k)
		}
	}
}

// notForwarded are the request headers, besides the hop-by-hop ones, that
// stay with the proxy.
var notForwarded = [...]string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Origin"}

// upstreamHeader returns a copy of in, a client's request header, as it
// goes to an upstream: without the hop-by-hop headers and those of
// notForwarded, with "Te: trailers" if the client sent that, with an
// empty User-Agent if it sent none. The values share one allocation.
func upstreamHeader(in http.Header) http.Header {
	connection := in["Connection"]
	keep := func(k string) bool {
		for _, name := range notForwarded {
			if k == name {
				return false
			}
		}
		return !isHopByHop(connection, k)
	}
	values := 2 // room for Te and User-Agent
	for k, vv := range in {
		if keep(k) {
			values += len(vv)
		}
	}
	all := make([]string, values)
	out := make(http.Header, len(in)+2)
	for k, vv := range in {
		if !keep(k) {
			continue
		}
		if vv == nil {
			out[k] = nil
			continue
		}
		n := copy(all, vv)
		out[k], all = all[:n:n], all[n:]
	}
	if hasToken(in["Te"], "trailers") {
		all[0] = "trailers"
		out["Te"], all = all[:1:1], all[1:]
	}
	if _, ok := out["User-Agent"]; !ok {
		// Go's transport sends its own when there is none.
		out["User-Agent"] = all[:1:1]
	}
	return out
}

// maxQueryParams is net/url's bound on the parameters of a query.
const maxQueryParams = 10000

// cleanQuery returns raw, or, if a server could read it otherwise than
// net/url does (a ";" it takes for a separator, a "%" that is no escape,
// more parameters than net/url takes), the query as net/url reads it.
func cleanQuery(raw string) string {
	dirty := strings.Count(raw, "&") >= maxQueryParams
	for i := 0; i < len(raw) && !dirty; i++ {
		switch raw[i] {
		case ';':
			dirty = true
		case '%':
			dirty = i+2 >= len(raw) || !isHex(raw[i+1]) || !isHex(raw[i+2])
			i += 2
		}
	}
	if !dirty {
		return raw
	}
	q, _ := url.ParseQuery(raw)
	return q.Encode()
}

func isHex(b byte) bool {
	return '0' <= b && b <= '9' || 'a' <= b && b <= 'f' || 'A' <= b && b <= 'F'
}
