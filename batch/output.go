package batch

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"unicode/utf8"
)

// Line is one line of an output or errors file, in the OpenAI Batch API's
// format.
type Line struct {
	ID       string         `json:"id"`
	CustomID string         `json:"custom_id"`
	Response *LineResponse  `json:"response"`
	Error    *LineErrorInfo `json:"error"`
}

// LineResponse is the final response to a request.
type LineResponse struct {
	StatusCode int             `json:"status_code"`
	RequestID  string          `json:"request_id"`
	Body       json.RawMessage `json:"body"`
}

// LineErrorInfo says why a request failed.
type LineErrorInfo struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Written counts the lines WriteOutput wrote.
type Written struct {
	Succeeded, Failed int
}

// WriteOutput writes j's outcomes in input order: every success to out and
// every failure to errs, one line for each custom_id answered so far. A
// response body that is not JSON is written as a JSON string.
func WriteOutput(ctx context.Context, j Journal, out, errs io.Writer) (Written, error) {
	var w Written
	bo, be := bufio.NewWriterSize(out, 64<<10), bufio.NewWriterSize(errs, 64<<10)
	eo, ee := json.NewEncoder(bo), json.NewEncoder(be)
	eo.SetEscapeHTML(false)
	ee.SetEscapeHTML(false)
	err := j.Outcomes(ctx, func(o Outcome) error {
		sum := sha256.Sum256([]byte(o.ID))
		line := Line{ID: "batch_req_" + hex.EncodeToString(sum[:12]), CustomID: o.ID}
		if o.StatusCode != 0 {
			line.Response = &LineResponse{StatusCode: o.StatusCode, RequestID: o.RequestID, Body: bodyJSON(o.Body)}
		}
		if o.State == Succeeded {
			w.Succeeded++
			return eo.Encode(line)
		}
		line.Error = &LineErrorInfo{Code: o.ErrorCode, Message: o.ErrorMessage}
		w.Failed++
		return ee.Encode(line)
	})
	if err != nil {
		return w, fmt.Errorf("batch: writing the output: %w", err)
	}
	if err := bo.Flush(); err != nil {
		return w, fmt.Errorf("batch: writing the output: %w", err)
	}
	if err := be.Flush(); err != nil {
		return w, fmt.Errorf("batch: writing the errors: %w", err)
	}
	return w, nil
}

// bodyJSON returns body as it is if it is JSON, else as a JSON string;
// nothing is null.
func bodyJSON(body []byte) json.RawMessage {
	switch {
	case len(body) == 0:
		return json.RawMessage("null")
	case !utf8.Valid(body): // encoding/json lets it through; a reader of the file would not
		body = bytes.ToValidUTF8(body, []byte("\uFFFD"))
	}
	if json.Valid(body) {
		return body
	}
	s, _ := json.Marshal(string(body)) // invalid UTF-8 becomes U+FFFD
	return s
}
