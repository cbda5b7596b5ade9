package report

import (
	"bufio"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// Plot files, without their .png and .svg extensions.
const (
	PlotAttainment = "attainment"    // attainment against offered rate, one line per arm
	PlotPrefill    = "prefill_share" // prefill engines over time against the prefill share of arriving work
	PlotTTFT       = "ttft_cdf"      // TTFT CDF per arm
	PlotTPOT       = "tpot_cdf"      // TPOT CDF per arm
	PlotMoves      = "moves"         // timeline of role moves per arm
)

// PlotDPI is the resolution of the PNG files.
const PlotDPI = 110

// RateError says a plot rate is not among the swept rates.
type RateError struct {
	Rate  float64
	Rates []float64
}

func (e *RateError) Error() string {
	rs := make([]string, len(e.Rates))
	for i, v := range e.Rates {
		rs[i] = strconv.FormatFloat(v, 'g', -1, 64)
	}
	return fmt.Sprintf("plot rate %s req/s: no run at that rate (rates here: %s)", strconv.FormatFloat(e.Rate, 'g', -1, 64), strings.Join(rs, ", "))
}

// PlotRate finds the swept rate a user means: the rate itself, or the one
// swept rate that prints as it does in the report (four significant
// digits, as the tables print rates) or lies within 0.5% of it; a
// *RateError when none or several do.
func (r *Report) PlotRate(rate float64) (float64, error) {
	rates := r.rates()
	for _, v := range rates {
		if v == rate || math.Abs(v-rate) <= 1e-9*math.Max(1, math.Abs(v)) {
			return v, nil
		}
	}
	var near []float64
	for _, v := range rates {
		if fmtRate(v) == fmtRate(rate) || math.Abs(v-rate) <= 0.005*v {
			near = append(near, v)
		}
	}
	if len(near) == 1 {
		return near[0], nil
	}
	return 0, &RateError{Rate: rate, Rates: rates}
}

// DefaultPlotRate is the rate the per-arm plots show when none is asked
// for: the highest rate at which the best arm other than the oracle still
// has attainment >= 50% (so the plots show an arm under stress, not
// collapsed), else the lowest rate. It reports false when there are no
// runs.
func (r *Report) DefaultPlotRate() (float64, bool) {
	rates := r.rates()
	if len(rates) == 0 {
		return 0, false
	}
	for k := len(rates) - 1; k >= 0; k-- {
		best := -1.0
		for i := range r.Runs {
			if x := &r.Runs[i]; x.Rate == rates[k] && x.Arm != OracleArm {
				best = math.Max(best, x.Attainment)
			}
		}
		if best >= 0.5 {
			return rates[k], true
		}
	}
	return rates[0], true
}

// Plot writes the five plots as PNG and SVG files into dir (created when
// missing) and returns the files written, in order. The per-arm plots
// (prefill share, CDFs, moves) show the runs at rate, which must be one of
// the swept rates (else a *RateError). The same report gives
// byte-identical files.
func (r *Report) Plot(dir string, rate float64) ([]string, error) {
	if len(r.Runs) == 0 {
		return nil, fmt.Errorf("plots: no runs")
	}
	rate, err := r.PlotRate(rate)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("plots: %w", err)
	}
	figs := []struct {
		name string
		w, h vg.Length
		draw func(draw.Canvas)
	}{
		{PlotAttainment, 22 * vg.Centimeter, 15 * vg.Centimeter, r.drawAttainment},
		{PlotPrefill, r.prefillWidth(rate), r.prefillHeight(rate), func(c draw.Canvas) { r.drawPrefill(c, rate) }},
		{PlotTTFT, 20 * vg.Centimeter, 11 * vg.Centimeter, func(c draw.Canvas) { r.drawCDF(c, rate, false) }},
		{PlotTPOT, 20 * vg.Centimeter, 11 * vg.Centimeter, func(c draw.Canvas) { r.drawCDF(c, rate, true) }},
		{PlotMoves, 24 * vg.Centimeter, r.movesHeight(rate), func(c draw.Canvas) { r.drawMoves(c, rate) }},
	}
	var files []string
	for _, f := range figs {
		out, err := render(dir, f.name, f.w, f.h, f.draw)
		files = append(files, out...)
		if err != nil {
			return files, fmt.Errorf("plots: %w", err)
		}
	}
	return files, nil
}

// render draws a figure twice, onto a PNG and an SVG canvas, and writes
// both files.
func render(dir, name string, w, h vg.Length, fn func(draw.Canvas)) ([]string, error) {
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(PlotDPI), vgimg.UseBackgroundColor(color.White))
	fn(draw.New(img))
	png := filepath.Join(dir, name+".png")
	if err := writeFile(png, vgimg.PngCanvas{Canvas: img}); err != nil {
		return nil, err
	}
	svg := vgsvg.New(w, h)
	dc := draw.New(svg)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	fn(dc)
	svgPath := filepath.Join(dir, name+".svg")
	if err := writeFile(svgPath, svg); err != nil {
		return []string{png}, err
	}
	return []string{png, svgPath}, nil
}

func writeFile(path string, c io.WriterTo) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(f)
	_, err = c.WriteTo(bw)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Styles.

var sansFont = font.Font{Typeface: "Liberation", Variant: "Sans"}

func textStyle(size vg.Length) text.Style {
	return text.Style{Color: color.Black, Font: font.From(sansFont, size), Handler: plot.DefaultTextHandler}
}

// armPalette colours the arms in Report.Arms order (the oracle is always
// black): 16 colours, so up to 16 arms besides the oracle never share one;
// each arm also gets its own glyph (armGlyphs), so colour and marker both
// tell arms apart. Past 16, colours repeat (with other glyphs).
var armPalette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, // blue
	{0xff, 0x7f, 0x0e, 0xff}, // orange
	{0x2c, 0xa0, 0x2c, 0xff}, // green
	{0xd6, 0x27, 0x28, 0xff}, // red
	{0x94, 0x67, 0xbd, 0xff}, // purple
	{0x8c, 0x56, 0x4b, 0xff}, // brown
	{0xe3, 0x77, 0xc2, 0xff}, // pink
	{0x17, 0xbe, 0xcf, 0xff}, // cyan
	{0xbc, 0xbd, 0x22, 0xff}, // olive
	{0x1a, 0x23, 0x7e, 0xff}, // navy
	{0xff, 0xb3, 0x00, 0xff}, // amber
	{0x00, 0x69, 0x5c, 0xff}, // teal
	{0x88, 0x0e, 0x4f, 0xff}, // plum
	{0x7f, 0x7f, 0x7f, 0xff}, // grey
	{0x64, 0xdd, 0x17, 0xff}, // lime
	{0x80, 0x00, 0x00, 0xff}, // maroon
}

// armGlyphs are 16 distinct markers: filled and open circles, squares,
// triangles up and down, diamonds, pentagons and hexagons.
var armGlyphs = []draw.GlyphDrawer{
	draw.CircleGlyph{}, draw.SquareGlyph{}, draw.PyramidGlyph{}, downTriangle{},
	polyGlyph{sides: 4, rot: math.Pi / 4, filled: true}, polyGlyph{sides: 5, filled: true}, polyGlyph{sides: 6, filled: true},
	draw.CrossGlyph{}, draw.RingGlyph{}, draw.BoxGlyph{}, draw.TriangleGlyph{},
	polyGlyph{sides: 3, rot: math.Pi}, polyGlyph{sides: 4, rot: math.Pi / 4}, polyGlyph{sides: 5}, polyGlyph{sides: 6},
	draw.PlusGlyph{},
}

// polyGlyph is a regular polygon with its first vertex up (turned by rot),
// filled or drawn as an outline.
type polyGlyph struct {
	sides  int
	rot    float64
	filled bool
}

// DrawGlyph implements draw.GlyphDrawer.
func (g polyGlyph) DrawGlyph(c *draw.Canvas, sty draw.GlyphStyle, pt vg.Point) {
	var p vg.Path
	r := float64(sty.Radius) * 1.15
	for i := 0; i < g.sides; i++ {
		a := math.Pi/2 + g.rot + 2*math.Pi*float64(i)/float64(g.sides)
		q := vg.Point{X: pt.X + vg.Length(r*math.Cos(a)), Y: pt.Y + vg.Length(r*math.Sin(a))}
		if i == 0 {
			p.Move(q)
		} else {
			p.Line(q)
		}
	}
	p.Close()
	if g.filled {
		c.SetColor(sty.Color)
		c.Fill(p)
		return
	}
	c.SetLineStyle(draw.LineStyle{Color: sty.Color, Width: vg.Points(1.2)})
	c.Stroke(p)
}

// armStyle returns arm i's line and glyph styles.
func (r *Report) armStyle(i int) (draw.LineStyle, draw.GlyphStyle) {
	ls := draw.LineStyle{Width: vg.Points(1.6)}
	gs := draw.GlyphStyle{Radius: vg.Points(3), Shape: armGlyphs[i%len(armGlyphs)]}
	if r.Arms[i].Arm == OracleArm {
		ls.Color, ls.Dashes = color.Black, []vg.Length{vg.Points(5), vg.Points(3)}
		gs.Color, gs.Shape = color.Black, draw.CrossGlyph{}
		return ls, gs
	}
	k := 0 // the arm's index among non-oracle arms
	for j := 0; j < i; j++ {
		if r.Arms[j].Arm != OracleArm {
			k++
		}
	}
	c := armPalette[k%len(armPalette)]
	ls.Color, gs.Color = c, c
	gs.Shape = armGlyphs[k%len(armGlyphs)]
	return ls, gs
}

// downTriangle is a filled triangle pointing down.
type downTriangle struct{}

// DrawGlyph implements draw.GlyphDrawer.
func (downTriangle) DrawGlyph(c *draw.Canvas, sty draw.GlyphStyle, pt vg.Point) {
	c.SetColor(sty.Color)
	r := sty.Radius + (sty.Radius-sty.Radius*vg.Length(math.Sin(math.Pi/6)))/2
	var p vg.Path
	p.Move(vg.Point{X: pt.X, Y: pt.Y - r})
	p.Line(vg.Point{X: pt.X - r*vg.Length(math.Cos(math.Pi/6)), Y: pt.Y + r*vg.Length(math.Sin(math.Pi/6))})
	p.Line(vg.Point{X: pt.X + r*vg.Length(math.Cos(math.Pi/6)), Y: pt.Y + r*vg.Length(math.Sin(math.Pi/6))})
	p.Close()
	c.Fill(p)
}

// newPlot returns a plot with sans-serif text of readable sizes.
func newPlot(title, xlabel, ylabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle = textStyle(12)
	p.Title.TextStyle.XAlign, p.Title.TextStyle.YAlign = draw.XCenter, draw.YTop
	p.Title.Padding = vg.Points(6)
	p.X.Label.Text, p.Y.Label.Text = xlabel, ylabel
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle = textStyle(10.5)
		a.Tick.Label = textStyle(9)
		a.Label.Padding = vg.Points(3)
	}
	// Both axes' labels are centred and bottom-aligned; plot rotates the
	// vertical one itself.
	p.X.Label.TextStyle.XAlign, p.X.Label.TextStyle.YAlign = draw.XCenter, draw.YBottom
	p.Y.Label.TextStyle.XAlign, p.Y.Label.TextStyle.YAlign = draw.XCenter, draw.YBottom
	p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = draw.XCenter, draw.YTop
	p.Y.Tick.Label.XAlign, p.Y.Tick.Label.YAlign = draw.XRight, draw.YCenter
	p.Legend.TextStyle = textStyle(9)
	p.X.Tick.Marker, p.Y.Tick.Marker = plainTicks{}, plainTicks{}
	p.Add(plotter.NewGrid())
	return p
}

// plainTicks are gonum's default tick positions labelled without
// trailing zeros ("25", not "25.00").
type plainTicks struct{}

// Ticks implements plot.Ticker.
func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'f', -1, 64)
			if v, err := strconv.ParseFloat(ts[i].Label, 64); err == nil && len(ts[i].Label) > 8 {
				ts[i].Label = strconv.FormatFloat(v, 'g', 6, 64)
			}
		}
	}
	return ts
}

// legendItem is one entry of a legend drawn outside the plots.
type legendItem struct {
	label  string
	thumbs []plot.Thumbnailer
}

// drawLegendColumn draws a legend as a column at the top left of c.
func drawLegendColumn(c draw.Canvas, title string, items []legendItem) {
	sty := textStyle(9.5)
	y := c.Max.Y - sty.Rectangle("X").Max.Y
	if title != "" {
		ts := textStyle(10)
		c.FillText(ts, vg.Point{X: c.Min.X, Y: y}, title)
		y -= ts.Rectangle("X").Max.Y * 1.8
	}
	l := plot.NewLegend()
	l.TextStyle = sty
	l.Left, l.Top = true, true
	l.Padding = vg.Points(4)
	for _, it := range items {
		l.Add(it.label, it.thumbs...)
	}
	sub := c
	sub.Max.Y = y + sty.Rectangle("X").Max.Y
	l.Draw(sub)
}

// drawLegendRow draws legend items in a row from (x, y), wrapping at the
// right edge of c; it returns the height used.
func drawLegendRow(c draw.Canvas, x, y vg.Length, items []legendItem) vg.Length {
	sty := textStyle(9.5)
	h := sty.Rectangle("Xg").Max.Y * 1.6
	thumbW := vg.Points(22)
	x0, used := x, h
	for _, it := range items {
		w := thumbW + vg.Points(4) + sty.Width(it.label) + vg.Points(16)
		if x > x0 && x+w > c.Max.X {
			x, y, used = x0, y-h, used+h
		}
		icon := draw.Canvas{Canvas: c.Canvas, Rectangle: vg.Rectangle{Min: vg.Point{X: x, Y: y}, Max: vg.Point{X: x + thumbW, Y: y + h*0.6}}}
		for _, t := range it.thumbs {
			t.Thumbnail(&icon)
		}
		c.FillText(sty, vg.Point{X: x + thumbW + vg.Points(4), Y: y}, it.label)
		x += w
	}
	return used
}

// split divides c into a left part of width w and the rest.
func split(c draw.Canvas, w vg.Length) (left, right draw.Canvas) {
	left, right = c, c
	left.Max.X = c.Min.X + w
	right.Min.X = left.Max.X
	return left, right
}

func xys(xs, ys []float64) plotter.XYs {
	out := make(plotter.XYs, len(xs))
	for i := range xs {
		out[i].X, out[i].Y = xs[i], ys[i]
	}
	return out
}

func mustLine(pts plotter.XYs) *plotter.Line {
	l, err := plotter.NewLine(pts)
	if err != nil {
		panic(err) // only for NaN or infinite data, which the report never holds
	}
	return l
}

func mustScatter(pts plotter.XYs) *plotter.Scatter {
	s, err := plotter.NewScatter(pts)
	if err != nil {
		panic(err)
	}
	return s
}

// runAt returns the index of arm a's first run at rate, or -1.
func (r *Report) runAt(arm string, rate float64) int {
	for i := range r.Runs {
		if r.Runs[i].Arm == arm && r.Runs[i].Rate == rate {
			return i
		}
	}
	return -1
}

// The attainment plot.

// The attainment plot: the whole 0-100% range above, and below it the
// 90-100% band, where well-performing arms crowd together, zoomed.

func (r *Report) drawAttainment(c draw.Canvas) {
	full := r.newPlot(fmt.Sprintf("SLO attainment against offered rate (target %g%%)", 100*r.AttainmentTarget),
		"", "SLO attainment (% of offered)")
	full.Y.Min, full.Y.Max = 0, 100
	full.Y.Tick.Marker = plot.ConstantTicks(pctTicks(0, 100, 10, 20))
	zoom := newPlot("", "offered rate (req/s)", "90-100% zoomed")
	zoom.Y.Min, zoom.Y.Max = 90, 100
	zoom.Y.Tick.Marker = plot.ConstantTicks(pctTicks(90, 100, 1, 2))
	rates := r.rates()
	var ticks []plot.Tick
	for _, v := range rates {
		ticks = append(ticks, plot.Tick{Value: v, Label: fmtRate(v)})
	}
	// One rate alone gets a little room on each side, so the target line
	// has a length.
	lo, hi := rates[0], rates[len(rates)-1]
	if hi == lo {
		lo, hi = lo*0.8, hi*1.2
	}
	tl := xys([]float64{lo, hi}, []float64{100 * r.AttainmentTarget, 100 * r.AttainmentTarget})
	var items []legendItem
	var target *plotter.Line
	for _, p := range []*plot.Plot{full, zoom} {
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
		p.X.Min, p.X.Max = lo, hi
		target = mustLine(tl)
		target.LineStyle = sloStyle
		p.Add(target)
	}
	for i, a := range r.Arms {
		var xs, ys []float64
		for k := range r.Runs {
			if r.Runs[k].Arm == a.Arm {
				xs, ys = append(xs, r.Runs[k].Rate), append(ys, 100*r.Runs[k].Attainment)
			}
		}
		ls, gs := r.armStyle(i)
		var l *plotter.Line
		var s *plotter.Scatter
		for _, p := range []*plot.Plot{full, zoom} {
			l = mustLine(xys(xs, ys))
			l.LineStyle = ls
			s = mustScatter(xys(xs, ys))
			s.GlyphStyle = gs
			p.Add(l, s)
		}
		label := a.Arm
		if a.DistServe != nil && a.DistServeGridTop {
			label += " (goodput >= " + fmtRate(*a.DistServe) + ", grid top)"
		} else if a.DistServe != nil {
			label += " (goodput " + fmtRate(*a.DistServe) + ")"
		} else {
			label += " (goodput -)"
		}
		items = append(items, legendItem{label, []plot.Thumbnailer{l, s}})
	}
	items = append(items, legendItem{fmt.Sprintf("%g%% target", 100*r.AttainmentTarget), []plot.Thumbnailer{target}})
	// A run that is not whole (--partial) scores only what its journal
	// holds: its point is ringed, so it is not read as a whole run's.
	var pxs, pys []float64
	for k := range r.Runs {
		if r.Runs[k].Partial != "" {
			pxs, pys = append(pxs, r.Runs[k].Rate), append(pys, 100*r.Runs[k].Attainment)
		}
	}
	if len(pxs) > 0 {
		var ring *plotter.Scatter
		for _, p := range []*plot.Plot{full, zoom} {
			ring = mustScatter(xys(pxs, pys))
			ring.GlyphStyle = partialRing
			p.Add(ring)
		}
		items = append(items, legendItem{"ringed: partial run", []plot.Thumbnailer{ring}})
	}
	// Set the ranges after adding the data (Add widens them to fit it).
	full.Y.Min, full.Y.Max = 0, 100
	zoom.Y.Min, zoom.Y.Max = 90, 100
	for _, p := range []*plot.Plot{full, zoom} {
		p.X.Min, p.X.Max = lo, hi
	}
	left, right := split(c, c.Size().X-legendWidth(c, items))
	left.Max.Y -= vg.Points(6)
	// The zoom panel takes 40% of the height; values below 90% fall off it
	// (gonum clips lines and glyphs to the data area).
	top, bottom := left, left
	h := left.Max.Y - left.Min.Y
	bottom.Max.Y = left.Min.Y + 0.4*h
	top.Min.Y = bottom.Max.Y + vg.Points(8)
	full.Draw(top)
	zoom.Draw(bottom)
	right.Min.X += vg.Points(8)
	right.Max.Y -= vg.Points(22)
	drawLegendColumn(right, "arm (DistServe goodput, req/s)", items)
}

// partialRing circles a partial run's point on the attainment plot.
var partialRing = draw.GlyphStyle{Color: color.Black, Radius: vg.Points(6), Shape: draw.RingGlyph{}}

// pctTicks marks lo..hi every step, labelled every label.
func pctTicks(lo, hi, step, label int) []plot.Tick {
	var t []plot.Tick
	for v := lo; v <= hi; v += step {
		l := ""
		if (v-lo)%label == 0 {
			l = strconv.Itoa(v)
		}
		t = append(t, plot.Tick{Value: float64(v), Label: l})
	}
	return t
}

// The prefill-share panels.

// prefillCols is the number of panel columns for n arms: more columns for
// more arms, so 16 panels make a 4 x 4 grid rather than a strip 8 high.
func prefillCols(n int) int {
	switch {
	case n <= 4:
		return 2
	case n <= 9:
		return 3
	}
	return 4
}

func (r *Report) prefillWidth(rate float64) vg.Length {
	return vg.Length(prefillCols(len(r.armsAt(rate)))) * 13 * vg.Centimeter
}

// horizon returns the time axis of the per-arm plots at rate, seconds: the
// last arrival of any run, and the axis end, which shows the drain after
// it up to a tenth of the arrivals' span (at least 10 s), or to the last
// run's end when that is sooner.
func (r *Report) horizon(rate float64) (lastArrival, end float64) {
	var runEnd float64
	for _, i := range r.armsAt(rate) {
		pl := &r.plots[r.runAt(r.Arms[i].Arm, rate)]
		lastArrival = math.Max(lastArrival, pl.lastArr.Seconds())
		runEnd = math.Max(runEnd, pl.end.Seconds())
	}
	end = math.Min(runEnd, lastArrival+math.Max(0.1*lastArrival, 10))
	return lastArrival, math.Max(end, lastArrival)
}

// drainBand shades the drain part of a time axis, from the last arrival to
// the axis end.
// (A line along the top with its area filled down to the axis.)
func drainBand(p *plot.Plot, from, to, ymax float64) {
	if to <= from {
		return
	}
	band := mustLine(plotter.XYs{{X: from, Y: ymax}, {X: to, Y: ymax}})
	band.LineStyle.Width = 0
	band.FillColor = drainColor
	p.Add(band)
}

var drainColor = color.RGBA{0xee, 0xee, 0xee, 0xff}

// prefillArms lists the arms with a run at rate, in Arms order.
func (r *Report) armsAt(rate float64) []int {
	var out []int
	for i, a := range r.Arms {
		if r.runAt(a.Arm, rate) >= 0 {
			out = append(out, i)
		}
	}
	return out
}

func (r *Report) prefillHeight(rate float64) vg.Length {
	n := len(r.armsAt(rate))
	cols := prefillCols(n)
	rows := (n + cols - 1) / cols
	return 3.2*vg.Centimeter + vg.Length(rows)*6*vg.Centimeter
}

// sloStyle draws targets: the SLO lines and the attainment target.
var sloStyle = draw.LineStyle{Color: color.RGBA{0x70, 0x70, 0x70, 0xff}, Width: vg.Points(1.8), Dashes: []vg.Length{vg.Points(1.5), vg.Points(2.5)}}

var (
	poolColor   = color.RGBA{0x1f, 0x3a, 0x93, 0xff}
	shareColor  = color.RGBA{0xe6, 0x7e, 0x22, 0xff}
	shareFill   = color.RGBA{0xf6, 0xd5, 0xb0, 0xff}
	oracleColor = color.RGBA{0x55, 0x55, 0x55, 0xff}
)

// poolLine is a run's prefill pool as a step line from 0 to end.
func poolLine(splits []SplitChange, end event.Time) plotter.XYs {
	var pts plotter.XYs
	for _, s := range splits {
		pts = append(pts, plotter.XY{X: s.At.Seconds(), Y: float64(s.Prefill)})
	}
	if len(pts) == 0 {
		pts = append(pts, plotter.XY{X: 0, Y: 0})
	}
	last := pts[len(pts)-1]
	if e := end.Seconds(); e > last.X {
		pts = append(pts, plotter.XY{X: e, Y: last.Y})
	}
	return pts
}

// shareSegments returns the prefill share of arriving work per bin, times
// instances, as step segments (bins with no arrivals break the line).
func shareSegments(pl *runPlot, instances int) []plotter.XYs {
	var segs []plotter.XYs
	var cur plotter.XYs
	w := pl.binWidth.Seconds()
	for k := range pl.prefill {
		tot := pl.prefill[k] + pl.decode[k]
		if tot == 0 {
			if len(cur) > 0 {
				segs, cur = append(segs, cur), nil
			}
			continue
		}
		y := float64(pl.prefill[k]) / float64(tot) * float64(instances)
		x := float64(k) * w
		cur = append(cur, plotter.XY{X: x, Y: y}, plotter.XY{X: x + w, Y: y})
	}
	if len(cur) > 0 {
		segs = append(segs, cur)
	}
	return segs
}

func (r *Report) drawPrefill(c draw.Canvas, rate float64) {
	arms := r.armsAt(rate)
	prefillCols := prefillCols(len(arms))
	inst := 0
	for _, i := range arms {
		k := r.runAt(r.Arms[i].Arm, rate)
		inst = max(inst, r.Runs[k].Instances)
	}
	lastArr, tmax := r.horizon(rate)
	oracle := r.oracleAt(rate)
	// Header: title, definition, legend.
	title := textStyle(13)
	y := c.Max.Y - vg.Points(16)
	head := fmt.Sprintf("Prefill engines over time against the prefill share of arriving work (rate %s req/s)", fmtRate(rate))
	if r.Partial {
		head += " [partial]"
	}
	c.FillText(title, vg.Point{X: c.Min.X + vg.Points(10), Y: y}, head)
	// The definition on its own line, the drain on the next: one line
	// would run past a narrow figure's edge.
	sub := []string{fmt.Sprintf("Share of arriving work that is prefill = input tokens / (input + requested output tokens) of the requests arriving in each %gs bin, scaled to engines (x %d instances).",
		r.plots[r.runAt(r.Arms[arms[0]].Arm, rate)].binWidth.Seconds(), inst)}
	if tmax > lastArr {
		sub = append(sub, fmt.Sprintf("Grey: drain after the last arrival (%.0f s), shown to %.0f s.", lastArr, tmax))
	}
	for _, line := range sub {
		y -= vg.Points(13)
		c.FillText(textStyle(9.5), vg.Point{X: c.Min.X + vg.Points(10), Y: y}, line)
	}
	y -= vg.Points(20)
	poolStyle := draw.LineStyle{Color: poolColor, Width: vg.Points(2.2)}
	shareStyle := draw.LineStyle{Color: shareColor, Width: vg.Points(1.1)}
	oracleStyle := draw.LineStyle{Color: oracleColor, Width: vg.Points(1.3), Dashes: []vg.Length{vg.Points(4), vg.Points(3)}}
	thumb := func(ls draw.LineStyle, fill color.Color) plot.Thumbnailer {
		l := mustLine(plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 1}})
		l.LineStyle, l.FillColor = ls, fill
		return l
	}
	items := []legendItem{
		{"prefill engines (prefill pool size)", []plot.Thumbnailer{thumb(poolStyle, nil)}},
		{fmt.Sprintf("prefill share of arriving work x %d", inst), []plot.Thumbnailer{thumb(shareStyle, shareFill)}},
	}
	if oracle >= 0 {
		items = append(items, legendItem{"oracle's prefill pool (the lag target)", []plot.Thumbnailer{thumb(oracleStyle, nil)}})
	}
	y -= drawLegendRow(c, c.Min.X+vg.Points(10), y, items)
	body := c
	body.Max.Y = y - vg.Points(6)

	rows := (len(arms) + prefillCols - 1) / prefillCols
	plots := make([][]*plot.Plot, rows)
	for j := range plots {
		plots[j] = make([]*plot.Plot, prefillCols)
	}
	titles := make([]string, len(arms))
	for n, i := range arms {
		a := r.Arms[i].Arm
		k := r.runAt(a, rate)
		pl := &r.plots[k]
		titles[n] = a
		switch l := r.Runs[k].Lag; {
		case pl.mixed:
			titles[n] += ": all engines mixed, no prefill pool"
		case l.Status == LagMeasured:
			titles[n] += fmt.Sprintf(": %s, lag %.1f s (%s", plural(r.Runs[k].Moves, "move", "moves"), l.Mean, plural(l.Changes, "oracle change", "oracle changes"))
			if l.Missed > 0 {
				titles[n] += fmt.Sprintf(", %d never reached", l.Missed)
			}
			titles[n] += ")"
		case l.Status == LagOracle:
			titles[n] += ": " + plural(r.Runs[k].Moves, "move", "moves") + " (the hindsight target)"
		default:
			titles[n] += ": " + plural(r.Runs[k].Moves, "move", "moves")
		}
		if r.Runs[k].Partial != "" {
			titles[n] += " [partial]"
		}
		p := r.newPlot("", "time since run start (s)", "engines")
		p.X.Min, p.X.Max = 0, tmax
		p.Y.Min, p.Y.Max = 0, float64(inst)
		var ticks []plot.Tick
		for v := 0; v <= inst; v++ {
			label := strconv.Itoa(v)
			if inst > 10 && v%2 == 1 {
				label = ""
			}
			ticks = append(ticks, plot.Tick{Value: float64(v), Label: label})
		}
		p.Y.Tick.Marker = plot.ConstantTicks(ticks)
		drainBand(p, lastArr, tmax, float64(inst))
		for _, seg := range shareSegments(pl, r.Runs[k].Instances) {
			l := mustLine(seg)
			l.LineStyle, l.FillColor = shareStyle, shareFill
			p.Add(l)
		}
		if oracle >= 0 && k != oracle && !pl.mixed {
			l := mustLine(poolLine(r.plots[oracle].splits, r.plots[oracle].end))
			l.LineStyle, l.StepStyle = oracleStyle, plotter.PostStep
			p.Add(l)
		}
		if !pl.mixed {
			l := mustLine(poolLine(pl.splits, pl.end))
			l.LineStyle, l.StepStyle = poolStyle, plotter.PostStep
			p.Add(l)
		}
		p.X.Min, p.X.Max = 0, tmax // after Add, which widens the range to the data
		p.Y.Min, p.Y.Max = 0, float64(inst)
		plots[n/prefillCols][n%prefillCols] = p
	}
	// Panel titles are drawn left-aligned above each data area, in the
	// gap the tiles leave, so long titles never collide.
	tiles := draw.Tiles{Rows: rows, Cols: prefillCols, PadX: vg.Points(18), PadY: vg.Points(26),
		PadTop: vg.Points(16), PadLeft: vg.Points(6), PadRight: vg.Points(10), PadBottom: vg.Points(6)}
	canvases := plot.Align(plots, tiles, body)
	ts := textStyle(10.5)
	for j := range plots {
		for i, p := range plots[j] {
			if p == nil {
				continue
			}
			p.Draw(canvases[j][i])
			dc := p.DataCanvas(canvases[j][i])
			t, sty := titles[j*prefillCols+i], ts
			if w, room := sty.Width(t), canvases[j][i].Max.X-dc.Min.X; w > room {
				// A long title (lag, misses, [partial]) in a narrow tile:
				// smaller type, not clipped text.
				sty = textStyle(vg.Length(max(7, 10.5*float64(room)/float64(w))))
			}
			c.FillText(sty, vg.Point{X: dc.Min.X, Y: canvases[j][i].Max.Y + vg.Points(6)}, t)
		}
	}
}

// The CDF plots.

func (r *Report) drawCDF(c draw.Canvas, rate float64, tpot bool) {
	name, unit, scale := "TTFT", "s", 1.0
	if tpot {
		name, unit, scale = "TPOT", "ms", 1000
	}
	title := fmt.Sprintf("%s CDF of completed requests at %s req/s", name, fmtRate(rate))
	xlabel := "TTFT from the scheduled send time (s)"
	if tpot {
		xlabel = "TPOT: mean gap between output tokens after the first (ms)"
	}
	ylabel := "completed requests at or below (%)"
	if tpot {
		ylabel = "completed requests with 2+ tokens at or below (%)"
	}
	p := r.newPlot(title, xlabel, ylabel)
	p.Y.Min, p.Y.Max = 0, 100
	p.Y.Tick.Marker = plot.ConstantTicks(pctTicks(0, 100, 10, 20))
	p.X.Min = 0
	var items []legendItem
	var slos []float64                // each distinct SLO, in arm order
	sloArms := map[float64][]string{} // the arms judged by it
	for _, i := range r.armsAt(rate) {
		k := r.runAt(r.Arms[i].Arm, rate)
		x := &r.Runs[k]
		sample := r.plots[k].ttftCDF
		slo := x.TTFTSLO
		q := x.TTFT
		if tpot {
			sample, slo, q = r.plots[k].tpotCDF, x.TPOTSLO, x.TPOT
		}
		if slo >= 0 {
			if _, ok := sloArms[slo*scale]; !ok {
				slos = append(slos, slo*scale)
			}
			sloArms[slo*scale] = append(sloArms[slo*scale], x.Arm)
		}
		ls, _ := r.armStyle(i)
		if len(sample) == 0 {
			l := mustLine(plotter.XYs{{X: 0, Y: 0}})
			l.LineStyle = ls
			items = append(items, legendItem{x.Arm + " (no completed requests)", []plot.Thumbnailer{l}})
			continue
		}
		pts := make(plotter.XYs, 0, len(sample)+1)
		pts = append(pts, plotter.XY{X: sample[0] * scale, Y: 0})
		for j, v := range sample {
			pts = append(pts, plotter.XY{X: v * scale, Y: 100 * float64(j+1) / float64(len(sample))})
		}
		l := mustLine(pts)
		l.LineStyle, l.StepStyle = ls, plotter.PostStep
		p.Add(l)
		items = append(items, legendItem{fmt.Sprintf("%s (p99 %s %s)", x.Arm, fmtFixed(q.P99*scale, 2), unit), []plot.Thumbnailer{l}})
	}
	// One SLO line per SLO the runs are judged by (runs of one report may
	// carry different ones), each naming its arms when there are several.
	for n, v := range slos {
		ls := sloStyle
		if n > 0 {
			ls.Dashes = []vg.Length{vg.Points(2 + 2*float64(n)), vg.Points(3)}
		}
		sl := mustLine(plotter.XYs{{X: v, Y: 0}, {X: v, Y: 100}})
		sl.LineStyle = ls
		p.Add(sl)
		label := fmt.Sprintf("%s SLO %s %s", name, strconv.FormatFloat(v, 'f', -1, 64), unit)
		if len(slos) > 1 {
			label += " (" + strings.Join(sloArms[v], ", ") + ")"
		}
		items = append(items, legendItem{label, []plot.Thumbnailer{sl}})
	}
	if len(items) > 0 && len(slos) > 0 && p.X.Max < 1.2*slices.Max(slos) && !r.anySample(rate, tpot) {
		p.X.Max = 1.2 * slices.Max(slos) // nothing drawn: show the SLO line inside the frame
	}
	left, right := split(c, c.Size().X-legendWidth(c, items))
	left.Max.Y -= vg.Points(6)
	p.Draw(left)
	right.Min.X += vg.Points(8)
	right.Max.Y -= vg.Points(22)
	drawLegendColumn(right, "arm", items)
}

// The moves timeline.

func (r *Report) movesHeight(rate float64) vg.Length {
	return 4.2*vg.Centimeter + vg.Length(len(r.armsAt(rate)))*1.3*vg.Centimeter
}

func (r *Report) drawMoves(c draw.Canvas, rate float64) {
	arms := r.armsAt(rate)
	p := r.newPlot(fmt.Sprintf("Role moves over time at %s req/s", fmtRate(rate)), "time since run start (s)", "")
	n := len(arms)
	p.Y.Min, p.Y.Max = -0.6, float64(n)-0.4
	lastArr, tmax := r.horizon(rate)
	p.X.Min, p.X.Max = 0, tmax
	if tmax > lastArr {
		p.X.Label.Text = fmt.Sprintf("time since run start (s); grey: drain after the last arrival at %.0f s", lastArr)
	}
	drainBand(p, lastArr, tmax, p.Y.Max)
	var ticks []plot.Tick
	upStyle := draw.GlyphStyle{Color: color.RGBA{0x1a, 0x93, 0x3a, 0xff}, Radius: vg.Points(4), Shape: draw.PyramidGlyph{}}
	downStyle := draw.GlyphStyle{Color: color.RGBA{0xc0, 0x39, 0x2b, 0xff}, Radius: vg.Points(4), Shape: downTriangle{}}
	var up, down plotter.XYs
	var deltas plotter.XYLabels
	for row, i := range arms {
		k := r.runAt(r.Arms[i].Arm, rate)
		y := float64(n - 1 - row) // the first arm on top
		label := r.Arms[i].Arm + ": " + plural(r.Runs[k].Moves, "move", "moves")
		if r.plots[k].mixed {
			label = r.Arms[i].Arm + ": mixed"
		}
		ch := Changes(r.plots[k].splits)
		later := 0
		for j := 1; j < len(ch); j++ {
			if ch[j].At.Seconds() > tmax {
				later++
			}
		}
		if later > 0 {
			label += fmt.Sprintf(" (%s after %.0f s)", plural(later, "change", "changes"), tmax)
		}
		ticks = append(ticks, plot.Tick{Value: y, Label: label})
		for j := 1; j < len(ch); j++ {
			if ch[j].At.Seconds() > tmax {
				continue
			}
			pt := plotter.XY{X: ch[j].At.Seconds(), Y: y}
			d := ch[j].Prefill - ch[j-1].Prefill
			if d > 0 {
				up = append(up, pt)
			} else {
				down = append(down, pt)
			}
			if d > 1 || d < -1 {
				deltas.XYs = append(deltas.XYs, pt)
				deltas.Labels = append(deltas.Labels, fmt.Sprintf("%+d", d))
			}
		}
	}
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	var items []legendItem
	us := mustScatter(up)
	us.GlyphStyle = upStyle
	ds := mustScatter(down)
	ds.GlyphStyle = downStyle
	if len(up) > 0 {
		p.Add(us)
	}
	if len(down) > 0 {
		p.Add(ds)
	}
	if len(deltas.XYs) > 0 {
		lb, err := plotter.NewLabels(deltas)
		if err == nil {
			for i := range lb.TextStyle {
				lb.TextStyle[i] = textStyle(8.5)
				lb.TextStyle[i].YAlign = draw.YBottom
			}
			lb.Offset = vg.Point{X: vg.Points(5), Y: vg.Points(3)}
			p.Add(lb)
		}
	}
	items = append(items, legendItem{"prefill pool grew", []plot.Thumbnailer{us}},
		legendItem{"prefill pool shrank (one mark per change of the pool; +n/-n: by n engines at once)", []plot.Thumbnailer{ds}})
	p.X.Min, p.X.Max = 0, tmax // after Add, which widens the range to the data
	p.Y.Min, p.Y.Max = -0.6, float64(n)-0.4
	body := c
	lh := drawLegendRow(c, c.Min.X+vg.Points(10), c.Min.Y+vg.Points(8), items)
	body.Min.Y += lh + vg.Points(10)
	body.Min.X += vg.Points(10)
	body.Max.X -= vg.Points(10)
	body.Max.Y -= vg.Points(6)
	p.Draw(body)
}

// newPlot is newPlot with the report's partial label on the title.
func (r *Report) newPlot(title, xlabel, ylabel string) *plot.Plot {
	if r.Partial && title != "" {
		title += " [partial]"
	}
	return newPlot(title, xlabel, ylabel)
}

// anySample reports whether some run at rate has a TTFT (or TPOT) sample
// to draw.
func (r *Report) anySample(rate float64, tpot bool) bool {
	for _, i := range r.armsAt(rate) {
		pl := &r.plots[r.runAt(r.Arms[i].Arm, rate)]
		if !tpot && len(pl.ttftCDF) > 0 || tpot && len(pl.tpotCDF) > 0 {
			return true
		}
	}
	return false
}

// legendWidth is a legend column as wide as its widest label needs, within
// 6.2 cm and 45% of the figure.
func legendWidth(c draw.Canvas, items []legendItem) vg.Length {
	lw := 6.2 * vg.Centimeter
	for _, it := range items {
		lw = max(lw, textStyle(9.5).Width(it.label)+vg.Points(42))
	}
	return min(lw, 0.45*c.Size().X)
}
