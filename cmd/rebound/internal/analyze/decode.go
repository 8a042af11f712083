package analyze

import (
	"errors"
	"strconv"

	"github.com/rebound-go/rebound/internal/jsonscan"
)

// Decoding. encoding/json's Unmarshal reads a line at some 80 MB/s; a
// jsonscan Scanner reads the same lines several times faster by looking
// only at the top-level keys a record has and validating the rest without
// decoding it. Keys are read by jsonscan's rules: a field given twice, or
// spelled another way ("Status", "ſtatus"), makes the line malformed, as
// a line readers would read differently is; otherwise a line decodes as
// encoding/json's Unmarshal into record decodes it: FuzzDecode checks
// that.

var (
	errSyntax = errors.New("invalid JSON")
	errType   = errors.New("wrong type")
)

// decoder decodes lines into records, interning short strings.
type decoder struct {
	// strs interns messages, kinds, error types and codes; keys, the
	// names of runs and tenants, so that a log of a million runs does not
	// crowd the error codes out.
	strs, keys map[string]string
	s          jsonscan.Scanner
	text       []byte // a string's text, unescaped
}

// maxInterned bounds the strings a decoder interns in each of its maps.
const maxInterned = 4096

// field is a key of record.
type field uint8

const (
	fNone field = iota
	fMsg
	fSucceeded
	fRetried
	fAttempts
	fStatus
	fErrorType
	fErrorCode
	fKind
	fInputTokens
	fOutputTokens
	fCost
	fRun
	fTenant
	fRunCap
	fTenantCap
	fReason
	fCostUSD
	fOutcome
	fCacheReadTokens
	fCacheWriteTokens
	fCache
	fSavedUSD
	fLast = fSavedUSD
)

var fieldNames = [...]string{
	fMsg: "msg", fSucceeded: "succeeded", fRetried: "retried", fAttempts: "attempts",
	fStatus: "status", fErrorType: "error_type", fErrorCode: "error_code", fKind: "kind",
	fInputTokens: "input_tokens", fOutputTokens: "output_tokens", fCost: "cost",
	fRun: "run", fTenant: "tenant", fRunCap: "run_cap_usd", fTenantCap: "tenant_cap_usd", fReason: "reason",
	fCostUSD: "cost_usd", fOutcome: "outcome",
	fCacheReadTokens: "cache_read_tokens", fCacheWriteTokens: "cache_write_tokens",
	fCache: "cache", fSavedUSD: "saved_usd",
}

// recordNames are the fields' names: the name of index i is field i+1's.
var recordNames = jsonscan.NewNames(fieldNames[1:]...)

// decode decodes one line into rec, which is zero.
func (d *decoder) decode(b []byte, rec *record) error {
	s := &d.s
	s.Reset(b)
	if s.Next() != jsonscan.Object {
		return errSyntax
	}
	for m := s.Object(recordNames); m.Next(); {
		f := field(m.Name() + 1) // Other, -1, is fNone
		v := s.Skip()
		if f == fNone || !v.Set() {
			continue
		}
		if err := d.set(rec, f, v); err != nil {
			return err
		}
	}
	if !s.End() {
		return errSyntax
	}
	return nil
}

// set stores the valid JSON value at v in rec's field f.
func (d *decoder) set(rec *record, f field, at jsonscan.Span) error {
	v := d.s.Bytes(at)
	if string(v) == "null" {
		return nil // as encoding/json: null leaves a field alone
	}
	switch f {
	case fMsg, fErrorType, fErrorCode, fKind, fRun, fTenant, fOutcome, fCache:
		return d.setString(rec, f, at)
	case fReason:
		// A reason is no key whose type can make a line malformed: any
		// other value than the refusal's is read past.
		rec.Refused = v[0] == '"' && string(d.s.Text(d.text[:0], at)) == refusedReason
	case fSucceeded, fRetried:
		return setBool(rec, f, v)
	case fAttempts, fStatus, fInputTokens, fOutputTokens, fCacheReadTokens, fCacheWriteTokens:
		return setInt(rec, f, v)
	case fCost, fRunCap, fTenantCap, fCostUSD, fSavedUSD:
		return setFloat(rec, f, v)
	}
	return nil
}

// setString stores the string at v in rec's string field f.
func (d *decoder) setString(rec *record, f field, v jsonscan.Span) error {
	if d.s.Bytes(v)[0] != '"' {
		return errType
	}
	b := d.s.Text(d.text[:0], v)
	if cap(b) > cap(d.text) && cap(b) <= 1<<16 {
		d.text = b[:0] // keep a buffer grown for an escaped string, unless huge
	}
	switch f {
	case fMsg:
		rec.Msg = intern(&d.strs, b)
	case fErrorType:
		rec.ErrorType = intern(&d.strs, b)
	case fErrorCode:
		rec.ErrorCode = intern(&d.strs, b)
	case fKind:
		rec.Kind = intern(&d.strs, b)
	case fRun:
		rec.Run = intern(&d.keys, b)
	case fTenant:
		rec.Tenant = intern(&d.keys, b)
	case fOutcome:
		rec.Outcome = intern(&d.strs, b)
	case fCache:
		rec.Cache = intern(&d.strs, b)
	}
	return nil
}

// setBool stores v, true or false, in rec's bool field f.
func setBool(rec *record, f field, v []byte) error {
	var o optBool
	switch string(v) {
	case "true":
		o = optBool{true, true}
	case "false":
		o = optBool{true, false}
	default:
		return errType
	}
	if f == fSucceeded {
		rec.Succeeded = o
	} else {
		rec.Retried = o
	}
	return nil
}

// setInt stores v, a whole number, in rec's integer field f.
func setInt(rec *record, f field, v []byte) error {
	n, ok := jsonscan.ParseInt(v)
	if !ok {
		return errType
	}
	o := optInt{true, n}
	switch f {
	case fAttempts:
		rec.Attempts = o
	case fStatus:
		rec.Status = o
	case fInputTokens:
		rec.InputTokens = o
	case fOutputTokens:
		rec.OutputTokens = o
	case fCacheReadTokens:
		rec.CacheReadTokens = o
	case fCacheWriteTokens:
		rec.CacheWriteTokens = o
	}
	return nil
}

// setFloat stores v, a number, in rec's number field f.
func setFloat(rec *record, f field, v []byte) error {
	if v[0] != '-' && (v[0] < '0' || v[0] > '9') {
		return errType
	}
	x, err := strconv.ParseFloat(string(v), 64)
	if err != nil {
		return errType
	}
	switch o := (optFloat{true, x}); f {
	case fCost:
		rec.Cost = o
	case fRunCap:
		rec.RunCap = o
	case fTenantCap:
		rec.TenantCap = o
	case fCostUSD:
		rec.CostUSD = o
	case fSavedUSD:
		rec.SavedUSD = o
	}
	return nil
}

// intern returns b as a string, interning short ones in *m.
func intern(m *map[string]string, b []byte) string {
	if s, ok := (*m)[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(s) <= MaxCodeBytes && len(*m) < maxInterned {
		if *m == nil {
			*m = make(map[string]string)
		}
		(*m)[s] = s
	}
	return s
}

// refusedReason is the reason a rebound.call gives when the context's
// Guard, a spend cap, refused an attempt (rebound.StopRefused).
const refusedReason = "refused by the guard"

// refusal is a "reason" that tells whether it is refusedReason.
type refusal bool

// optBool is a JSON boolean that remembers whether it was present.
type optBool struct{ set, v bool }

// optInt is a JSON integer that remembers whether it was present.
type optInt struct {
	set bool
	v   int64
}

// optFloat is a JSON number that remembers whether it was present.
type optFloat struct {
	set bool
	v   float64
}

// skipSpace returns the index of the first byte at or after i that is
// not JSON white space.
func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// isSpace reports whether c is JSON white space.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
