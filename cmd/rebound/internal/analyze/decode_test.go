package analyze

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/rebound-go/rebound/internal/jsonscan"
	"github.com/rebound-go/rebound/internal/jsonscan/jsonscantest"
)

// decodeCases are lines on which the scanner must agree with
// encoding/json: the fuzzer's seeds, and a test of their own.
var decodeCases = []string{
	`{}`,
	` { } `,
	`{"succeeded":true}`,
	`{"msg":"rebound.call","succeeded":false,"status":429,"error_type":"requests","error_code":"rate_limit_exceeded","kind":"rate_limited","attempts":3,"waited_ms":1.5e3}`,
	`{"succeeded":true,"retried":null,"attempts":null,"status":null,"cost":null,"msg":null}`,
	`{"succeeded":true,"cost":0.000125,"input_tokens":12,"output_tokens":0}`,
	`{"succeeded":true,"cost":-0,"attempts":-0}`,
	`{"succeeded":true,"cost":1E+2}`,
	`{"succeeded":true,"cost":1e400}`,
	`{"succeeded":true,"attempts":9223372036854775807}`,
	`{"succeeded":true,"attempts":9223372036854775808}`,
	`{"succeeded":true,"attempts":-9223372036854775808}`,
	`{"succeeded":true,"attempts":-9223372036854775809}`,
	`{"succeeded":true,"attempts":12345678901234567890}`,
	`{"succeeded":true,"attempts":1.0}`,
	`{"succeeded":true,"attempts":1e2}`,
	`{"succeeded":true,"attempts":"2"}`,
	`{"succeeded":true,"attempts":01}`,
	`{"succeeded":true,"attempts":-}`,
	`{"succeeded":true,"attempts":1.}`,
	`{"succeeded":true,"attempts":.5}`,
	`{"succeeded":true,"attempts":+1}`,
	`{"succeeded":"true"}`,
	`{"succeeded":1}`,
	`{"succeeded":tru}`,
	`{"succeeded":true,"succeeded":false}`,
	`{"succeeded":true,"Succeeded":false}`,
	`{"SUCCEEDED":true,"STATUS":500}`,
	`{"succeeded":true,"ſtatus":500}`,
	`{"succeeded":true,"\u0073tatus":500}`,
	`{"succeeded":true,"error_code":"a\"b\\c\/d\u00e9\n"}`,
	`{"succeeded":true,"error_code":"é"}`,
	"{\"succeeded\":true,\"error_code\":\"\xff\xfe\"}",
	"{\"succeeded\":true,\"target\":\"\xff\"}",
	"{\"succeeded\":true,\"error_code\":\"a\tb\"}",
	`{"succeeded":true,"error_code":"\x"}`,
	`{"succeeded":true,"error_code":"\u12"}`,
	`{"succeeded":true,"error_code":"\u12G4"}`,
	`{"succeeded":true,"error_code":5}`,
	`{"succeeded":true,"error_code":["a"]}`,
	`{"succeeded":true,"kind":{"a":1}}`,
	`{"succeeded":true,"extra":{"a":[1,2,{"b":null}],"c":"d"},"more":[]}`,
	`{"succeeded":true,"extra":{"a":[1,2,{"b":null}],"c":"d"},"more":[],}`,
	`{"succeeded":true,"extra":[1 2]}`,
	`{"succeeded":true,"extra":{"a" 1}}`,
	`{"succeeded":true,"extra":{1:1}}`,
	`{"succeeded":true,"extra":[,]}`,
	`{"succeeded":true,"extra":[1,]}`,
	`{"succeeded":true,,"extra":1}`,
	`{"succeeded":true "extra":1}`,
	`{"succeeded":true}}`,
	`{"succeeded":true}{}`,
	`{"succeeded":true`,
	`{"succeeded"`,
	`{"succeeded":`,
	`{"succeeded`,
	`{`,
	"{\"succeeded\":\ttrue\r\n}",
	"{\"succeeded\":true}\n",
	"{\"succeeded\":true}\x00",
	`{"time":"2025-03-01T00:00:00.608732656Z","level":"WARN","msg":"rebound.call","target":"gpt-4o:plan","attempts":1,"succeeded":false,"kind":"permanent","status":400,"error_type":"invalid_request_error","error_code":"invalid_value","reason":"not_retryable","waited_ms":0}`,
	`{"model":"claude-sonnet","succeeded":false,"status":413,"error_type":"request_too_large","retried":true,"attempts":4,"input_tokens":196489,"cost":1.964890}`,
	`{"msg":"rebound.call","succeeded":false,"kind":"transient","reason":"refused by the guard","run":"r-1","tenant":"acme","run_cap_usd":5,"tenant_cap_usd":1e2,"cost":0.1,"input_tokens":3,"output_tokens":0}`,
	`{"succeeded":false,"reason":"refused by the gu\u0061rd"}`,
	`{"succeeded":false,"reason":"refused by the guard\n"}`,
	`{"succeeded":false,"reason":"refused by the guard","reason":null}`,
	`{"succeeded":false,"reason":"refused by the guard","reason":[1]}`,
	`{"succeeded":false,"reason":5,"reason":"refused by the guard"}`,
	`{"succeeded":false,"reason":{"a":"refused by the guard"}}`,
	`{"succeeded":false,"Reason":"refused by the guard"}`,
	"{\"succeeded\":false,\"reason\":\"refused by the guard\xff\"}",
	`{"succeeded":true,"run":5}`,
	`{"succeeded":true,"tenant":["t"]}`,
	`{"succeeded":true,"run":null,"tenant":null,"run_cap_usd":null,"tenant_cap_usd":null}`,
	`{"succeeded":true,"run":"é","tenant":"\u00e9"}`,
	`{"succeeded":true,"RUN_CAP_USD":1,"Tenant":"t"}`,
	`{"succeeded":true,"run_cap_usd":"1"}`,
	`{"succeeded":true,"tenant_cap_usd":-0.5}`,
	`{"succeeded":true,"tenant_cap_usd":1e999}`,
	"{\"succeeded\":true,\"output_to\u212aen\u017f\":-1}", // Kelvin sign and long s: 16 bytes that fold to output_tokens
	`{"msg":"request","status":200,"input_tokens":92010,"output_tokens":200,"cache_read_tokens":90000,"cache_write_tokens":2000,"cost_usd":0.038655}`,
	`{"succeeded":true,"cache_read_tokens":null,"cache_write_tokens":null}`,
	`{"succeeded":true,"cache_read_tokens":"1","cache_write_tokens":1.5}`,
	`{"succeeded":true,"cache_read_tokens":1,"Cache_Read_Tokens":2}`,
	`{"succeeded":true,"cache_write_tokens":-9223372036854775808,"cache_read_tokens":9223372036854775808}`,
}

// How encoding/json decodes the fields of a record, for checkDecode.

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

func (r *refusal) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil // as encoding/json: null leaves a field alone
	}
	var reason string
	*r = b[0] == '"' && json.Unmarshal(b, &reason) == nil && reason == refusedReason
	return nil
}

// checkDecode fails if the scanner's result on line differs from
// encoding/json's, or if it reads a line that gives a field twice or
// spells one another way.
func checkDecode(t *testing.T, line []byte) {
	t.Helper()
	if len(line) == 0 || line[0] != '{' {
		return // line() calls the decoder only on these
	}
	var want, got record
	wantErr := json.Unmarshal(line, &want)
	var d decoder
	gotErr := d.decode(line, &got)
	if jsonscantest.KeyFault(line, jsonscantest.Paths{"": fieldNames[1:]}) {
		if gotErr == nil {
			t.Fatalf("%q: a field given twice or spelled another way, read as %+v", line, got)
		}
		return
	}
	if (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("%q: scanner says %v, encoding/json %v", line, gotErr, wantErr)
	}
	if gotErr == nil && got != want {
		t.Fatalf("%q:\nscanner       %+v\nencoding/json %+v", line, got, want)
	}
}

func TestDecodeMatchesUnmarshal(t *testing.T) {
	for _, c := range decodeCases {
		checkDecode(t, []byte(c))
	}
	// encoding/json's nesting limit, at the edge.
	for _, depth := range []int{jsonscan.DefaultMaxDepth - 2, jsonscan.DefaultMaxDepth - 1, jsonscan.DefaultMaxDepth, jsonscan.DefaultMaxDepth + 1} {
		line := `{"succeeded":true,"x":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`
		checkDecode(t, []byte(line))
		line = `{"succeeded":true,"x":` + strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth) + `}`
		checkDecode(t, []byte(line))
	}
}

// TestDecodeGeneratedLines: the lines Generate writes all decode.
func TestDecodeGeneratedLines(t *testing.T) {
	var in bytes.Buffer
	if err := Generate(&in, 2000, 5); err != nil {
		t.Fatal(err)
	}
	var d decoder
	for line := range bytes.Lines(in.Bytes()) {
		var rec record
		if err := d.decode(bytes.TrimSuffix(line, []byte("\n")), &rec); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
	}
}

// FuzzDecode checks that the scanner accepts, rejects and decodes lines
// exactly as encoding/json does, but for those that give a field twice
// or spell one another way, which it refuses.
func FuzzDecode(f *testing.F) {
	for _, c := range decodeCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, line []byte) { checkDecode(t, line) })
}
