package analyze

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
)

func spendOf(t *testing.T, spends []Spend, name string) Spend {
	t.Helper()
	for _, s := range spends {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no %q in %+v", name, spends)
	return Spend{}
}

func names(spends []Spend) []string {
	var n []string
	for _, s := range spends {
		n = append(n, s.Name)
	}
	return n
}

// TestCapsBothSchemas checks each run's and tenant's calls, refusals,
// spend and cap, from rebound's records and the simple schema mixed.
func TestCapsBothSchemas(t *testing.T) {
	r := analyzeLines(t, Options{Priced: true, PriceIn: 2.5, PriceOut: 10},
		// rebound's records, with the cost fields the logger added
		`{"msg":"rebound.call","target":"gpt-x","attempts":1,"succeeded":true,"run":"r1","tenant":"acme","run_cap_usd":0.5,"tenant_cap_usd":20,"cost":0.3}`,
		`{"msg":"rebound.call","target":"gpt-x","attempts":2,"succeeded":true,"run":"r1","tenant":"acme","run_cap_usd":0.6,"input_tokens":1000,"output_tokens":100}`,
		`{"msg":"rebound.call","target":"gpt-x","attempts":1,"succeeded":false,"kind":"transient","reason":"refused by the guard","run":"r1","tenant":"acme","run_cap_usd":0.5}`,
		`{"msg":"rebound.call","target":"gpt-x","attempts":3,"succeeded":false,"kind":"transient","status":503,"reason":"attempts exhausted","run":"r2","tenant":"acme","run_cap_usd":1}`,
		// the simple schema
		`{"succeeded":true,"run":"r2","tenant":"globex","cost":1.25,"run_cap_usd":1,"tenant_cap_usd":5}`,
		`{"succeeded":false,"reason":"refused by the guard","run":"r3","tenant":"globex"}`,
		`{"succeeded":true,"reason":"refused by the guard","run":"r3"}`, // a success is no refusal
		`{"succeeded":true,"tenant":"globex","tenant_cap_usd":4,"cost":0.5}`,
		// no run nor tenant: in no ledger; a cap without its key applies to nothing
		`{"succeeded":true,"cost":9,"run_cap_usd":0.01}`,
	)
	if r.Calls != 9 || r.Malformed != 0 {
		t.Fatalf("calls %d malformed %d", r.Calls, r.Malformed)
	}
	r1 := spendOf(t, r.Runs, "r1")
	// 0.3 logged, then 2 attempts of 1000 input tokens and 100 output
	spend1 := 0.3 + (2*1000*2.5+100*10)/1e6
	if r1.Calls != 3 || r1.Refused != 1 || r1.PricedCalls != 2 || !usdIs(r1.SpendUSD, spend1) ||
		!usdIs(r1.CapUSD, 0.6) || !usdIs(r1.ShareOfCap, round(spend1, 1e6)/0.6) || r1.PassedCap {
		t.Errorf("r1 %+v", r1)
	}
	r2 := spendOf(t, r.Runs, "r2")
	if r2.Calls != 2 || r2.Refused != 0 || r2.PricedCalls != 1 || !usdIs(r2.SpendUSD, 1.25) || !usdIs(r2.CapUSD, 1) ||
		!usdIs(r2.ShareOfCap, 1.25) || !r2.PassedCap {
		t.Errorf("r2 %+v", r2)
	}
	r3 := spendOf(t, r.Runs, "r3")
	if r3.Calls != 2 || r3.Refused != 1 || r3.SpendUSD != nil || r3.CapUSD != nil || r3.ShareOfCap != nil || r3.PassedCap {
		t.Errorf("r3 %+v", r3)
	}
	if got := strings.Join(names(r.Runs), ","); got != "r2,r1,r3" {
		t.Errorf("runs in order %s, want the one that passed its cap, then the nearest", got)
	}
	acme := spendOf(t, r.Tenants, "acme")
	if acme.Calls != 4 || acme.Refused != 1 || !usdIs(acme.SpendUSD, spend1) || !usdIs(acme.CapUSD, 20) || acme.PassedCap {
		t.Errorf("acme %+v", acme)
	}
	globex := spendOf(t, r.Tenants, "globex")
	if globex.Calls != 3 || globex.Refused != 1 || !usdIs(globex.SpendUSD, 1.75) || !usdIs(globex.CapUSD, 5) ||
		!usdIs(globex.ShareOfCap, 0.35) {
		t.Errorf("globex %+v", globex)
	}
	if len(r.Runs) != 3 || len(r.Tenants) != 2 || r.OtherRuns != nil || r.OtherTenants != nil {
		t.Errorf("%d runs, %d tenants, others %v %v", len(r.Runs), len(r.Tenants), r.OtherRuns, r.OtherTenants)
	}
	// The rows are what they were: a refusal is a failure like another.
	if tot := r.Totals; tot.Calls != 9 || tot.Succeeded != 6 {
		t.Errorf("totals %+v", tot)
	}
}

// TestCapsGiven checks the caps given for runs and tenants that log none:
// a logged cap wins, and a cap of 0 is passed by any spend.
func TestCapsGiven(t *testing.T) {
	runCap, tenantCap := 1.0, 0.0
	r := analyzeLines(t, Options{RunCapUSD: &runCap, TenantCapUSD: &tenantCap},
		`{"succeeded":true,"run":"logged","run_cap_usd":2,"cost":1.5}`,
		`{"succeeded":true,"run":"given","tenant":"t","cost":1.5}`,
		`{"succeeded":true,"run":"unpriced"}`,
	)
	if s := spendOf(t, r.Runs, "logged"); !usdIs(s.CapUSD, 2) || s.PassedCap || !usdIs(s.ShareOfCap, 0.75) {
		t.Errorf("logged cap %+v", s)
	}
	if s := spendOf(t, r.Runs, "given"); !usdIs(s.CapUSD, 1) || !s.PassedCap || !usdIs(s.ShareOfCap, 1.5) {
		t.Errorf("given cap %+v", s)
	}
	if s := spendOf(t, r.Runs, "unpriced"); !usdIs(s.CapUSD, 1) || s.PassedCap || s.ShareOfCap != nil || s.SpendUSD != nil {
		t.Errorf("unpriced %+v", s)
	}
	if s := spendOf(t, r.Tenants, "t"); !usdIs(s.CapUSD, 0) || !s.PassedCap || s.ShareOfCap != nil {
		t.Errorf("a cap of 0 %+v", s)
	}
	// Given caps out of range are bounded, as prices are.
	huge, negative := 1e300, -3.0
	r = analyzeLines(t, Options{RunCapUSD: &huge, TenantCapUSD: &negative}, `{"succeeded":true,"run":"r","tenant":"t"}`)
	if !usdIs(r.Runs[0].CapUSD, MaxCost) || !usdIs(r.Tenants[0].CapUSD, 0) {
		t.Errorf("caps %v %v", *r.Runs[0].CapUSD, *r.Tenants[0].CapUSD)
	}
}

// TestCapsMalformed checks that the new keys follow the decoder's rules:
// a wrong type, or a negative or absurd cap, makes a line malformed, and a
// reason of any sort does not (but given twice, as any field).
func TestCapsMalformed(t *testing.T) {
	for _, line := range []string{
		`{"succeeded":true,"run":5}`,
		`{"succeeded":true,"tenant":true}`,
		`{"succeeded":true,"tenant":{"id":"acme"}}`,
		`{"msg":"rebound.call","succeeded":true,"run":["r"]}`,
		`{"succeeded":true,"run":"r","run_cap_usd":-0.01}`,
		`{"succeeded":true,"tenant":"t","tenant_cap_usd":-1}`,
		`{"succeeded":true,"run":"r","run_cap_usd":"5"}`,
		`{"msg":"rebound.call","succeeded":true,"tenant_cap_usd":1e10}`,
		`{"succeeded":true,"run_cap_usd":1e999}`,
		`{"msg":"rebound.call","succeeded":true,"cost":-1}`,
		`{"msg":"rebound.call","succeeded":true,"input_tokens":"12"}`,
		`{"succeeded":false,"reason":"refused by the guard","reason":"canceled","run":"r"}`, // readers differ on which counts
	} {
		if r := analyzeLines(t, Options{}, line); r.Malformed != 1 || r.Runs != nil || r.Tenants != nil {
			t.Errorf("%s: malformed %d, runs %v, tenants %v", line, r.Malformed, r.Runs, r.Tenants)
		}
	}
	for _, line := range []string{
		`{"msg":"rebound.call","succeeded":false,"reason":5,"run":"r"}`,
		`{"succeeded":false,"reason":{"why":"refused by the guard"},"run":"r"}`,
		`{"succeeded":false,"reason":null,"run":"r","run_cap_usd":0}`,
		`{"succeeded":false,"run":"r","run_cap_usd":null,"tenant":null}`,
	} {
		r := analyzeLines(t, Options{}, line)
		if r.Malformed != 0 || len(r.Runs) != 1 || r.Runs[0].Refused != 0 {
			t.Errorf("%s: malformed %d, runs %+v", line, r.Malformed, r.Runs)
		}
	}
}

// TestCapsAbsent checks that a log naming no run nor tenant reports none,
// and its JSON has no key it had not before.
func TestCapsAbsent(t *testing.T) {
	r := analyzeLines(t, Options{}, `{"succeeded":true,"run":"","tenant":""}`, `{"succeeded":true,"run_cap_usd":3}`)
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	json.Unmarshal(b, &top)
	checkKeys(t, "report", top, "calls", "files", "lines", "malformed", "rows", "skipped", "totals")
}

// TestCapsJSON checks the keys of runs, tenants and what is past the
// bound.
func TestCapsJSON(t *testing.T) {
	r := analyzeLines(t, Options{MaxKeys: 1},
		`{"succeeded":true,"run":"a","tenant":"x","cost":1}`,
		`{"succeeded":false,"reason":"refused by the guard","run":"b","tenant":"y"}`)
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	json.Unmarshal(b, &top)
	checkKeys(t, "report", top, "calls", "files", "lines", "malformed", "other_runs", "other_tenants", "rows",
		"runs", "skipped", "tenants", "totals")
	for _, key := range []string{"runs", "tenants"} {
		var spends []map[string]json.RawMessage
		json.Unmarshal(top[key], &spends)
		if len(spends) != 1 {
			t.Fatalf("%s: %s", key, top[key])
		}
		checkKeys(t, key, spends[0], "calls", "cap_usd", "name", "passed_cap", "priced_calls", "refused",
			"share_of_cap", "spend_usd")
	}
	for _, key := range []string{"other_runs", "other_tenants"} {
		var other map[string]json.RawMessage
		json.Unmarshal(top[key], &other)
		checkKeys(t, key, other, "calls", "priced_calls", "refused", "spend_usd")
		if string(other["calls"]) != "1" || string(other["refused"]) != "1" || string(other["spend_usd"]) != "null" {
			t.Errorf("%s: %s", key, top[key])
		}
	}
}

// TestCapsBound checks that past MaxKeys runs, the calls of new ones are
// counted together, those of runs kept still to their own.
func TestCapsBound(t *testing.T) {
	a := New(Options{MaxKeys: 10})
	var in strings.Builder
	for i := range 100 {
		fmt.Fprintf(&in, `{"succeeded":true,"run":"run-%d","tenant":"t","cost":1,"run_cap_usd":0.5}`+"\n", i)
	}
	in.WriteString(`{"succeeded":false,"reason":"refused by the guard","run":"run-3"}` + "\n")
	if _, err := a.Read(t.Context(), "many", strings.NewReader(in.String())); err != nil {
		t.Fatal(err)
	}
	r := a.Report()
	if len(r.Runs) != 10 || len(a.runs.accounts) != 10 || len(r.Tenants) != 1 || r.OtherTenants != nil {
		t.Fatalf("%d runs, %d tenants, other tenants %v", len(r.Runs), len(r.Tenants), r.OtherTenants)
	}
	if o := r.OtherRuns; o == nil || o.Calls != 90 || o.PricedCalls != 90 || !usdIs(o.SpendUSD, 90) || o.Refused != 0 {
		t.Errorf("other runs %+v", o)
	}
	if s := spendOf(t, r.Runs, "run-3"); s.Calls != 2 || s.Refused != 1 || !s.PassedCap {
		t.Errorf("run-3 %+v", s)
	}
	if s := r.Tenants[0]; s.Calls != 100 || !usdIs(s.SpendUSD, 100) {
		t.Errorf("tenant %+v", s)
	}
}

// TestCapsConstantMemory checks that a log of ever new runs and tenants,
// each with a name as long as is kept, does not grow the live heap: after
// 20 000 lines and after 200 000 more it is the same, give or take.
func TestCapsConstantMemory(t *testing.T) {
	distinct := func(from, n int) func(io.Writer) error {
		return func(w io.Writer) error {
			bw := bufio.NewWriter(w)
			pad := strings.Repeat("x", MaxCodeBytes)
			for i := from; i < from+n; i++ {
				fmt.Fprintf(bw, `{"msg":"rebound.call","succeeded":true,"run":"%d-%s","tenant":"%d-%s","run_cap_usd":1,"cost":0.5}`+"\n",
					i, pad, i, pad)
			}
			return bw.Flush()
		}
	}
	a := New(Options{MaxKeys: 5000})
	small := heapAfter(t, a, distinct(0, 20000))
	large := heapAfter(t, a, distinct(20000, 200000))
	const slack = 1 << 20
	if large > small+slack {
		t.Errorf("live heap grew from %d to %d bytes", small, large)
	}
	if len(a.runs.accounts) != 5000 || len(a.tenants.accounts) != 5000 || len(a.dec.keys) > maxInterned ||
		a.runs.other.calls != 215000 {
		t.Errorf("%d runs, %d tenants, %d interned names, %d other calls",
			len(a.runs.accounts), len(a.tenants.accounts), len(a.dec.keys), a.runs.other.calls)
	}
	// Names beyond MaxCodeBytes are cut: the accounts hold no more.
	for name := range a.runs.accounts {
		if len(name) > MaxCodeBytes {
			t.Fatalf("kept a name of %d bytes", len(name))
		}
	}
	runtime.KeepAlive(a)
}

// TestCapsRefusedRow: calls a cap refused have a row of their own, whose
// advice is not to retry: no provider failed them.
func TestCapsRefusedRow(t *testing.T) {
	r := analyzeLines(t, Options{},
		`{"msg":"rebound.call","target":"gpt-x","attempts":0,"succeeded":false,"kind":"transient","reason":"refused by the guard","run":"r1"}`,
		`{"succeeded":false,"reason":"refused by the guard"}`,
		`{"succeeded":false,"attempts":2}`,
	)
	row := rowOf(t, r, "refused by a spend cap")
	if row.Calls != 2 || row.Kind != "" || !strings.Contains(row.Recommendation, "not a provider error") {
		t.Errorf("refused row %+v", row)
	}
	if tr := rowOf(t, r, "transport error"); tr.Calls != 1 {
		t.Errorf("transport error row %+v; want the one real failure", tr)
	}
}

// TestSpendByTenantFromTheProxysLog: rebound proxy's access log lines
// count as calls of their tenants: answered under status 400, refused by
// the spend cap by their outcome, costing their cost_usd.
func TestSpendByTenantFromTheProxysLog(t *testing.T) {
	r := analyzeLines(t, Options{},
		`{"time":"2026-12-02T03:36:07Z","level":"INFO","msg":"request","method":"POST","path":"/v1/chat/completions","route":"default","upstream":"chaos","model":"m","attempts":1,"kinds":[],"status":200,"latency_ms":3.1,"input_tokens":3,"output_tokens":5,"tenant":"acme","tenant_cap_usd":0.05,"cost_usd":0.0008}`,
		`{"msg":"request","attempts":2,"kinds":["rate_limited"],"status":200,"tenant":"acme","tenant_cap_usd":0.05,"cost_usd":0.0007}`,
		`{"msg":"request","attempts":0,"kinds":[],"status":429,"tenant":"acme","tenant_cap_usd":0.05,"cost_usd":0,"outcome":"tenant_spend_cap"}`,
		`{"msg":"request","attempts":0,"kinds":[],"status":429,"tenant":"globex","outcome":"tenant_rate_limit"}`,
		`{"msg":"request","attempts":1,"kinds":[],"status":200,"tenant":"globex","cost_usd":0.25}`,
		`{"msg":"request","attempts":1,"tenant":"globex"}`,               // no status: malformed
		`{"msg":"request","status":200,"tenant":"globex","cost_usd":-1}`, // a negative cost: malformed
		`{"msg":"draining","timeout":"30s"}`,                             // another message: skipped
	)
	if r.Calls != 5 || r.Malformed != 2 {
		t.Fatalf("calls %d malformed %d, want 5 and 2", r.Calls, r.Malformed)
	}
	acme := spendOf(t, r.Tenants, "acme")
	if acme.Calls != 3 || acme.Refused != 1 || !usdIs(acme.SpendUSD, 0.0015) || !usdIs(acme.CapUSD, 0.05) || acme.PassedCap {
		t.Errorf("acme %+v", acme)
	}
	globex := spendOf(t, r.Tenants, "globex")
	if globex.Calls != 2 || globex.Refused != 0 || !usdIs(globex.SpendUSD, 0.25) || globex.CapUSD != nil {
		t.Errorf("globex %+v", globex)
	}
}
