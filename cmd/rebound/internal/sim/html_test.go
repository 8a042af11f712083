package sim

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// page is what checkPage learns of a page.
type page struct {
	svgs     int
	elements map[string]int
	// legends holds the texts of each chart's legend; texts all texts.
	legends [][]string
	texts   []string
}

// checkPage parses an HTML page as strict XML, which WriteHTML promises,
// and fails the test if it loads or runs anything.
func checkPage(t *testing.T, html string) page {
	t.Helper()
	if !strings.HasPrefix(html, "<!DOCTYPE html>\n") {
		t.Errorf("page does not start with a doctype: %.40q", html)
	}
	for _, url := range regexp.MustCompile(`(?i)\w+://[^\s"'<>]*`).FindAllString(html, -1) {
		if url != "http://www.w3.org/2000/svg" {
			t.Errorf("page holds the URL %q", url)
		}
	}
	for _, bad := range []string{"url(", "@import", "@font-face", "javascript:"} {
		if strings.Contains(strings.ToLower(html), bad) {
			t.Errorf("page holds %q", bad)
		}
	}
	p := page{elements: map[string]int{}}
	dec := xml.NewDecoder(strings.NewReader(html))
	var stack []string
	inLegend := -1 // depth of the open legend group
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("page is not well-formed: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			stack = append(stack, tok.Name.Local)
			p.elements[tok.Name.Local]++
			if tok.Name.Local == "svg" {
				p.svgs++
				p.legends = append(p.legends, nil)
			}
			for _, a := range tok.Attr {
				if a.Name.Local == "class" && a.Value == "legend" {
					inLegend = len(stack)
				}
				if name := strings.ToLower(a.Name.Local); name == "href" || name == "src" || strings.HasPrefix(name, "on") {
					t.Errorf("<%s> has the attribute %s=%q", tok.Name.Local, a.Name.Local, a.Value)
				}
			}
		case xml.EndElement:
			if len(stack) == inLegend {
				inLegend = -1
			}
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 && stack[len(stack)-1] == "text" {
				p.texts = append(p.texts, string(tok))
				if inLegend >= 0 {
					p.legends[len(p.legends)-1] = append(p.legends[len(p.legends)-1], string(tok))
				}
			}
		}
	}
	if len(stack) != 0 {
		t.Errorf("unclosed elements %v", stack)
	}
	for _, el := range []string{"script", "link", "img", "iframe", "object", "embed", "image", "use", "foreignObject"} {
		if p.elements[el] > 0 {
			t.Errorf("page holds <%s>", el)
		}
	}
	return p
}

func TestWriteHTML(t *testing.T) {
	hostile := `<script>alert("x")</script> & 'q'`
	charts := []Chart{
		{
			Title: "Writes " + hostile, XLabel: "N", YLabel: "writes", Caption: "caption " + hostile,
			Series: []Series{
				{Name: "ours " + hostile, Points: []Point{{10, 50}, {20, 150}, {math.NaN(), 3}, {50, 622}}},
				{Name: "theirs", Points: []Point{{10, 48}, {50, 600}}, DotsOnly: true, Color: `"red" onload="x"`},
				{Name: "hidden", Points: []Point{{10, 1}, {50, 2}}, Dashed: true, NoLegend: true},
				{Name: "key only", Dashed: true},
			},
		},
		{Title: "log", LogY: true, Series: []Series{{Name: "a", Points: []Point{{0, 0}, {1, 0.4}, {2, 100.9}}}}},
		{Title: "empty"},
	}
	var b bytes.Buffer
	if err := WriteHTML(&b, "Title "+hostile, charts); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	p := checkPage(t, html)
	if p.svgs != len(charts) {
		t.Errorf("%d <svg> elements for %d charts", p.svgs, len(charts))
	}
	if strings.Contains(html, "<script>") || !strings.Contains(html, "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; &#39;q&#39;") {
		t.Error("text is not escaped")
	}
	if p.elements["figcaption"] != 1 || p.elements["h1"] != 1 || p.elements["title"] < 1 || p.elements["style"] != 1 {
		t.Errorf("page structure %v", p.elements)
	}
	if want := []string{"ours " + hostile, "theirs", "key only"}; !slices.Equal(p.legends[0], want) {
		t.Errorf("legend %q, want %q", p.legends[0], want)
	}
	if p.legends[2] != nil {
		t.Errorf("an empty chart has the legend %q", p.legends[2])
	}
	for _, want := range []string{"0", "200", "400", "600", "800", "N", "writes", "0.2", "200"} {
		if !slices.Contains(p.texts, want) {
			t.Errorf("no text %q among %q", want, p.texts)
		}
	}
	// The NaN point and, on the log axis, the zero are left out.
	if strings.Contains(html, "NaN") || strings.Contains(html, "Inf") {
		t.Error("page holds a non-finite coordinate")
	}
	if err := WriteHTML(failingWriter{}, "t", charts); err == nil {
		t.Error("a failed write was not reported")
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestAxes(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		log    bool
		want   []string
	}{
		{0, 0.5, false, []string{"0.0", "0.1", "0.2", "0.3", "0.4", "0.5"}},
		{0, 8009, false, []string{"0", "2000", "4000", "6000", "8000", "10000"}},
		{10, 190, false, []string{"0", "50", "100", "150", "200"}},
		{1, 1.9746, false, []string{"1.0", "1.2", "1.4", "1.6", "1.8", "2.0"}},
		{0.35, 0.35, false, []string{"0.1", "0.2", "0.3", "0.4", "0.5", "0.6"}},
		{0, 0, false, []string{"0.0", "0.2", "0.4", "0.6", "0.8", "1.0"}},
		{0.38, 100.9, true, []string{"0.2", "0.5", "1", "2", "5", "10", "20", "50", "100", "200"}},
		{1, 100000, true, []string{"1", "10", "100", "1000", "10000", "100000"}},
	} {
		var a axis
		if tc.log {
			a = logAxis(tc.lo, tc.hi)
		} else {
			a = linearAxis(tc.lo, tc.hi)
		}
		if !slices.Equal(a.labels, tc.want) {
			t.Errorf("axis over [%v, %v] (log %v): ticks %q, want %q", tc.lo, tc.hi, tc.log, a.labels, tc.want)
		}
		if f := a.frac(tc.lo); f < -1e-9 || f > 1 {
			t.Errorf("axis over [%v, %v]: the low end falls at %v", tc.lo, tc.hi, f)
		}
		if f := a.frac(tc.hi); f < 0 || f > 1+1e-9 {
			t.Errorf("axis over [%v, %v]: the high end falls at %v", tc.lo, tc.hi, f)
		}
	}
}

func TestOCCCharts(t *testing.T) {
	r := OCCReport{Scenario: "occ", Seed: 1, Trials: 1, Results: []OCCResult{
		{Strategy: OCCFull, Clients: 10, Writes: 40, CompletionMS: 450},
		{Strategy: OCCFull, Clients: 15, Writes: 60, CompletionMS: 700},
		{Strategy: OCCNone, Clients: 10, Writes: 50, CompletionMS: 380},
	}}
	charts := r.Charts()
	if len(charts) != 2 {
		t.Fatalf("%d charts, want writes and completion", len(charts))
	}
	for _, c := range charts {
		// Per strategy a line and the published dots, then the legend's key
		// for the dots.
		if len(c.Series) != 5 {
			t.Fatalf("%s: %d series", c.Title, len(c.Series))
		}
		full, fullPub, none := c.Series[0], c.Series[1], c.Series[2]
		if full.Name != OCCFull || full.DotsOnly || len(full.Points) != 2 || none.Name != OCCNone {
			t.Errorf("%s: lines %+v, %+v", c.Title, full, none)
		}
		// Brooker published no figure for 15 clients.
		if !fullPub.DotsOnly || !fullPub.NoLegend || fullPub.Color != full.Color || len(fullPub.Points) != 1 {
			t.Errorf("%s: published dots %+v", c.Title, fullPub)
		}
		if full.Color == none.Color {
			t.Errorf("%s: two strategies share the colour %s", c.Title, full.Color)
		}
	}
	if got := charts[0].Series[1].Points[0]; got != (Point{10, 39}) {
		t.Errorf("published writes of full at 10: %v", got)
	}
	if got := charts[1].Series[0].Points[1]; got != (Point{15, 0.7}) {
		t.Errorf("completion of full at 15: %v, want seconds", got)
	}
	var b bytes.Buffer
	if err := WriteHTML(&b, "occ", charts); err != nil {
		t.Fatal(err)
	}
	if p := checkPage(t, b.String()); p.svgs != 2 || !slices.Equal(p.legends[0], []string{"full", "none", "published (Brooker)"}) {
		t.Errorf("%d charts, legend %q", p.svgs, p.legends)
	}
}
