package cost

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf16"
)

// maxBody is the most of a request body that is read for what it may
// cost; a larger one cannot be.
const maxBody = 64 << 20

// decodedBody reads a request body encoded in turn by the codings of
// encodings, the values of its Content-Encoding headers, and returns it
// decoded: up to maxBody bytes, the codings HTTP names for gzip and
// deflate (zlib) alone.
func decodedBody(rc io.Reader, encodings []string) ([]byte, error) {
	var codings []string
	for _, v := range encodings {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.ToLower(strings.TrimSpace(c)); c != "" && c != "identity" {
				codings = append(codings, c)
			}
		}
	}
	r := rc
	for _, c := range slices.Backward(codings) { // the last applied is undone first
		var err error
		switch c {
		case "gzip", "x-gzip":
			r, err = gzip.NewReader(r)
		case "deflate":
			r, err = zlib.NewReader(r)
		default:
			return nil, fmt.Errorf("it is encoded as %q", c)
		}
		if err != nil {
			return nil, fmt.Errorf("decoding it as %s: %w", c, err)
		}
	}
	body, err := io.ReadAll(io.LimitReader(r, maxBody+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("reading it: %w", err)
	case len(body) > maxBody:
		return nil, fmt.Errorf("it is larger than %d MiB", maxBody>>20)
	}
	return body, nil
}

// pythonText returns body as Python's json.loads reads bytes, in JSON's
// UTF-8: decoded from UTF-16 or UTF-32, or with its byte order mark
// dropped (each detected as Python detects it), and with the NaN,
// Infinity and -Infinity it takes for numbers made null and numbers too
// large for any count. exact says it is body as it was.
func pythonText(body []byte) (text []byte, exact bool) {
	b := body
	switch {
	case bytes.HasPrefix(b, []byte{0, 0, 0xfe, 0xff}), bytes.HasPrefix(b, []byte{0xff, 0xfe, 0, 0}):
		text = decodeUTF32(b[4:], b[0] == 0)
	case bytes.HasPrefix(b, []byte{0xfe, 0xff}), bytes.HasPrefix(b, []byte{0xff, 0xfe}):
		text = decodeUTF16(b[2:], b[0] == 0xfe)
	case bytes.HasPrefix(b, []byte{0xef, 0xbb, 0xbf}):
		text = b[3:]
	case len(b) >= 4 && b[0] == 0 && b[1] != 0, len(b) == 2 && b[0] == 0:
		text = decodeUTF16(b, true)
	case len(b) >= 4 && b[0] == 0:
		text = decodeUTF32(b, true)
	case len(b) >= 4 && b[1] == 0 && (b[2] != 0 || b[3] != 0), len(b) == 2 && b[1] == 0:
		text = decodeUTF16(b, false)
	case len(b) >= 4 && b[1] == 0:
		text = decodeUTF32(b, false)
	default:
		text, exact = b, true
	}
	if !bytes.Contains(text, []byte("NaN")) && !bytes.Contains(text, []byte("Infinity")) {
		return text, exact
	}
	var out []byte
	copied := 0 // text[:copied] is in out
	inString, escaped := false, false
	for i := 0; i < len(text); i++ {
		c := text[i]
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		var word, number string
		switch rest := text[i:]; {
		case c == '"':
			inString = true
			continue
		case bytes.HasPrefix(rest, []byte("NaN")):
			word, number = "NaN", "null"
		case bytes.HasPrefix(rest, []byte("-Infinity")):
			word, number = "-Infinity", "-1e999"
		case bytes.HasPrefix(rest, []byte("Infinity")):
			word, number = "Infinity", "1e999"
		default:
			continue
		}
		out = append(append(out, text[copied:i]...), number...)
		i += len(word) - 1
		copied = i + 1
	}
	if out == nil {
		return text, exact
	}
	return append(out, text[copied:]...), false
}

// decodeUTF16 returns b, UTF-16 text, in UTF-8.
func decodeUTF16(b []byte, bigEndian bool) []byte {
	units := make([]uint16, len(b)/2)
	for i := range units {
		if bigEndian {
			units[i] = uint16(b[2*i])<<8 | uint16(b[2*i+1])
		} else {
			units[i] = uint16(b[2*i+1])<<8 | uint16(b[2*i])
		}
	}
	return []byte(string(utf16.Decode(units)))
}

// decodeUTF32 returns b, UTF-32 text, in UTF-8.
func decodeUTF32(b []byte, bigEndian bool) []byte {
	runes := make([]rune, len(b)/4)
	for i := range runes {
		w := b[4*i : 4*i+4]
		if bigEndian {
			runes[i] = rune(uint32(w[0])<<24 | uint32(w[1])<<16 | uint32(w[2])<<8 | uint32(w[3]))
		} else {
			runes[i] = rune(uint32(w[3])<<24 | uint32(w[2])<<16 | uint32(w[1])<<8 | uint32(w[0]))
		}
	}
	return []byte(string(runes))
}
