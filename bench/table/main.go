// Command table turns the raw measurements of bench/compare into a markdown
// table of medians and ratios.
//
// Input (stdin): one measurement per line, tab-separated:
//
//	benchmark <TAB> metric <TAB> implementation <TAB> value
//
// Rows keep the order in which (benchmark, metric) pairs first appear. The
// first implementation seen is "ours"; every other one gets a ratio column
// ours/theirs, computed from the medians. Arguments "A/B" add ratio columns
// between two other implementations (e.g. mpios-tcp/openmpi).
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

func main() {
	if err := run(os.Stdin, os.Stdout, os.Args[1:]...); err != nil {
		fmt.Fprintln(os.Stderr, "table:", err)
		os.Exit(1)
	}
}

type rowKey struct{ bench, metric string }

// samples holds the parsed input in first-appearance order.
type samples struct {
	rows   []rowKey
	impls  []string
	values map[rowKey]map[string][]float64
}

func parse(r io.Reader) (*samples, error) {
	s := &samples{values: map[rowKey]map[string][]float64{}}
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		f := strings.Split(text, "\t")
		if len(f) != 4 {
			return nil, fmt.Errorf("line %d: want 4 tab-separated fields, got %d: %q", line, len(f), text)
		}
		v, err := strconv.ParseFloat(f[3], 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		k := rowKey{f[0], f[1]}
		if s.values[k] == nil {
			s.values[k] = map[string][]float64{}
			s.rows = append(s.rows, k)
		}
		if !slices.Contains(s.impls, f[2]) {
			s.impls = append(s.impls, f[2])
		}
		s.values[k][f[2]] = append(s.values[k][f[2]], v)
	}
	return s, sc.Err()
}

// median of xs (the mean of the middle two for an even count); ok is false
// for no samples.
func median(xs []float64) (m float64, ok bool) {
	if len(xs) == 0 {
		return 0, false
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2], true
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2, true
}

// format prints a value with 4 significant digits, without exponent for the
// usual magnitudes so the table stays readable.
func format(v float64) string {
	return strconv.FormatFloat(v, 'g', 4, 64)
}

func run(r io.Reader, w io.Writer, extra ...string) error {
	s, err := parse(r)
	if err != nil {
		return err
	}
	if len(s.impls) == 0 {
		return fmt.Errorf("no measurements")
	}
	// ratios lists the column pairs: ours against each other one, then the extra pairs.
	var ratios [][2]int
	for i := 1; i < len(s.impls); i++ {
		ratios = append(ratios, [2]int{0, i})
	}
	for _, pair := range extra {
		a, b, ok := strings.Cut(pair, "/")
		ia, ib := slices.Index(s.impls, a), slices.Index(s.impls, b)
		if !ok || ia < 0 || ib < 0 {
			return fmt.Errorf("ratio %q: want A/B, two of the implementations %v", pair, s.impls)
		}
		ratios = append(ratios, [2]int{ia, ib})
	}
	header := []string{"benchmark", "metric"}
	for _, impl := range s.impls {
		header = append(header, impl+" (median)")
	}
	for _, rt := range ratios {
		header = append(header, s.impls[rt[0]]+"/"+s.impls[rt[1]])
	}
	var b strings.Builder
	writeRow := func(cells []string) { fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | ")) }
	writeRow(header)
	sep := make([]string, len(header))
	for i := range sep {
		sep[i] = "---"
		if i >= 2 {
			sep[i] = "---:"
		}
	}
	writeRow(sep)
	for _, k := range s.rows {
		cells := []string{k.bench, k.metric}
		meds := make([]float64, len(s.impls))
		have := make([]bool, len(s.impls))
		for i, impl := range s.impls {
			meds[i], have[i] = median(s.values[k][impl])
			if have[i] {
				cells = append(cells, format(meds[i]))
			} else {
				cells = append(cells, "–")
			}
		}
		for _, rt := range ratios {
			if a, b := rt[0], rt[1]; have[a] && have[b] && meds[b] != 0 {
				cells = append(cells, fmt.Sprintf("%.2f", meds[a]/meds[b]))
			} else {
				cells = append(cells, "–")
			}
		}
		writeRow(cells)
	}
	_, err = io.WriteString(w, b.String())
	return err
}
