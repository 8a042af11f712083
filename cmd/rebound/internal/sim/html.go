package sim

import (
	"bytes"
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Point is one (x, y) point of a Series.
type Point struct{ X, Y float64 }

// Series is one line, or one set of dots, of a Chart.
type Series struct {
	// Name names the series in the legend and in the points' tooltips.
	Name string
	// Color is a CSS colour. Empty means Palette(i), i being the series'
	// index in its chart.
	Color string
	// Points are drawn in this order; a point with a non-finite
	// coordinate (or, on a log axis, y ≤ 0) is left out. A series without
	// points appears only in the legend: a key for a style that other,
	// unlisted series share.
	Points []Point
	// Dashed draws a dashed line, DotsOnly a dot per point and no line;
	// otherwise a solid line.
	Dashed, DotsOnly bool
	// NoLegend leaves the series out of the legend.
	NoLegend bool
}

// Chart is a line chart: labelled axes with ticks, a grid, a legend.
type Chart struct {
	Title, XLabel, YLabel string
	// Caption, if set, is printed under the chart.
	Caption string
	// LogY draws the y axis on a logarithmic scale. A linear y axis
	// includes zero unless FitY fits it to the points alone.
	LogY, FitY bool
	Series     []Series
}

// palette is the Okabe–Ito palette for colour-blind readers, without its
// yellow (too pale on white), then a few darker tones.
var palette = []string{"#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000", "#8c564b", "#7f7f7f"}

// legendGrey is the colour of legend-only keys.
const legendGrey = "#555555"

// Palette returns the i-th colour of the charts' palette, which repeats
// after a few colours. Series that belong together (a measurement and
// its reference) share a colour by asking for the same i.
func Palette(i int) string {
	i %= len(palette)
	if i < 0 {
		i += len(palette)
	}
	return palette[i]
}

// pageStyle is the page's only styling. It holds no "<" or "&", so the
// page stays well-formed XML.
const pageStyle = `
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #222; background: #fff;
  max-width: 1000px; margin: 2rem auto; padding: 0 1rem; }
h1 { font-size: 1.35rem; font-weight: 600; }
figure { margin: 2rem 0; }
figcaption { font-size: 0.9rem; color: #555; margin-top: 0.4rem; }
svg { display: block; max-width: 100%; height: auto; }
svg text { font-size: 12px; fill: #333; }
svg .title { font-size: 15px; font-weight: 600; fill: #222; }
svg .label { font-size: 13px; }
svg .grid line { stroke: #e6e6e6; }
svg .axis line { stroke: #777; }
`

// WriteHTML writes a self-contained HTML page titled title with one inline
// SVG chart per chart. The page loads nothing (no scripts, fonts,
// stylesheets or images); every text is escaped; it is well-formed XML as
// well as HTML.
func WriteHTML(w io.Writer, title string, charts []Chart) error {
	var b bytes.Buffer
	b.WriteString("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n")
	b.WriteString("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\n")
	fmt.Fprintf(&b, "<title>%s</title>\n<style>%s</style>\n</head>\n<body>\n<h1>%s</h1>\n", esc(title), pageStyle, esc(title))
	for _, c := range charts {
		b.WriteString("<figure>\n")
		c.writeSVG(&b)
		if c.Caption != "" {
			fmt.Fprintf(&b, "<figcaption>%s</figcaption>\n", esc(c.Caption))
		}
		b.WriteString("</figure>\n")
	}
	b.WriteString("</body>\n</html>\n")
	_, err := w.Write(b.Bytes())
	return err
}

// esc escapes s for HTML text and attribute values.
func esc(s string) string { return html.EscapeString(s) }

// The chart's geometry, in SVG units (CSS pixels at full size).
const (
	plotW       = 560.0
	plotH       = 320.0
	marginLeft  = 80.0
	marginRight = 28.0
	marginTop   = 48.0
	marginBot   = 64.0
	legendLine  = 20.0 // height of a legend entry
	charWidth   = 7.0  // a generous mean width of a 12 px character
)

// axis maps data values to SVG coordinates along one axis.
type axis struct {
	lo, hi float64 // the range drawn, after transform
	log    bool
	ticks  []float64 // data values
	labels []string
}

func (a axis) transform(v float64) float64 {
	if a.log {
		return math.Log10(v)
	}
	return v
}

// frac is where v falls between the axis' ends, 0 to 1.
func (a axis) frac(v float64) float64 { return (a.transform(v) - a.lo) / (a.hi - a.lo) }

// drawable says whether the point can be drawn on these axes.
func drawable(p Point, y axis) bool {
	ok := !math.IsNaN(p.X) && !math.IsInf(p.X, 0) && !math.IsNaN(p.Y) && !math.IsInf(p.Y, 0)
	return ok && (!y.log || p.Y > 0)
}

// linearAxis covers [lo, hi] with about five round ticks.
func linearAxis(lo, hi float64) axis {
	if lo == hi {
		d := math.Abs(lo) / 2
		if d == 0 {
			d = 1
		}
		lo, hi = lo-d, hi+d
		if lo < 0 && lo+d >= 0 {
			lo = 0 // do not go below zero for a positive value
		}
	}
	step := niceStep((hi - lo) / 5)
	first, last := math.Floor(lo/step+1e-9), math.Ceil(hi/step-1e-9)
	decimals := max(0, int(-math.Floor(math.Log10(step)+1e-9)))
	a := axis{lo: first * step, hi: last * step}
	for i := first; i <= last; i++ {
		v := i * step
		if v == 0 {
			v = 0 // no "-0"
		}
		a.ticks = append(a.ticks, v)
		a.labels = append(a.labels, strconv.FormatFloat(v, 'f', decimals, 64))
	}
	return a
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	pow := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if x <= m*pow*(1+1e-9) {
			return m * pow
		}
	}
	return 10 * pow
}

// logAxis covers [lo, hi], both positive, from a 1-2-5 value below to one
// above, ticked at 1, 2 and 5 times the powers of ten (at the powers
// alone past three decades).
func logAxis(lo, hi float64) axis {
	if lo == hi {
		lo, hi = lo/2, hi*2
	}
	var steps []float64
	for e := math.Floor(math.Log10(lo)) - 1; e <= math.Ceil(math.Log10(hi))+1; e++ {
		pow := math.Pow(10, e)
		steps = append(steps, pow, 2*pow, 5*pow)
	}
	first := 0
	for first+1 < len(steps) && steps[first+1] <= lo*(1+1e-9) {
		first++
	}
	last := len(steps) - 1
	for last-1 >= 0 && steps[last-1] >= hi*(1-1e-9) {
		last--
	}
	a := axis{lo: math.Log10(steps[first]), hi: math.Log10(steps[last]), log: true}
	decades := a.hi - a.lo
	for _, v := range steps[first : last+1] {
		if decades > 3 && math.Abs(math.Log10(v)-math.Round(math.Log10(v))) > 1e-9 {
			continue
		}
		a.ticks = append(a.ticks, v)
		a.labels = append(a.labels, strconv.FormatFloat(v, 'g', -1, 64))
	}
	return a
}

// axes returns the chart's x and y axes, fitted to its points.
func (c Chart) axes() (x, y axis) {
	xlo, xhi, ylo, yhi := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	probe := axis{log: c.LogY}
	for _, s := range c.Series {
		for _, p := range s.Points {
			if !drawable(p, probe) {
				continue
			}
			xlo, xhi = min(xlo, p.X), max(xhi, p.X)
			ylo, yhi = min(ylo, p.Y), max(yhi, p.Y)
		}
	}
	if math.IsInf(xlo, 0) { // nothing to draw
		xlo, xhi, ylo, yhi = 0, 1, 1, 1
		if !c.LogY {
			ylo = 0
		}
	}
	x = linearAxis(xlo, xhi)
	if c.LogY {
		return x, logAxis(ylo, yhi)
	}
	if !c.FitY {
		ylo, yhi = min(ylo, 0), max(yhi, 0)
	}
	return x, linearAxis(ylo, yhi)
}

// legend returns the series that the legend lists.
func (c Chart) legend() []int {
	var in []int
	for i, s := range c.Series {
		if !s.NoLegend && s.Name != "" {
			in = append(in, i)
		}
	}
	return in
}

// num formats a coordinate.
func num(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// value formats a data value for a tooltip.
func value(v float64) string {
	if math.Abs(v) >= 1000 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// plot is where a chart's plot sits in its <svg>, and how its values map
// to it.
type plot struct {
	x, y                     axis
	left, top, right, bottom float64
}

func (p plot) px(v float64) float64 { return p.left + p.x.frac(v)*plotW }
func (p plot) py(v float64) float64 { return p.bottom - p.y.frac(v)*plotH }

// writeSVG writes the chart as one <svg> element.
func (c Chart) writeSVG(b *bytes.Buffer) {
	x, y := c.axes()
	legend := c.legend()
	legendW := 0.0
	for _, i := range legend {
		legendW = max(legendW, 44+charWidth*float64(utf8.RuneCountInString(c.Series[i].Name)))
	}
	width := marginLeft + plotW + marginRight + legendW
	height := marginTop + plotH + marginBot
	height = max(height, marginTop+float64(len(legend))*legendLine+marginBot)
	p := plot{x: x, y: y, left: marginLeft, top: marginTop, right: marginLeft + plotW, bottom: marginTop + plotH}

	fmt.Fprintf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %s %s\" width=\"%s\" height=\"%s\" role=\"img\" aria-label=\"%s\">\n",
		num(width), num(height), num(width), num(height), esc(c.Title))
	fmt.Fprintf(b, "<text class=\"title\" x=\"%s\" y=\"26\">%s</text>\n", num(p.left), esc(c.Title))
	c.writeAxes(b, p)
	// The series: lines first, so that dots sit on top of them.
	for i, s := range c.Series {
		if !s.DotsOnly {
			c.writeSeries(b, p, i)
		}
	}
	for i, s := range c.Series {
		if s.DotsOnly {
			c.writeSeries(b, p, i)
		}
	}
	c.writeLegend(b, p, legend)
	b.WriteString("</svg>\n")
}

// writeAxes writes the grid, the axes, their ticks and their labels.
func (c Chart) writeAxes(b *bytes.Buffer, p plot) {
	line := func(x1, y1, x2, y2 float64) {
		fmt.Fprintf(b, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\"/>\n", num(x1), num(y1), num(x2), num(y2))
	}
	b.WriteString("<g class=\"grid\">\n")
	for _, v := range p.y.ticks {
		line(p.left, p.py(v), p.right, p.py(v))
	}
	for _, v := range p.x.ticks {
		line(p.px(v), p.top, p.px(v), p.bottom)
	}
	b.WriteString("</g>\n<g class=\"axis\">\n")
	line(p.left, p.bottom, p.right, p.bottom)
	line(p.left, p.top, p.left, p.bottom)
	for i, v := range p.x.ticks {
		line(p.px(v), p.bottom, p.px(v), p.bottom+5)
		fmt.Fprintf(b, "<text x=\"%s\" y=\"%s\" text-anchor=\"middle\">%s</text>\n", num(p.px(v)), num(p.bottom+20), esc(p.x.labels[i]))
	}
	for i, v := range p.y.ticks {
		line(p.left-5, p.py(v), p.left, p.py(v))
		fmt.Fprintf(b, "<text x=\"%s\" y=\"%s\" text-anchor=\"end\">%s</text>\n", num(p.left-9), num(p.py(v)+4), esc(p.y.labels[i]))
	}
	fmt.Fprintf(b, "<text class=\"label\" x=\"%s\" y=\"%s\" text-anchor=\"middle\">%s</text>\n",
		num(p.left+plotW/2), num(p.bottom+48), esc(c.XLabel))
	fmt.Fprintf(b, "<text class=\"label\" transform=\"translate(%s %s) rotate(-90)\" text-anchor=\"middle\">%s</text>\n",
		num(20), num(p.top+plotH/2), esc(c.YLabel))
	b.WriteString("</g>\n")
}

// color returns series i's colour.
func (c Chart) color(i int) string {
	if color := c.Series[i].Color; color != "" {
		return color
	}
	return Palette(i)
}

// writeSeries writes series i: its line, and its dots or the invisible
// targets of its tooltips.
func (c Chart) writeSeries(b *bytes.Buffer, p plot, i int) {
	s := c.Series[i]
	color := c.color(i)
	var pts []Point
	for _, pt := range s.Points {
		if drawable(pt, p.y) {
			pts = append(pts, pt)
		}
	}
	if len(pts) == 0 {
		return
	}
	fmt.Fprintf(b, "<g class=\"series\">\n<title>%s</title>\n", esc(s.Name))
	if !s.DotsOnly {
		fmt.Fprintf(b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" stroke-linejoin=\"round\"%s points=\"", esc(color), dash(s))
		for k, pt := range pts {
			if k > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(b, "%s,%s", num(p.px(pt.X)), num(p.py(pt.Y)))
		}
		b.WriteString("\"/>\n")
	}
	// Dots, or for a solid line invisible targets for the tooltips. A
	// dashed line is a reference curve, drawn without them.
	if s.DotsOnly || !s.Dashed {
		fill := " fill-opacity=\"0\""
		r := 5.0
		if s.DotsOnly {
			fill, r = " stroke=\"#fff\" stroke-width=\"1.5\"", 4.5
		}
		for _, pt := range pts {
			fmt.Fprintf(b, "<circle cx=\"%s\" cy=\"%s\" r=\"%s\" fill=\"%s\"%s><title>%s: %s, %s</title></circle>\n",
				num(p.px(pt.X)), num(p.py(pt.Y)), num(r), esc(color), fill, esc(s.Name), value(pt.X), value(pt.Y))
		}
	}
	b.WriteString("</g>\n")
}

// dash is the stroke attribute of a dashed series' line, or none.
func dash(s Series) string {
	if s.Dashed {
		return " stroke-dasharray=\"7 5\""
	}
	return ""
}

// writeLegend writes the legend of the series listed, right of the plot.
func (c Chart) writeLegend(b *bytes.Buffer, p plot, legend []int) {
	if len(legend) == 0 {
		return
	}
	lx := p.right + 24
	b.WriteString("<g class=\"legend\">\n")
	for k, i := range legend {
		s := c.Series[i]
		color := c.color(i)
		ly := p.top + 8 + float64(k)*legendLine
		if s.DotsOnly {
			fmt.Fprintf(b, "<circle cx=\"%s\" cy=\"%s\" r=\"4.5\" fill=\"%s\"/>\n", num(lx+12), num(ly), esc(color))
		} else {
			fmt.Fprintf(b, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"%s\" stroke-width=\"2\"%s/>\n",
				num(lx), num(ly), num(lx+26), num(ly), esc(color), dash(s))
		}
		fmt.Fprintf(b, "<text x=\"%s\" y=\"%s\">%s</text>\n", num(lx+34), num(ly+4), esc(s.Name))
	}
	b.WriteString("</g>\n")
}

// Charts draws the report for WriteHTML: the mean writes and the mean
// completion time against the number of clients, a line per strategy,
// with Brooker's published figures as dots of the same colour.
func (r OCCReport) Charts() []Chart {
	var strategies []string
	for _, res := range r.Results {
		if !slices.Contains(strategies, res.Strategy) {
			strategies = append(strategies, res.Strategy)
		}
	}
	writes := Chart{
		Title:   "Writes against clients",
		XLabel:  "N, clients",
		YLabel:  "writes per trial",
		Caption: "Lines: rebound sim. Dots: Brooker's published figures (\"Exponential Backoff and Jitter\", AWS Architecture Blog, 2015).",
	}
	completion := Chart{
		Title:   "Completion time against clients",
		XLabel:  "N, clients",
		YLabel:  "completion time (s, log scale)",
		Caption: "Lines: rebound sim. Dots: Brooker's published figures. The last client's success, in virtual time.",
		LogY:    true,
	}
	for i, s := range strategies {
		color := Palette(i)
		var ourW, ourC, pubW, pubC []Point
		for _, res := range r.Results {
			if res.Strategy != s {
				continue
			}
			n := float64(res.Clients)
			ourW = append(ourW, Point{n, res.Writes})
			ourC = append(ourC, Point{n, res.CompletionMS / 1000})
			if f, ok := OCCPublished(s, res.Clients); ok {
				pubW = append(pubW, Point{n, f.Writes})
				pubC = append(pubC, Point{n, f.Completion.Seconds()})
			}
		}
		writes.Series = append(writes.Series,
			Series{Name: s, Color: color, Points: ourW},
			Series{Name: s + ", published", Color: color, Points: pubW, DotsOnly: true, NoLegend: true})
		completion.Series = append(completion.Series,
			Series{Name: s, Color: color, Points: ourC},
			Series{Name: s + ", published", Color: color, Points: pubC, DotsOnly: true, NoLegend: true})
	}
	published := Series{Name: "published (Brooker)", Color: legendGrey, DotsOnly: true}
	writes.Series = append(writes.Series, published)
	completion.Series = append(completion.Series, published)
	return []Chart{writes, completion}
}
