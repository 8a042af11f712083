package main

import (
	"bytes"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
