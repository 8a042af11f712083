package analyze

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"unicode/utf8"
)

// Decoding. encoding/json's Unmarshal reads a line at some 80 MB/s; the
// scanner here reads the same lines four to five times faster by looking
// only at the top-level keys a record has and validating the rest without
// decoding it. Whatever it is unsure of (an escaped or non-ASCII key, a key
// that matches a known one only case-insensitively, an escaped or invalid
// UTF-8 string value it needs) it hands to Unmarshal, so that it accepts and
// decodes exactly what Unmarshal does: FuzzDecode checks that.

var (
	errSyntax = errors.New("invalid JSON")
	errType   = errors.New("wrong type")
	// errFallback asks for json.Unmarshal.
	errFallback = errors.New("fall back to encoding/json")
)

// maxDepth is encoding/json's nesting limit.
const maxDepth = 10000

// decoder decodes lines into records, interning short strings.
type decoder struct {
	// strs interns messages, kinds, error types and codes; keys, the
	// names of runs and tenants, so that a log of a million runs does not
	// crowd the error codes out.
	strs, keys map[string]string
}

// maxInterned bounds the strings a decoder interns in each of its maps.
const maxInterned = 4096

// decode decodes one line, which starts with '{', into rec, which is zero.
func (d *decoder) decode(b []byte, rec *record) error {
	err := d.scan(b, rec)
	if err == errFallback {
		*rec = record{}
		return json.Unmarshal(b, rec)
	}
	return err
}

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
	fLast = fOutcome
)

var fieldNames = [...]string{
	fMsg: "msg", fSucceeded: "succeeded", fRetried: "retried", fAttempts: "attempts",
	fStatus: "status", fErrorType: "error_type", fErrorCode: "error_code", fKind: "kind",
	fInputTokens: "input_tokens", fOutputTokens: "output_tokens", fCost: "cost",
	fRun: "run", fTenant: "tenant", fRunCap: "run_cap_usd", fTenantCap: "tenant_cap_usd", fReason: "reason",
	fCostUSD: "cost_usd", fOutcome: "outcome",
}

// fieldsByLen lists the fields by the length of their names: a key is
// compared with the few names as long as it, faster than a map's hash.
var fieldsByLen = func() (by [16][]field) {
	for f := fMsg; f <= fLast; f++ {
		by[len(fieldNames[f])] = append(by[len(fieldNames[f])], f)
	}
	return by
}()

// lookup returns the field key names, or errFallback if key matches one
// only as encoding/json would, case-insensitively.
func lookup(key []byte) (field, error) {
	if len(key) < len(fieldsByLen) {
		for _, f := range fieldsByLen[len(key)] {
			if string(key) == fieldNames[f] {
				return f, nil
			}
		}
	}
	upper := false
	for _, c := range key {
		if c >= utf8.RuneSelf {
			return fNone, errFallback // may fold to a known key
		}
		upper = upper || 'A' <= c && c <= 'Z'
	}
	if !upper {
		return fNone, nil // known names are lower case: only a capital folds to one
	}
	for f := fMsg; f <= fLast; f++ {
		if len(key) == len(fieldNames[f]) && bytes.EqualFold(key, []byte(fieldNames[f])) {
			return fNone, errFallback
		}
	}
	return fNone, nil
}

// scan decodes b into rec, or returns errFallback.
func (d *decoder) scan(b []byte, rec *record) error {
	i := skipSpace(b, 0)
	if i == len(b) || b[i] != '{' {
		return errSyntax
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		i++
	} else {
		for {
			if i == len(b) || b[i] != '"' {
				return errSyntax
			}
			end, flags, err := scanString(b, i)
			if err != nil {
				return err
			}
			if flags != 0 {
				return errFallback
			}
			f, err := lookup(b[i+1 : end-1])
			if err != nil {
				return err
			}
			i = skipSpace(b, end)
			if i == len(b) || b[i] != ':' {
				return errSyntax
			}
			i = skipSpace(b, i+1)
			start := i
			if i, err = skipValue(b, i, 1); err != nil {
				return err
			}
			if f != fNone {
				if err := d.set(rec, f, b[start:i]); err != nil {
					return err
				}
			}
			i = skipSpace(b, i)
			if i == len(b) {
				return errSyntax
			}
			if b[i] == '}' {
				i++
				break
			}
			if b[i] != ',' {
				return errSyntax
			}
			i = skipSpace(b, i+1)
		}
	}
	if skipSpace(b, i) != len(b) {
		return errSyntax
	}
	return nil
}

// set stores the valid JSON value v in rec's field f.
func (d *decoder) set(rec *record, f field, v []byte) error {
	if string(v) == "null" {
		return nil // as encoding/json: null leaves a field alone
	}
	switch f {
	case fMsg, fErrorType, fErrorCode, fKind, fRun, fTenant, fOutcome:
		return d.setString(rec, f, v)
	case fReason:
		if v[0] == '"' {
			if _, flags, _ := scanString(v, 0); flags&strEscaped != 0 {
				return errFallback // may spell refusedReason
			}
		}
		rec.Refused = string(v) == refusedJSON
	case fSucceeded, fRetried:
		return setBool(rec, f, v)
	case fAttempts, fStatus, fInputTokens, fOutputTokens:
		return setInt(rec, f, v)
	case fCost, fRunCap, fTenantCap, fCostUSD:
		return setFloat(rec, f, v)
	}
	return nil
}

// setString stores v, a string, in rec's string field f.
func (d *decoder) setString(rec *record, f field, v []byte) error {
	if v[0] != '"' {
		return errType
	}
	if _, flags, _ := scanString(v, 0); flags&strEscaped != 0 ||
		flags&strHigh != 0 && !utf8.Valid(v) {
		return errFallback
	}
	switch b := v[1 : len(v)-1]; f {
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
	n, ok := parseInt(v)
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

// optBool is a JSON boolean that remembers whether it was present.
type optBool struct{ set, v bool }

func (o *optBool) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case "true":
		*o = optBool{true, true}
	case "false":
		*o = optBool{true, false}
	case "null":
	default:
		return errType
	}
	return nil
}

// optInt is a JSON integer that remembers whether it was present.
type optInt struct {
	set bool
	v   int64
}

func (o *optInt) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return errType
	}
	*o = optInt{true, v}
	return nil
}

// optFloat is a JSON number that remembers whether it was present.
type optFloat struct {
	set bool
	v   float64
}

func (o *optFloat) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		return errType
	}
	v, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return errType
	}
	*o = optFloat{true, v}
	return nil
}

// refusedReason is the reason a rebound.call gives when the context's
// Guard, a spend cap, refused an attempt (rebound.StopRefused).
const refusedReason = "refused by the guard"

// refusedJSON is refusedReason as JSON without escapes.
const refusedJSON = `"` + refusedReason + `"`

// refusal is a "reason" that tells whether it is refusedReason. Any other
// value, of any type, is read past, as the reason was before caps: a
// reason is no key whose type can make a line malformed.
type refusal bool

func (r *refusal) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil // as encoding/json: null leaves a field alone
	}
	var reason string
	*r = b[0] == '"' && json.Unmarshal(b, &reason) == nil && reason == refusedReason
	return nil
}
