package usage

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rebound-go/rebound/internal/jsonscan/jsonscantest"
)

// oracle reads a document's usage as Read does, by the Dialects table,
// from encoding/json's decoding of it into maps: a second reading of the
// same rules, by other means.
func oracle(doc []byte) (Reading, bool) {
	if !json.Valid(doc) || jsonscantest.KeyFault(doc, faultPaths()) {
		return Reading{}, false
	}
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	var v any
	d.Decode(&v)
	top, ok := v.(map[string]any)
	if !ok {
		return Reading{}, false
	}
	var r Reading
	found, final, metadata, bad := false, false, false, false
	for _, h := range holders {
		parent, leaf, nested := strings.Cut(h, ".")
		obj := top
		if nested {
			if obj, ok = top[parent].(map[string]any); !ok {
				continue
			}
			h = parent + "." + leaf
		}
		val, has := obj[leaf]
		if !nested {
			val, has = top[h]
		}
		if !has || val == nil {
			continue
		}
		holder, ok := val.(map[string]any)
		if !ok {
			bad = true
			continue
		}
		c, ok := oracleHolder(h, holder)
		bad = bad || !ok
		found = true
		if r.Counts, ok = oracleAdd(r.Counts, c); !ok {
			bad = true
		}
		switch h {
		case "usageMetadata":
			metadata = true
		case "message.usage":
		default:
			final = true
		}
	}
	finished := false
	if cands, ok := top["candidates"].([]any); ok {
		for _, c := range cands {
			if m, ok := c.(map[string]any); ok {
				if s, ok := m["finishReason"].(string); ok && s != "" {
					finished = true
				}
			}
		}
	}
	if bad || !found {
		return Reading{}, false
	}
	r.Final = final || metadata && finished
	return r, true
}

// faultPaths are the names Read decides by, where they lie.
func faultPaths() jsonscantest.Paths {
	p := jsonscantest.Paths{"": topKeys}
	var members []string
	for _, path := range paths {
		if !strings.Contains(path, ".") {
			members = append(members, path)
		}
	}
	for _, h := range holders {
		p[h] = members
		if parent, _, ok := strings.Cut(h, "."); ok {
			p[parent] = []string{"usage"}
		}
		for _, m := range members {
			var leaves []string
			for _, path := range paths {
				if leaf, ok := strings.CutPrefix(path, m+"."); ok {
					leaves = append(leaves, leaf)
				}
			}
			if leaves != nil {
				p[h+"."+m] = leaves
			}
		}
	}
	p["candidates[]"] = []string{"finishReason"}
	return p
}

// oracleHolder reads a holder's counts by the table.
func oracleHolder(h string, holder map[string]any) (Counts, bool) {
	vals := map[string]int64{}
	present := map[string]bool{}
	ok := true
	num := func(path string, v any) {
		present[path] = true
		if v == nil {
			return
		}
		n, isNum := v.(json.Number)
		if !isNum || strings.ContainsAny(string(n), ".eE") {
			ok = false
			return
		}
		i, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil || i < 0 {
			ok = false
			return
		}
		vals[path] = i
	}
	for _, path := range paths {
		parent, leaf, nested := strings.Cut(path, ".")
		if !nested {
			v, has := holder[path]
			if !has {
				continue
			}
			if slices.ContainsFunc(paths, func(p string) bool { return strings.HasPrefix(p, path+".") }) {
				present[path] = true
				if v != nil {
					if _, isObj := v.(map[string]any); !isObj {
						ok = false
					}
				}
				continue
			}
			num(path, v)
			continue
		}
		if obj, isObj := holder[parent].(map[string]any); isObj {
			if v, has := obj[leaf]; has {
				num(path, v)
			}
		}
	}
	var d *Dialect
	for _, dd := range Dialects {
		if slices.Contains(dd.Holders, h) && present[dd.Mark] {
			d = dd
			break
		}
	}
	if d == nil {
		for _, dd := range Dialects {
			if !slices.Contains(dd.Holders, h) {
				continue
			}
			for _, p := range append([]string{dd.Input, dd.CacheRead, dd.CacheWrite, dd.CacheWrite5m, dd.CacheWrite1h}, dd.Output...) {
				if p != "" && present[p] {
					d = dd
					break
				}
			}
			if d != nil {
				break
			}
		}
	}
	if d == nil {
		return Counts{}, ok
	}
	c := Counts{Input: vals[d.Input], CacheRead: vals[d.CacheRead], CacheWrite: vals[d.CacheWrite]}
	if d.CacheWrite1h != "" && (present[d.CacheWrite5m] || present[d.CacheWrite1h]) {
		c.CacheWrite1h = vals[d.CacheWrite1h]
		c.CacheWrite = max(c.CacheWrite-c.CacheWrite1h, vals[d.CacheWrite5m], 0)
	}
	if d.InputHoldsCache {
		if c.CacheRead > c.Input {
			ok = false
		}
		c.Input -= c.CacheRead
	}
	for _, p := range d.Output {
		if c.Output > math.MaxInt64/2-vals[p] {
			return Counts{}, false
		}
		c.Output += vals[p]
	}
	return c, ok
}

func oracleAdd(a, b Counts) (Counts, bool) {
	ok := true
	sum := func(x, y int64) int64 {
		if x > math.MaxInt64/2-y {
			ok = false
			return 0
		}
		return x + y
	}
	return Counts{Input: sum(a.Input, b.Input), CacheRead: sum(a.CacheRead, b.CacheRead), CacheWrite: sum(a.CacheWrite, b.CacheWrite),
		CacheWrite1h: sum(a.CacheWrite1h, b.CacheWrite1h), Output: sum(a.Output, b.Output)}, ok
}

// FuzzReadAsTheTableSays holds Read, on jsonscan, to the oracle, on
// encoding/json: the same counts, the same finality, the same refusals.
func FuzzReadAsTheTableSays(f *testing.F) {
	for _, doc := range []string{
		`{"usage":{"prompt_tokens":92010,"completion_tokens":300,"prompt_tokens_details":{"cached_tokens":90000}}}`,
		`{"type":"response.completed","response":{"usage":{"input_tokens":5,"input_tokens_details":{"cached_tokens":2},"output_tokens":7}}}`,
		`{"type":"message_start","message":{"usage":{"input_tokens":25,"cache_creation_input_tokens":3,"cache_read_input_tokens":4,"output_tokens":1}}}`,
		`{"usage":{"input_tokens":10,"cache_creation_input_tokens":3000,"cache_creation":{"ephemeral_5m_input_tokens":1000,"ephemeral_1h_input_tokens":2000},"output_tokens":5}}`,
		`{"type":"message_delta","usage":{"output_tokens":15}}`,
		`{"usage":{"inputTokens":10,"outputTokens":5,"cacheReadInputTokens":90,"cacheWriteInputTokens":20}}`,
		`{"candidates":[{"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":4,"candidatesTokenCount":2,"thoughtsTokenCount":1,"cachedContentTokenCount":3}}`,
		`{"usage":{"prompt_tokens":1},"usage":null}`, `{"usage":{"prompt_tokens":1.0}}`, `{"usage":{"prompt_tokens":"9"}}`,
		`{"us\u0061ge":{"cache_read_input_tokens":7},"message":null,"response":[]}`, `{"usage":{}}`, `{"usage":{"prompt_tokens_details":5}}`,
		`null`, `[]`, `{"usage":{}} x`, `{"usage":{"prompt_tokens":9223372036854775807,"completion_tokens":1}}`,
	} {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		got, gotOK := Read(doc)
		want, wantOK := oracle(doc)
		if gotOK != wantOK || got != want {
			t.Fatalf("%q: Read %+v %v; the table, by encoding/json, %+v %v", doc, got, gotOK, want, wantOK)
		}
	})
}
