package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rebound-go/rebound/cmd/rebound/internal/batchrun"
)

// TestBatchRefusesADamagedJournal damages the journal of a finished run
// (cut in half, random bytes changed, replaced by a PNG or by noise) and
// runs "rebound batch" and "rebound batch status" on it, each as a process
// of its own: each exits 1 with one line that names the file and says it is
// corrupt, no panic and no goroutine dump, and nothing is sent.
func TestBatchRefusesADamagedJournal(t *testing.T) {
	up := &upstream{h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(bytes.Repeat([]byte(`{"choices":[{"message":{"content":"ok"}}]}`), 40))
	})}
	hs := httptest.NewServer(up)
	defer hs.Close()
	dir := t.TempDir()
	in, out := writeInput(t, dir, 300), filepath.Join(dir, "out.jsonl")
	if code, _, stderr := runCmd("batch", in, "--out", out, "--base-url", hs.URL); code != 0 {
		t.Fatalf("the first run: exit %d, %s", code, stderr)
	}
	whole, err := os.ReadFile(out + ".journal")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(testSeed(t), 0))
	noise := make([]byte, 16<<10)
	for i := range noise {
		noise[i] = byte(rng.Uint32())
	}
	flipped := bytes.Clone(whole)
	for range 40 { // page headers and element tables, past the meta pages
		flipped[(2+rng.IntN(len(flipped)/4096-2))*4096+rng.IntN(64)] ^= 0xff
	}
	sent := up.requests()
	for _, d := range []struct {
		name string
		data []byte
	}{
		{"cut in half", whole[:len(whole)/2]},
		{"bytes changed", flipped},
		{"a PNG", append([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), noise...)},
		{"noise", noise},
	} {
		journal := filepath.Join(dir, strings.ReplaceAll(d.name, " ", "-")+".journal")
		if err := os.WriteFile(journal, d.data, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{
			{"batch", in, "--out", filepath.Join(dir, "again.jsonl"), "--journal", journal, "--base-url", hs.URL},
			{"batch", "status", "--journal", journal},
		} {
			cmd := commandProcess(t, args...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			cmd.Run()
			msg := strings.TrimSuffix(stderr.String(), "\n")
			if code := cmd.ProcessState.ExitCode(); code != 1 || strings.Contains(msg, "\n") || !strings.Contains(msg, journal) || !strings.Contains(msg, "corrupt") {
				t.Errorf("%s, rebound %s: exit %d, stderr %q; want exit 1 and one line naming the file and saying it is corrupt",
					d.name, strings.Join(args[:2], " "), code, firstLines(stderr.String(), 8))
			}
		}
	}
	if n := up.requests(); n != sent {
		t.Errorf("%d requests sent with a damaged journal", n-sent)
	}
}

// firstLines returns the first n lines of s, enough to see a panic's
// message and where it came from.
func firstLines(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	return strings.Join(lines[:min(n, len(lines))], "")
}

// TestBatchKeepsTheAnswersItCannotRecord cuts the journal's file while a
// run (a process of its own) has requests in flight, as another program
// might: the answers that come after are not lost but kept in a file
// beside the output, and the run exits 1. Run again with the journal moved
// aside, the command records the kept answers first, sends them no more,
// and removes the file.
func TestBatchKeepsTheAnswersItCannotRecord(t *testing.T) {
	dir := t.TempDir()
	in, out := writeInput(t, dir, 200), filepath.Join(dir, "out.jsonl")
	journal, kept := out+".journal", filepath.Join(dir, "out.unrecorded.jsonl")
	arrived := &arrivals{}
	up := &upstream{h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.arrived()
		if arrived.count() == 80 { // with 7 more in flight
			if err := os.Truncate(journal, 0); err != nil {
				t.Error(err)
			}
		}
		w.Write([]byte(`{"choices":[{"message":{"content":"ok"}}]}`))
	})}
	hs := httptest.NewServer(up)
	defer hs.Close()
	args := []string{"batch", in, "--out", out, "--base-url", hs.URL, "--concurrency", "8"}
	cmd := commandProcess(t, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(stderr.String(), "kept in "+kept) {
		t.Fatalf("the run whose journal was cut: exit %d, stderr %q; want exit 1, and the answers kept in %s", code, firstLines(stderr.String(), 8), kept)
	}
	first := up.take()
	keptIDs := map[string]bool{}
	b, err := os.ReadFile(kept)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		var a batchrun.KeptAnswer
		if err := json.Unmarshal([]byte(line), &a); err != nil || a.State != "succeeded" || !strings.Contains(string(a.Body), `"ok"`) {
			t.Errorf("kept %q: %v; want an answer, body and all", line, err)
		}
		keptIDs[a.CustomID] = true
	}
	if len(keptIDs) == 0 || len(first) >= 200 {
		t.Errorf("%d answers kept, %d ids sent; want the run stopped, keeping the answers in flight", len(keptIDs), len(first))
	}

	if err := os.Rename(journal, journal+".damaged"); err != nil {
		t.Fatal(err)
	}
	code, report, stderrText := batchJSON(t, args[1:]...)
	second := up.take()
	for id := range keptIDs {
		if second[id] > 0 {
			t.Errorf("%s, whose answer was kept, was sent again", id)
		}
	}
	if code != 0 || report.Journaled.Succeeded != 200 || !strings.Contains(stderrText, fmt.Sprintf("recorded the %d answers kept", len(keptIDs))) {
		t.Errorf("the run after: exit %d, %+v, stderr %q; want all 200 succeeded, the kept answers recorded", code, report.Journaled, stderrText)
	}
	if _, err := os.Stat(kept); !os.IsNotExist(err) {
		t.Errorf("%s is still there after its answers were recorded: %v", kept, err)
	}
	t.Logf("%d ids sent before the cut and after, %d answers kept; %d sent by the next run", len(first), len(keptIDs), len(second))
}

// TestBatchRefusesAnotherInputsKeptAnswers: answers kept by a run of
// another input are not recorded as this input's: the run stops before it
// sends anything.
func TestBatchRefusesAnotherInputsKeptAnswers(t *testing.T) {
	up := &upstream{h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{}`)) })}
	hs := httptest.NewServer(up)
	defer hs.Close()
	dir := t.TempDir()
	in, out := writeInput(t, dir, 3), filepath.Join(dir, "out.jsonl")
	kept := `{"input_digest":"sha256:another","custom_id":"req-0","state":"succeeded","body":"e30="}` + "\n"
	if err := os.WriteFile(batchrun.KeptPath(out), []byte(kept), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCmd("batch", in, "--out", out, "--base-url", hs.URL)
	if code != 1 || up.requests() != 0 || !strings.Contains(stderr, "another input") {
		t.Errorf("exit %d, %d requests, stderr %q; want 1, nothing sent, and why", code, up.requests(), stderr)
	}
}
