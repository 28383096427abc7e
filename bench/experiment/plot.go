package main

import (
	"fmt"
	"math"
	"strings"
)

// ratePoint is the iteration rate around a time.
type ratePoint struct{ At, Rate float64 }

// rates turns rank 0's progress reports into iterations per second, each over the window of
// at least window seconds that ends at a report (the first window starts at mpirun's start).
func rates(samples []sample, window float64) []ratePoint {
	var out []ratePoint
	j := -1 // index of the window's start; -1 is (0 s, iteration 0)
	for i, s := range samples {
		for j+1 < i && s.At-samples[j+1].At >= window {
			j++
		}
		t0, it0 := 0.0, 0
		if j >= 0 {
			t0, it0 = samples[j].At, samples[j].Iter
		}
		if s.At-t0 <= 0 {
			continue
		}
		out = append(out, ratePoint{At: s.At, Rate: float64(s.Iter-it0) / (s.At - t0)})
	}
	return out
}

// niceStep returns a round step (1, 2 or 5 times a power of ten) for about n ticks over span.
func niceStep(span float64, n int) float64 {
	if span <= 0 || n < 1 {
		return 1
	}
	raw := span / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// series is one run in the plot.
type series struct {
	Label      string
	Color      string
	Points     []ratePoint
	Migrations []migration
	Events     []event
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

// plotSVG draws iterations per second over time for every series, with a run's migrations
// as dashed vertical lines and its cluster events as dotted ones, in the run's color.
func plotSVG(title string, ss []series, xMax float64) string {
	const (
		W, H                   = 960.0, 500.0
		left, right, top, bott = 70.0, 20.0, 56.0, 64.0
		pw, ph                 = W - left - right, H - top - bott
	)
	yMax := 0.0
	for _, s := range ss {
		for _, p := range s.Points {
			yMax = math.Max(yMax, p.Rate)
			xMax = math.Max(xMax, p.At)
		}
	}
	if yMax <= 0 {
		yMax = 1
	}
	if xMax <= 0 {
		xMax = 1
	}
	xStep, yStep := niceStep(xMax, 10), niceStep(yMax*1.08, 6)
	xMax = math.Ceil(xMax/xStep) * xStep
	yMax = math.Ceil(yMax*1.08/yStep) * yStep
	x := func(t float64) float64 { return left + pw*t/xMax }
	y := func(r float64) float64 { return top + ph*(1-r/yMax) }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="%.0f" height="%.0f" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(&b, `<text x="%.1f" y="22" font-size="15" text-anchor="middle">%s</text>`+"\n", W/2, xmlEscape(title))
	// Grid and ticks.
	for v := 0.0; v <= yMax+yStep/2; v += yStep {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e4e4e4"/>`+"\n", left, y(v), left+pw, y(v))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y(v)+4, fmtTick(v))
	}
	for v := 0.0; v <= xMax+xStep/2; v += xStep {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e4e4e4"/>`+"\n", x(v), top, x(v), top+ph)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x(v), top+ph+16, fmtTick(v))
	}
	fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#444"/>`+"\n", left, top, pw, ph)
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">time since mpirun started (s)</text>`+"\n", left+pw/2, H-18)
	fmt.Fprintf(&b, `<text x="18" y="%.1f" text-anchor="middle" transform="rotate(-90 18 %.1f)">iterations per second (rank 0)</text>`+"\n", top+ph/2, top+ph/2)

	for i, s := range ss {
		for _, e := range s.Events {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="1,3" stroke-width="1.5"><title>%s</title></line>`+"\n",
				x(e.At), top, x(e.At), top+ph, s.Color, xmlEscape(fmt.Sprintf("%s: %s at %.1f s (iteration %d)", s.Label, e.Label, e.At, e.Iter)))
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="%s" font-size="10" transform="rotate(-90 %.1f %.1f)" text-anchor="end">%s</text>`+"\n",
				x(e.At)-3, top+4, s.Color, x(e.At)-3, top+4, xmlEscape(e.Label))
		}
		for _, m := range s.Migrations {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="6,4" stroke-opacity="0.7"><title>%s</title></line>`+"\n",
				x(m.At), top, x(m.At), top+ph, s.Color, xmlEscape(fmt.Sprintf("%s: rank %d %s → %s at %.1f s", s.Label, m.Rank, m.From, m.To, m.At)))
		}
		if len(s.Points) > 0 {
			var pts []string
			for _, p := range s.Points {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p.At), y(p.Rate)))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", s.Color, strings.Join(pts, " "))
		}
		// Legend.
		ly := top + 14 + 18*float64(i)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`+"\n", left+pw-330, ly, left+pw-305, ly, s.Color)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", left+pw-299, ly+4, xmlEscape(fmt.Sprintf("%s (%d migrations)", s.Label, len(s.Migrations))))
	}
	ly := top + 14 + 18*float64(len(ss))
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10" fill="#555">dashed: migrations; dotted: nodes join, load rises</text>`+"\n", left+pw-330, ly+4)
	b.WriteString("</svg>\n")
	return b.String()
}

func fmtTick(v float64) string {
	if math.Abs(v-math.Round(v)) < 1e-9 {
		return fmt.Sprintf("%.0f", v)
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
}
