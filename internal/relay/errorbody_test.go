package relay

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

func TestReadAtMost(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789"), 100) // 1000 bytes
	broken := errors.New("broken")
	for _, c := range []struct {
		name string
		r    io.Reader
		n    int
		size int64
		want int
		err  error
	}{
		{"whole, length unknown", bytes.NewReader(body), 4096, -1, 1000, nil},
		{"whole, length known", bytes.NewReader(body), 4096, 1000, 1000, nil},
		{"length understated", bytes.NewReader(body), 4096, 10, 1000, nil},
		{"length overstated", bytes.NewReader(body), 4096, 3000, 1000, nil},
		{"cut at n", bytes.NewReader(body), 300, -1, 300, nil},
		{"cut at n, length known", bytes.NewReader(body), 300, 1000, 300, nil},
		{"a byte at a time", iotest.OneByteReader(bytes.NewReader(body)), 4096, -1, 1000, nil},
		{"broken", io.MultiReader(bytes.NewReader(body[:10]), iotest.ErrReader(broken)), 4096, 1000, 10, broken},
		{"empty", bytes.NewReader(nil), 4096, 0, 0, nil},
	} {
		got, err := readAtMost(c.r, c.n, c.size)
		if len(got) != c.want || !bytes.Equal(got, body[:c.want]) || !errors.Is(err, c.err) {
			t.Errorf("%s: %d bytes, %v; want %d, %v", c.name, len(got), err, c.want, c.err)
		}
		if cap(got) > max(2*c.want, 4097) {
			t.Errorf("%s: capacity %d for %d bytes", c.name, cap(got), len(got))
		}
	}
}
