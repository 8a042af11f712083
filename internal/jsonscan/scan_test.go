package jsonscan

import (
	"errors"
	"strings"
	"testing"
)

var testNames = NewNames("model", "mcp_servers", "type", "name")

// readTop reads a document's top-level object by testNames, returning
// the text of each named member's string value by name.
func readTop(t *testing.T, doc string, strict bool) (map[string]string, error) {
	t.Helper()
	s := Scanner{Strict: strict}
	s.Reset([]byte(doc))
	got := map[string]string{}
	if s.Next() != Object {
		s.Skip()
		s.End()
		return got, s.Err()
	}
	for m := s.Object(testNames); m.Next(); {
		if i := m.Name(); i != Other {
			if v, ok := s.Str(); ok {
				got[testNames.names[i]] = string(s.Text(nil, v))
			}
			continue
		}
		s.Skip()
	}
	s.End()
	return got, s.Err()
}

func TestKeysAreMatchedByTheirTextNotTheirSpelling(t *testing.T) {
	for _, doc := range []string{
		`{"model":"small"}`,
		`{"mod\u0065l":"small"}`,
		`{"\u006d\u006f\u0064\u0065\u006c":"small"}`,
		`{"mo\u0064el" : "sm\u0061ll" }`,
	} {
		got, err := readTop(t, doc, true)
		if err != nil || got["model"] != "small" {
			t.Errorf("%s: read %v, %v; want model small", doc, got, err)
		}
	}
}

func TestASecondSpellingOfANameIsRefused(t *testing.T) {
	for _, doc := range []string{
		`{"Model":"big"}`,
		`{"MODEL":"big","model":"small"}`,
		`{"model":"small","mODEL":"big"}`,
		`{"M\u006fdel":"big"}`,
		`{"model\u0000x":"big"}`,  // a C parser stops at the NUL
		`{"model\u0000":"big"}`,   // the same
		`{"mcp_\u017fervers":[]}`, // long s folds to s in encoding/json
		`{"mcp_ſervers":[]}`,      // the same, unescaped
		`{"Type":"x"}`,
		`{"NAME":"x"}`,
	} {
		_, err := readTop(t, doc, true)
		var ke *KeyError
		if !errors.As(err, &ke) || !errors.Is(err, ErrKeySpelling) {
			t.Errorf("%s: got %v, want a second spelling refused", doc, err)
		}
	}
}

func TestANameGivenTwiceIsRefused(t *testing.T) {
	for _, doc := range []string{
		`{"model":"small","model":"big"}`,
		`{"model":"small","mod\u0065l":"big"}`,
		`{"name":1,"x":2,"name":3}`,
	} {
		_, err := readTop(t, doc, true)
		if !errors.Is(err, ErrDuplicateKey) {
			t.Errorf("%s: got %v, want a duplicate refused", doc, err)
		}
		if !strings.Contains(err.Error(), "twice") {
			t.Errorf("%s: the error %q does not say twice", doc, err)
		}
	}
}

func TestKeysNotNamedMayRepeatOrFold(t *testing.T) {
	for _, doc := range []string{
		`{"x":1,"x":2,"X":3,"model":"small"}`,
		`{"models":"a","mode":"b","model":"small","modelx":"c"}`,
		`{"model":"small","nested":{"Model":"big","model":"a","model":"b"}}`,
		`{"` + strings.Repeat(`\u0041`, 1000) + `":1,"model":"small"}`,
	} {
		got, err := readTop(t, doc, true)
		if err != nil || got["model"] != "small" {
			t.Errorf("%s: read %v, %v; want model small", doc, got, err)
		}
	}
}

func TestStrictRefusesWhatRFC8259Refuses(t *testing.T) {
	for _, doc := range []string{
		"\xef\xbb\xbf{}", // a byte-order mark
		`{"a":1,}`,
		`[1,]`,
		`{"a":01}`,
		`{"a":NaN}`,
		`{"a":Infinity}`,
		`{"a":.5}`,
		`{"a":1.}`,
		`{"a":"\x01"}`,
		`{"a":"\q"}`,
		`{"a":"\u12"}`,
		"{\"a\":\"\xff\"}",
		`{"a":1} x`,
		`{"a":1}{}`,
		`{'a':1}`,
		`{"a" 1}`,
		`{"a":tru}`,
		``,
		` `,
		`"\ud800`,
	} {
		if _, err := readTop(t, doc, true); err == nil {
			t.Errorf("%q: accepted", doc)
		}
	}
}

func TestLenientLetsInvalidUTF8ThroughAsEncodingJSONDoes(t *testing.T) {
	doc := "{\"model\":\"sm\xffall\"}"
	got, err := readTop(t, doc, false)
	if err != nil || got["model"] != "sm\uFFFDall" {
		t.Errorf("read %q, %v; want sm\\uFFFDall", got["model"], err)
	}
	if _, err := readTop(t, doc, true); err == nil {
		t.Error("strict accepted invalid UTF-8")
	}
}

func TestNestingIsBounded(t *testing.T) {
	deep := strings.Repeat("[", DefaultMaxDepth) + strings.Repeat("]", DefaultMaxDepth)
	if _, err := readTop(t, deep, true); err != nil {
		t.Errorf("%d deep: %v", DefaultMaxDepth, err)
	}
	if _, err := readTop(t, "["+deep+"]", true); err == nil || !strings.Contains(err.Error(), "too deep") {
		t.Errorf("%d deep: %v, want too deep", DefaultMaxDepth+1, err)
	}
	s := Scanner{MaxDepth: 2}
	s.Reset([]byte(`{"a":{"b":{}}}`))
	s.Skip()
	if s.Err() == nil {
		t.Error("MaxDepth 2 let 3 through")
	}
}

func TestTextResolvesEscapesAsEncodingJSON(t *testing.T) {
	for q, want := range map[string]string{
		`"plain"`:         "plain",
		`"a\nb\"c\\d\/e"`: "a\nb\"c\\d/e",
		`"\u00e9t\u00e9"`: "été",
		`"\ud83d\ude00"`:  "😀",
		`"\ud83d"`:        "\uFFFD",
		`"\ud83d\u0041"`:  "\uFFFDA",
		`"\ude00\ud83d"`:  "\uFFFD\uFFFD",
		`"\ufffd"`:        "\uFFFD",
		"\"caf\xc3\xa9\"": "café",
		"\"bad\xffbyte\"": "bad\uFFFDbyte",
	} {
		text, _ := AppendText(nil, []byte(q))
		if string(text) != want {
			t.Errorf("%s: %q, want %q", q, text, want)
		}
	}
	for q, whole := range map[string]bool{`"\ud83d\ude00"`: true, `"\ufffd"`: true, `"\ud83d"`: false, `"x\udc00y"`: false} {
		if _, w := AppendText(nil, []byte(q)); w != whole {
			t.Errorf("%s: whole %v, want %v", q, w, whole)
		}
	}
}

func TestErrorsSayWhereAndWhy(t *testing.T) {
	_, err := readTop(t, `{"a":1,}`, true)
	var se *SyntaxError
	if !errors.As(err, &se) || se.Offset != 7 || se.Error() != "expected a key at byte 7" {
		t.Errorf("got %v", err)
	}
	_, err = readTop(t, `{"model":"a","Model":"b"}`, true)
	if err == nil || err.Error() != `a second spelling of key "model" at byte 13` {
		t.Errorf("got %v", err)
	}
}

func TestScanningAllocatesNothing(t *testing.T) {
	doc := []byte(`{"mod\u0065l":"small","messages":[{"role":"user","content":"hi \u00e9"}],"n":1,"x":[true,false,null,-1.5e3]}`)
	var s Scanner
	n := testing.AllocsPerRun(100, func() {
		s.Reset(doc)
		for m := s.Object(testNames); m.Next(); {
			s.Skip()
		}
		s.End()
	})
	if n != 0 || s.Err() != nil {
		t.Errorf("%v allocations a document (err %v)", n, s.Err())
	}
}

func TestAScannerOnTheStackAllocatesNothing(t *testing.T) {
	doc := []byte(`{"M\u00f6del":1,"model":"small","x":[[[[{"a":"\u00e9"}]]]]}`)
	n := testing.AllocsPerRun(100, func() {
		var s Scanner
		s.Reset(doc)
		for m := s.Object(testNames); m.Next(); {
			s.Skip()
		}
		s.End()
	})
	if n != 0 {
		t.Errorf("%v allocations a document", n)
	}
}

func TestObjectsAndArraysNestedPastSixtyFourAlternate(t *testing.T) {
	var b strings.Builder
	for range 100 {
		b.WriteString(`{"a":[`)
	}
	b.WriteString(`1`)
	for range 100 {
		b.WriteString(`]}`)
	}
	var s Scanner
	s.Reset([]byte(b.String()))
	if s.Skip(); !s.End() {
		t.Fatalf("200 deep, alternating: %v", s.Err())
	}
	s.Reset([]byte(strings.Replace(b.String(), "]}", "}]", 1)))
	if s.Skip(); s.End() {
		t.Fatal("a bracket closing the wrong container was let through")
	}
}
