package batch_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/rebound-go/rebound/batch"
)

// TestReadReportsMalformedLines: each bad line is named by its number and
// what is wrong with it, and the good ones around it are kept.
func TestReadReportsMalformedLines(t *testing.T) {
	in := strings.Join([]string{
		`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}`,
		``,
		`not json`,
		`{"method":"POST","url":"/v1/x","body":{}}`,
		`{"custom_id":7,"method":"POST","url":"/v1/x","body":{}}`,
		`{"custom_id":"b","method":"GET","url":"/v1/x","body":{}}`,
		`{"custom_id":"c","method":"POST","url":"https://evil.example/v1/x","body":{}}`,
		`{"custom_id":"d","method":"POST","url":"//evil.example/v1/x","body":{}}`,
		`{"custom_id":"e","method":"POST","url":"/v1/x","body":[1]}`,
		`{"custom_id":"f","method":"POST","url":"/v1/x"}`,
		`{"custom_id":"","method":"POST","url":"/v1/x","body":{}}`,
		"{\"custom_id\":\"g\",\"method\":\"POST\",\"url\":\"/v1/x\",\"body\":{ \"model\" : \"m\" }}\r",
		`   `,
	}, "\n")
	f, err := batch.Read(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range f.Malformed {
		got = append(got, m.Error())
	}
	want := []string{
		`line 3: not a JSON object: invalid character 'o' in literal null (expecting 'u')`,
		`line 4: custom_id is missing`,
		`line 5: custom_id is not a string`,
		`line 6: method "GET": only POST is sent`,
		`line 7: url "https://evil.example/v1/x": want a path such as /v1/chat/completions`,
		`line 8: url "//evil.example/v1/x": want a path such as /v1/chat/completions`,
		`line 9: body is missing or not a JSON object`,
		`line 10: body is missing or not a JSON object`,
		`line 11: custom_id is empty`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("malformed:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(f.Requests) != 2 || f.Requests[1].CustomID != "g" || f.Requests[1].Line != 12 || string(f.Requests[1].Body) != `{"model":"m"}` {
		t.Errorf("requests: %+v", f.Requests)
	}
}

// TestReadRefusesDuplicates: two requests with one custom_id could not be
// told apart in the output.
func TestReadRefusesDuplicates(t *testing.T) {
	line := `{"custom_id":"x","method":"POST","url":"/v1/x","body":{}}` + "\n"
	_, err := batch.Read(strings.NewReader(line + line))
	var dup *batch.DuplicateError
	if !errors.As(err, &dup) || dup.First != 1 || dup.Line != 2 {
		t.Fatalf("err %v, want a DuplicateError naming lines 1 and 2", err)
	}
}

// TestReadSkipsALineTooLong without holding it in memory, and goes on.
func TestReadSkipsALineTooLong(t *testing.T) {
	long := io.MultiReader(strings.NewReader(`{"custom_id":"big","body":"`), io.LimitReader(neverEnding('x'), batch.MaxLine+10), strings.NewReader("\"}\n"),
		strings.NewReader(`{"custom_id":"ok","method":"POST","url":"/v1/x","body":{}}`))
	f, err := batch.Read(long)
	if err != nil || len(f.Malformed) != 1 || f.Malformed[0].Line != 1 || len(f.Requests) != 1 || f.Requests[0].Line != 2 {
		t.Fatalf("Read: %v, %v, %+v", err, f.Malformed, f.Requests)
	}
}

type neverEnding byte

var xs = bytes.Repeat([]byte("x"), 64<<10)

func (neverEnding) Read(p []byte) (int, error) { return copy(p, xs), nil }

// TestInputDigest: the same requests give the same digest, however the
// bodies are spaced; any change in what is asked gives another.
func TestInputDigest(t *testing.T) {
	digest := func(lines ...string) string {
		f, err := batch.Read(strings.NewReader(strings.Join(lines, "\n")))
		if err != nil || len(f.Malformed) > 0 {
			t.Fatal(err, f.Malformed)
		}
		return f.Input().Digest
	}
	a := `{"custom_id":"a","method":"POST","url":"/v1/x","body":{"n":1}}`
	if digest(a) != digest(`{"body": {"n": 1}, "url":"/v1/x","method":"POST","custom_id":"a"}`) {
		t.Error("re-spacing a line changed the digest")
	}
	for _, other := range []string{
		`{"custom_id":"b","method":"POST","url":"/v1/x","body":{"n":1}}`,
		`{"custom_id":"a","method":"POST","url":"/v1/y","body":{"n":1}}`,
		`{"custom_id":"a","method":"POST","url":"/v1/x","body":{"n":2}}`,
	} {
		if digest(a) == digest(other) {
			t.Errorf("%s has the digest of %s", other, a)
		}
	}
}

func ExampleWriteOutput() {
	f, _ := batch.Read(strings.NewReader(`{"custom_id":"q1","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}
{"custom_id":"q2","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}`))
	j, _ := (&memoryStore{}).open()
	ctx := context.Background()
	j.Prepare(ctx, f.Input(), batch.Options{})
	j.Claim(ctx, 2)
	j.Record(ctx, []batch.Outcome{
		{ID: "q1", State: batch.Succeeded, StatusCode: 200, RequestID: "req_1", Body: []byte(`{"choices":[]}`)},
		{ID: "q2", State: batch.FailedPermanent, StatusCode: 400, Body: []byte(`{"error":{"message":"bad"}}`), ErrorCode: "permanent", ErrorMessage: "400 Bad Request"},
	})
	var out, errs bytes.Buffer
	batch.WriteOutput(ctx, j, &out, &errs)
	fmt.Print(out.String(), errs.String())
	// Output:
	// {"id":"batch_req_c75de8c1b7c3ae5252091267","custom_id":"q1","response":{"status_code":200,"request_id":"req_1","body":{"choices":[]}},"error":null}
	// {"id":"batch_req_bee98bf120e8906382754c6b","custom_id":"q2","response":{"status_code":400,"request_id":"","body":{"error":{"message":"bad"}}},"error":{"code":"permanent","message":"400 Bad Request"}}
}

// TestReadBOMAndOddIDs: a byte order mark is not part of the first line;
// a custom_id that is not valid UTF-8 text (which would decode to U+FFFD,
// making two ids one) or holds a NUL is malformed.
func TestReadBOMAndOddIDs(t *testing.T) {
	in := "\xef\xbb\xbf" + `{"custom_id":"a","method":"POST","url":"/v1/x","body":{}}` + "\n" +
		"{\"custom_id\":\"b\xff\",\"method\":\"POST\",\"url\":\"/v1/x\",\"body\":{}}\n" +
		`{"custom_id":"c\u0000","method":"POST","url":"/v1/x","body":{}}` + "\n"
	f, err := batch.Read(strings.NewReader(in))
	if err != nil || len(f.Requests) != 1 || f.Requests[0].CustomID != "a" || len(f.Malformed) != 2 ||
		!strings.Contains(f.Malformed[0].Error(), "line 2: custom_id is not valid UTF-8") || f.Malformed[1].Line != 3 {
		t.Fatalf("Read: %v, %+v, %v", err, f.Requests, f.Malformed)
	}
}
