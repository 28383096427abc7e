package main

import (
	"fmt"
	"math"
	"strings"
)

// point is one (x, y) of a line.
type point struct{ X, Y float64 }

// line is one series of a chart.
type line struct {
	Label  string
	Points []point
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf", "#7f7f7f"}

// chart draws lines on linear axes, or a log10 x axis when logX, with a legend; it is
// deliberately plain SVG so the docs need no plotting tool.
func chart(title, xLabel, yLabel string, lines []line, logX bool) string {
	const W, H, L, R, T, B = 900.0, 420.0, 70.0, 190.0, 40.0, 50.0
	fx := func(x float64) float64 {
		if logX {
			return math.Log10(x)
		}
		return x
	}
	xMin, xMax, yMax := math.Inf(1), math.Inf(-1), 0.0
	for _, l := range lines {
		for _, p := range l.Points {
			xMin, xMax, yMax = math.Min(xMin, fx(p.X)), math.Max(xMax, fx(p.X)), math.Max(yMax, p.Y)
		}
	}
	if xMax <= xMin {
		xMin, xMax = 0, 1
	}
	if yMax <= 0 {
		yMax = 1
	}
	yMax *= 1.05
	px := func(x float64) float64 { return L + (fx(x)-xMin)/(xMax-xMin)*(W-L-R) }
	py := func(y float64) float64 { return H - B - y/yMax*(H-T-B) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", W, H)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%.0f" y="22" font-size="15">%s</text>`+"\n", L, esc(title))
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/><line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n",
		L, H-B, W-R, H-B, L, T, L, H-B)
	for i := 0; i <= 5; i++ {
		y := yMax * float64(i) / 5
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#ddd"/><text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n",
			L, py(y), W-R, py(y), L-6, py(y)+4, num(y))
	}
	for i := 0; i <= 6; i++ {
		v := xMin + (xMax-xMin)*float64(i)/6
		label := v
		if logX {
			label = math.Pow(10, v)
		}
		x := L + float64(i)/6*(W-L-R)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n", x, H-B+18, num(label))
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle">%s</text>`+"\n", L+(W-L-R)/2, H-10, esc(xLabel))
	fmt.Fprintf(&b, `<text x="16" y="%.0f" transform="rotate(-90 16 %.0f)" text-anchor="middle">%s</text>`+"\n", T+(H-T-B)/2, T+(H-T-B)/2, esc(yLabel))
	for i, l := range lines {
		c := palette[i%len(palette)]
		var pts []string
		for _, p := range l.Points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(p.X), py(p.Y)))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.8" points="%s"/>`+"\n", c, strings.Join(pts, " "))
		if len(l.Points) <= 12 {
			for _, p := range pts {
				xy := strings.Split(p, ",")
				fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`, xy[0], xy[1], c)
			}
		}
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="14" height="4" fill="%s"/><text x="%.0f" y="%.0f">%s</text>`+"\n",
			W-R+12, T+float64(i)*18+4, c, W-R+32, T+float64(i)*18+10, esc(l.Label))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) >= 1000:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 1:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
