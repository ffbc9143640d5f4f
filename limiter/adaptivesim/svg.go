package adaptivesim

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// Chart geometry, in SVG user units.
const (
	chartW     = 960
	chartLeft  = 70
	chartRight = 190 // room for the legend
	rateTop    = 60
	rateH      = 300
	errTop     = rateTop + rateH + 50
	errH       = 130
	chartH     = errTop + errH + 50
)

// series is one line of the chart.
type series struct {
	name, color, dash string
	width             float64
	value             func(Point) float64
	step              bool // draw as steps (values that hold until the next point)
}

// WriteSVG draws tr as an SVG chart: the pool's configured and effective
// rates, the offered and admitted load and the backend's true capacity
// over time above, and the error rate (errors and timeouts among admitted
// requests) below, with the pool's error threshold. It is plain SVG with
// no scripts, fonts or external references.
func (tr Trace) WriteSVG(w io.Writer, title string) error {
	if len(tr.Points) == 0 {
		return fmt.Errorf("adaptivesim: an empty trace has no chart")
	}
	end := tr.Points[len(tr.Points)-1].T
	maxRate := 0.0
	for _, p := range tr.Points {
		maxRate = math.Max(maxRate, math.Max(p.Offered, math.Max(p.Configured, p.Capacity)))
	}
	rateStep := niceStep(maxRate / 5)
	rateMax := math.Ceil(maxRate*1.05/rateStep) * rateStep
	plotW := float64(chartW - chartLeft - chartRight)
	x := func(t time.Duration) float64 { return chartLeft + plotW*t.Seconds()/end.Seconds() }
	yRate := func(v float64) float64 { return rateTop + rateH*(1-v/rateMax) }
	yErr := func(v float64) float64 { return errTop + errH*(1-v) }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", chartW, chartH, chartW, chartH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", chartW, chartH)
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="16" font-weight="bold">%s</text>`+"\n", chartLeft, esc(title))
	a := tr.Pool.Adaptive
	fmt.Fprintf(&b, `<text x="%d" y="42" fill="#555">%s</text>`+"\n", chartLeft, esc(fmt.Sprintf(
		"%d clients offering %g req/s each; adaptive: threshold %g%%, backoff %g, +%g%% of configured per %v (%v at a level that failed), cooldown %v%s",
		tr.Config.Clients, tr.Config.OfferedPerClient, 100*a.ErrorThreshold, a.Backoff, 100*a.Increase, a.Interval, a.ProbeInterval, a.Cooldown, latencyNote(a.LatencyTolerance))))

	// Phases: shaded bands and labels.
	from := time.Duration(0)
	for i, ph := range tr.Config.Phases {
		if i%2 == 1 {
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#f3f3f3"/>`+"\n", x(from), rateTop, x(ph.Until)-x(from), errTop+errH-rateTop)
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#555" text-anchor="middle">%s</text>`+"\n", (x(from)+x(ph.Until))/2, rateTop+14, esc(ph.Name))
		from = ph.Until
	}

	// Grids and axes.
	for v := 0.0; v <= rateMax+1e-9; v += rateStep {
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", chartLeft, chartLeft+plotW, yRate(v), yRate(v))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%g</text>`+"\n", chartLeft-6, yRate(v)+4, v)
	}
	for v := 0.0; v <= 1.0001; v += 0.25 {
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", chartLeft, chartLeft+plotW, yErr(v), yErr(v))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%g%%</text>`+"\n", chartLeft-6, yErr(v)+4, 100*v)
	}
	tick := niceStep(end.Seconds() / 9)
	for s := 0.0; s <= end.Seconds()+1e-9; s += tick {
		t := time.Duration(s * float64(time.Second))
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#ddd"/>`+"\n", x(t), x(t), errTop, errTop+errH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%gs</text>`+"\n", x(t), errTop+errH+16, s)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%gs</text>`+"\n", x(t), rateTop+rateH+16, s)
	}
	fmt.Fprintf(&b, `<text transform="translate(18,%d) rotate(-90)" text-anchor="middle">requests per second</text>`+"\n", rateTop+rateH/2)
	fmt.Fprintf(&b, `<text transform="translate(18,%d) rotate(-90)" text-anchor="middle">error rate</text>`+"\n", errTop+errH/2)
	for _, top := range [][2]int{{rateTop, rateH}, {errTop, errH}} {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="none" stroke="#333"/>`+"\n", chartLeft, top[0], plotW, top[1])
	}

	// The rate panel.
	rates := []series{
		{name: "offered load", color: "#e69f00", dash: "2,3", width: 1.5, value: func(p Point) float64 { return p.Offered }},
		{name: "true capacity", color: "#777", dash: "8,4", width: 2, value: func(p Point) float64 { return p.Capacity }, step: true},
		{name: "configured rate", color: "#000", dash: "4,3", width: 1.5, value: func(p Point) float64 { return p.Configured }, step: true},
		{name: "admitted load", color: "#009e73", width: 1.2, value: func(p Point) float64 { return p.Admitted }},
		{name: "effective rate", color: "#0072b2", width: 2.5, value: func(p Point) float64 { return p.Effective }, step: true},
	}
	var cmpRate, cmpErr series
	if tr.Compare != nil {
		cmpRate = series{name: "effective rate, " + tr.CompareName, color: "#56b4e9", dash: "5,2", width: 2, value: func(p Point) float64 { return p.Effective }, step: true}
		cmpErr = series{name: "error rate, " + tr.CompareName, color: "#e8a27c", dash: "5,2", width: 1.2, value: func(p Point) float64 { return p.ErrorRate }}
		b.WriteString(polyline(tr.Compare, cmpRate, x, yRate))
		b.WriteString(polyline(tr.Compare, cmpErr, x, yErr))
		rates = append(rates[:len(rates):len(rates)], cmpRate)
	}
	for _, s := range rates {
		if s.name != cmpRate.name {
			b.WriteString(polyline(tr.Points, s, x, yRate))
		}
	}
	// The error panel, with the threshold.
	thr := tr.Pool.Adaptive.ErrorThreshold
	fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#d55e00" stroke-dasharray="4,3"/>`+"\n", chartLeft, chartLeft+plotW, yErr(thr), yErr(thr))
	errS := series{name: "error rate", color: "#d55e00", width: 1.5, value: func(p Point) float64 { return p.ErrorRate }}
	b.WriteString(polyline(tr.Points, errS, x, yErr))

	// Legend.
	lx, ly := chartLeft+int(plotW)+16, rateTop+10
	errs := []series{errS, {name: "error threshold", color: "#d55e00", dash: "4,3", width: 1}}
	if tr.Compare != nil {
		errs = append(errs, cmpErr)
	}
	for i, s := range append(rates, errs...) {
		y := ly + 22*i
		if i >= len(rates) {
			y = errTop + 10 + 22*(i-len(rates))
		}
		dash := ""
		if s.dash != "" {
			dash = fmt.Sprintf(` stroke-dasharray="%s"`, s.dash)
		}
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="%g"%s/>`+"\n", lx, lx+28, y, y, s.color, s.width, dash)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", lx+34, y+4, esc(s.name))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// polyline draws s over the points.
func polyline(pts []Point, s series, x func(time.Duration) float64, y func(float64) float64) string {
	var b strings.Builder
	prevT := time.Duration(0)
	for _, p := range pts {
		v := y(s.value(p))
		if s.step { // a value that held over the sample
			fmt.Fprintf(&b, "%.1f,%.1f %.1f,%.1f ", x(prevT), v, x(p.T), v)
		} else { // a rate over the sample, at its middle
			fmt.Fprintf(&b, "%.1f,%.1f ", x(p.T-(p.T-prevT)/2), v)
		}
		prevT = p.T
	}
	dash := ""
	if s.dash != "" {
		dash = fmt.Sprintf(` stroke-dasharray="%s"`, s.dash)
	}
	return fmt.Sprintf(`<polyline fill="none" stroke="%s" stroke-width="%g"%s stroke-linejoin="round" points="%s"/>`+"\n", s.color, s.width, dash, strings.TrimSpace(b.String()))
}

// niceStep rounds a step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func latencyNote(tol float64) string {
	if tol == 0 {
		return ""
	}
	return fmt.Sprintf(", latency tolerance %g×", tol)
}

// esc escapes text for SVG.
func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
