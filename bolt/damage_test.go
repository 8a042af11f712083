package reboundbolt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rebound-go/rebound/batch"
)

// damageEnvSeed replays the damage of a run of TestDamagedFiles.
const damageEnvSeed = "REBOUNDBOLT_DAMAGE_SEED"

// pageSize is the page size of the journals these tests write: bbolt's
// default, the machine's.
var pageSize = os.Getpagesize()

// damagedInput is the batch of the journal the damage tests break: enough
// items and bodies for branch pages in both buckets and values that span
// several pages.
func damagedInput() batch.Input {
	in := batch.Input{Digest: "damage-test"}
	for i := range 400 {
		in.IDs = append(in.IDs, fmt.Sprintf("item-%04d", i))
	}
	return in
}

// wholeJournal writes a journal of damagedInput, most items recorded, and
// returns its bytes.
func wholeJournal(t *testing.T) []byte {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "whole.journal")
	j, err := Open(path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	in := damagedInput()
	if err := j.Prepare(ctx, in, batch.Options{}); err != nil {
		t.Fatal(err)
	}
	claims, err := j.Claim(ctx, 350)
	if err != nil {
		t.Fatal(err)
	}
	var group []batch.Outcome
	for i, c := range claims[:330] {
		o := batch.Outcome{ID: c.ID, State: batch.Succeeded, StatusCode: 200, RequestID: "req-" + c.ID, Attempts: 1}
		if i%5 == 0 {
			o.State, o.StatusCode, o.ErrorCode, o.ErrorMessage = batch.Failed, 503, "overloaded", "503"
		}
		size := 80
		if i%40 == 0 {
			size = 9000 // over two pages
		}
		o.Body = bytes.Repeat([]byte(c.ID), size/len(c.ID))
		if group = append(group, o); len(group) == 30 {
			if err := j.Record(ctx, group); err != nil {
				t.Fatal(err)
			}
			group = nil
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// bbolt grows a file by doubling it: what lies past the high water
	// mark of its last meta page is never read, and need not be damaged.
	var last meta
	for _, off := range []int{0, pageSize} {
		if m := readMeta(b[off+pageHeaderSize:]); m.valid && m.txid > last.txid {
			last = m
		}
	}
	return b[:last.pgid*uint64(pageSize)]
}

// TestDamagedFiles opens journals cut at many offsets, with random bytes
// changed, and files of other kinds, for a run and read-only: each Open
// either refuses the file with a one-line ErrCorrupt that names it, or
// works, and then the journal's every method returns, whatever it
// returns. Nothing panics, and nothing crashes the process (a fault in a
// goroutine of bbolt's would end the test binary).
func TestDamagedFiles(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(damageEnvSeed); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (%s=%d to replay it)", seed, damageEnvSeed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	whole := wholeJournal(t)
	t.Logf("the whole journal: %d bytes, %d pages", len(whole), len(whole)/pageSize)

	type damage struct {
		name string
		data []byte
	}
	var cases []damage
	for off := 0; off < len(whole); off += 2900 { // all over pages, on their bounds and between
		cases = append(cases, damage{fmt.Sprintf("cut at %d", off), whole[:off]})
	}
	for range 32 {
		off := rng.IntN(len(whole))
		cases = append(cases, damage{fmt.Sprintf("cut at %d", off), whole[:off]})
	}
	for i := range 240 {
		b := bytes.Clone(whole)
		var at []int
		for range 1 + rng.IntN(6) {
			off := rng.IntN(len(b))
			if i%2 == 0 { // a page's header or the start of its element table
				off = rng.IntN(len(b)/pageSize)*pageSize + rng.IntN(64)
			}
			b[off] ^= byte(1 + rng.IntN(255))
			at = append(at, off)
		}
		cases = append(cases, damage{fmt.Sprintf("bytes changed at %v", at), b})
	}
	noise := make([]byte, 3*pageSize)
	for i := range noise {
		noise[i] = byte(rng.Uint32())
	}
	png := append([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), noise...)
	cases = append(cases,
		damage{"a PNG", png},
		damage{"text", []byte(strings.Repeat("custom_id,answer\nreq-1,hello\n", 400))},
		damage{"random bytes", noise},
		damage{"one byte", []byte{0}},
		damage{"two pages of zeros", make([]byte, 2*pageSize)},
	)

	dir := t.TempDir()
	refused := 0
	for i, c := range cases {
		path := filepath.Join(dir, fmt.Sprintf("damaged-%d.journal", i))
		if err := os.WriteFile(path, c.data, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, readOnly := range []bool{true, false} { // the reader first: it changes nothing
			err := useDamaged(path, readOnly)
			switch {
			case err == nil:
			case errors.Is(err, errPanicked):
				t.Errorf("%s (read-only %v): %v", c.name, readOnly, err)
			case !errors.Is(err, ErrCorrupt):
				t.Errorf("%s (read-only %v): Open: %v; want ErrCorrupt", c.name, readOnly, err)
			case strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "corrupt"):
				t.Errorf("%s (read-only %v): Open: %q; want one line naming the file and saying it is corrupt", c.name, readOnly, err)
			default:
				refused++
			}
		}
	}
	t.Logf("%d damaged files, %d opens refused with ErrCorrupt", len(cases), refused)
	if refused < len(cases)/2 {
		t.Errorf("only %d of %d opens of damaged files refused them", refused, 2*len(cases))
	}
}

var errPanicked = errors.New("panicked")

// useDamaged opens the journal at path and, if it opens, calls each of
// its methods as a run (or a status reader) would. It returns Open's
// error, or errPanicked wrapped with the panic's value and stack.
func useDamaged(path string, readOnly bool) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v\n%s", errPanicked, r, debug.Stack())
		}
	}()
	ctx := context.Background()
	j, err := Open(path, Config{ReadOnly: readOnly, LockTimeout: -1})
	if err != nil {
		return err
	}
	defer j.Close()
	j.Counts(ctx)
	j.Outcomes(ctx, func(batch.Outcome) error { return nil })
	if readOnly {
		return nil
	}
	in := damagedInput()
	if j.Prepare(ctx, in, batch.Options{RetryFailed: true}) != nil {
		return nil
	}
	claims, _ := j.Claim(ctx, len(in.IDs))
	var outcomes []batch.Outcome
	for _, c := range claims {
		outcomes = append(outcomes, batch.Outcome{ID: c.ID, State: batch.Succeeded, Body: []byte("again")})
	}
	j.Record(ctx, outcomes)
	j.Counts(ctx)
	j.Outcomes(ctx, func(batch.Outcome) error { return nil })
	return nil
}

// TestADirectoryIsNotCorrupt: a path that is not a file is said to be
// so, not taken for a damaged journal, which an operator might delete.
func TestADirectoryIsNotCorrupt(t *testing.T) {
	dir := t.TempDir()
	for _, readOnly := range []bool{true, false} {
		_, err := Open(dir, Config{ReadOnly: readOnly})
		if err == nil || errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("Open of a directory (read-only %v): %v; want it said not to be a file", readOnly, err)
		}
	}
}

// TestAFileCutUnderTheJournal cuts the file of an open journal, as another
// program might: bbolt's reads of it fault. The journal's methods return
// ErrCorrupt from then on, without a crash and without waiting on the
// locks bbolt may hold, and Close returns.
func TestAFileCutUnderTheJournal(t *testing.T) {
	ctx := context.Background()
	j, path := newJournal(t, Config{})
	in := damagedInput()
	if err := j.Prepare(ctx, in, batch.Options{}); err != nil {
		t.Fatal(err)
	}
	claims, err := j.Claim(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	err = j.Record(ctx, []batch.Outcome{{ID: claims[0].ID, State: batch.Succeeded, Body: []byte("ok")}})
	if !errors.Is(err, ErrCorrupt) {
		t.Errorf("Record on a file cut short: %v; want ErrCorrupt", err)
	}
	if _, err := j.Claim(ctx, 1); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Claim after: %v; want ErrCorrupt", err)
	}
	if err := j.Outcomes(ctx, func(batch.Outcome) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Outcomes after: %v; want ErrCorrupt", err)
	}
	if err := j.Close(); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Close: %v; want ErrCorrupt", err)
	}
}
