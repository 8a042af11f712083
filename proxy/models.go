package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/rebound-go/rebound/internal/jsonscan"
	"github.com/rebound-go/rebound/internal/provider"
)

// The models a request runs, as the proxy reads them to route it and to
// hold it to a tenant's model list. Every reading of the body is one the
// upstream cannot read another way: the JSON is strict (RFC 8259), its
// keys are read by jsonscan's rules (a "model" given twice, or spelled
// "Model" or "model\u0000", is refused), and a model's path outweighs its
// body, as the providers serve the path's.

var (
	errModelTwice     = errors.New(`the body names another model than the path`)
	errModelNotString = errors.New(`the request body's "model" is not a string`)
	errModelSurrogate = errors.New(`the request body's "model" holds a lone surrogate escape, which parsers read differently`)
	errLongModel      = fmt.Errorf("the model name is over %d bytes", MaxModel)
	errBOM            = errors.New("the request body starts with a byte-order mark: JSON is sent as UTF-8 without one (RFC 8259)")
	errNotUTF8        = errors.New("the request body is not UTF-8 (UTF-16 or UTF-32, by its zero bytes): JSON is sent as UTF-8 (RFC 8259)")
	errInvalidUTF8    = errors.New("the request body is not valid UTF-8")
)

// Names the proxy decides by: a body's top-level model, and the models of
// a batch's requests (Anthropic's requests[].params.model).
var (
	topNames     = jsonscan.NewNames("model", "requests")
	requestNames = jsonscan.NewNames("params")
	paramsNames  = jsonscan.NewNames("model")
)

const (
	topModel = iota
	topRequests
)

// models is what a request says of the models it runs.
type models struct {
	// model is the one it is routed by: its path's, else its body's
	// top-level "model".
	model string
	// batch are the models of a batch's requests, beside model.
	batch []string
	// unseen says it may run a model the proxy cannot see: a model call
	// (a POST the providers answer by running one) naming none, or a
	// batch with a request that names none.
	unseen bool
	// json says the body was read as JSON, and is strict JSON.
	json bool
}

// readModels reads the models of a request by method to path with
// header and body h, and notes in h where the body's model lies, for a
// fallback to rename it.
//
// A body sent as JSON, or with no Content-Type, that starts with a
// byte-order mark or is not UTF-8 is an error: Python's json, which
// many upstreams read with, reads such a body where the proxy would read
// none. A body sent as JSON must be strict JSON with at most one
// top-level "model" (escapes resolved; no second spelling), a string
// without a lone surrogate, and on a Gemini call naming the path's model
// if any. A body of another kind (a form, a compressed body) has no model
// here: the proxy does not read it as the upstream would, so a tenant
// with a model list is sent it only with allow_unseen_models.
func readModels(method, path string, header http.Header, h *heldBody) (models, error) {
	m := models{model: provider.PathModel(path)}
	media, _, _ := mime.ParseMediaType(header.Get("Content-Type"))
	switch kind := bodyKind(header, media, h.b); kind {
	case bodyJSON, bodyUntyped:
		if err := encodingFault(h.b, kind); err != nil {
			return m, err
		}
		if kind == bodyJSON {
			if err := m.readJSON(path, h); err != nil {
				return m, err
			}
			m.json = true
		}
	}
	if len(m.model) > MaxModel {
		return m, errLongModel
	}
	if method == http.MethodPost && m.model == "" && len(m.batch) == 0 && !provider.RunsNoModel(path) {
		m.unseen = true
	}
	return m, nil
}

// The kinds of body readModels tells apart.
const (
	bodyOther   = iota // compressed, or of a type that is not JSON or a form
	bodyJSON           // sent as JSON, or untyped and beginning as JSON does
	bodyUntyped        // no Content-Type, and not beginning as JSON does
)

// bodyKind says how a body is meant: as JSON by its Content-Type (or
// its first byte, an object's or an array's), untyped, or other.
// A body with a Content-Encoding (gzip) is not read: it is not JSON as it
// comes.
func bodyKind(header http.Header, media string, body []byte) int {
	if len(body) == 0 {
		return bodyOther
	}
	if enc := header.Get("Content-Encoding"); enc != "" && !strings.EqualFold(enc, "identity") {
		return bodyOther
	}
	if i := bytes.IndexFunc(body, func(r rune) bool { return r != ' ' && r != '\t' && r != '\r' && r != '\n' }); i >= 0 && (body[i] == '{' || body[i] == '[') {
		return bodyJSON
	}
	switch {
	case media == "application/json" || strings.HasSuffix(media, "+json"):
		return bodyJSON
	case header.Get("Content-Type") == "":
		return bodyUntyped
	}
	return bodyOther
}

// encodingFault returns why a body meant as JSON, or untyped, is not
// UTF-8 as JSON must be; nil if it is. An untyped body must be valid
// UTF-8 throughout; a JSON one is checked as it is scanned.
func encodingFault(b []byte, kind int) error {
	switch {
	case bytes.HasPrefix(b, []byte{0xef, 0xbb, 0xbf}), bytes.HasPrefix(b, []byte{0xfe, 0xff}), bytes.HasPrefix(b, []byte{0xff, 0xfe}):
		return errBOM
	case bytes.IndexByte(b[:min(len(b), 4)], 0) >= 0:
		return errNotUTF8
	case kind == bodyUntyped && !utf8.Valid(b):
		return errInvalidUTF8
	}
	return nil
}

// readJSON reads a JSON body's models into m.
func (m *models) readJSON(path string, h *heldBody) error {
	var s jsonscan.Scanner
	s.Strict = true
	s.Reset(h.b)
	var model jsonscan.Span
	batch := strings.HasSuffix(path, "/messages/batches")
	if s.Next() == jsonscan.Object {
		for mem := s.Object(topNames); mem.Next(); {
			switch {
			case mem.Name() == topModel:
				model = s.Skip()
			case mem.Name() == topRequests && batch && s.Next() == jsonscan.Array:
				if err := m.readBatch(&s); err != nil {
					return err
				}
			default:
				s.Skip()
			}
		}
	} else {
		s.Skip()
	}
	if !s.End() {
		return bodyError(s.Err())
	}
	if !model.Set() {
		return nil
	}
	if h.b[model.Lo] != '"' {
		return errModelNotString
	}
	body, err := modelText(&s, model)
	if err != nil {
		return err
	}
	switch {
	case m.model == "":
		m.model = body
		h.start, h.end = model.Lo, model.Hi
	case !geminiCall(path):
		// The path's model is served (Azure's deployment): the body's is
		// read for no more than being a string, and left as it is.
	case body == m.model || body == "models/"+m.model:
		h.start, h.end, h.prefix = model.Lo, model.Hi, strings.TrimSuffix(body, m.model)
	default:
		// Gemini's request has a model field the path fills: which one
		// an upstream serves is its own affair.
		return errModelTwice
	}
	return nil
}

// readBatch reads the models of a batch's requests, the array ahead:
// each request's params.model; a request that names none, or is not an
// object, may run any model.
func (m *models) readBatch(s *jsonscan.Scanner) error {
	for e := s.Array(); e.Next(); {
		found := false
		if s.Next() != jsonscan.Object {
			s.Skip()
			m.unseen = true
			continue
		}
		for req := s.Object(requestNames); req.Next(); {
			if req.Name() != 0 || s.Next() != jsonscan.Object {
				s.Skip()
				continue
			}
			for p := s.Object(paramsNames); p.Next(); {
				if p.Name() != 0 {
					s.Skip()
					continue
				}
				v, ok := s.Str()
				if !ok {
					continue
				}
				model, err := modelText(s, v)
				if err != nil {
					return err
				}
				m.batch, found = append(m.batch, model), true
			}
		}
		m.unseen = m.unseen || !found
	}
	return s.Err()
}

// modelText returns the text of a model's string at v, checked.
func modelText(s *jsonscan.Scanner, v jsonscan.Span) (string, error) {
	raw := s.Bytes(v)
	if len(raw) > MaxModel*len(`\uffff`)+2 {
		return "", errLongModel
	}
	text, whole := jsonscan.AppendText(make([]byte, 0, len(raw)), raw)
	switch {
	case !whole:
		return "", errModelSurrogate
	case len(text) > MaxModel:
		return "", errLongModel
	}
	return string(text), nil
}

// bodyError is the one-line reason a JSON body is refused.
func bodyError(err error) error {
	var ke *jsonscan.KeyError
	switch {
	case errors.As(err, &ke) && errors.Is(err, jsonscan.ErrDuplicateKey):
		return fmt.Errorf("the request body gives %q more than once (parsers differ on which counts), at byte %d", ke.Name, ke.Offset)
	case errors.As(err, &ke):
		return fmt.Errorf("the request body has a key that some parsers read as %q and others do not (another case, or cut by an escaped NUL), at byte %d", ke.Name, ke.Offset)
	}
	return fmt.Errorf("the request body is not strict JSON (RFC 8259): %w", err)
}
