package main

import (
	"strings"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got, ok := median(c.in); !ok || got != c.want {
			t.Errorf("median(%v) = %v, %v; want %v", c.in, got, ok, c.want)
		}
	}
	if _, ok := median(nil); ok {
		t.Error("median(nil) reported a value")
	}
}

func TestTable(t *testing.T) {
	in := "heat2d P=1\tsec/iter\tmpios\t2\n" +
		"heat2d P=1\tsec/iter\tmpich\t1\n" +
		"heat2d P=1\tsec/iter\tmpios\t4\n" +
		"heat2d P=1\tsec/iter\tmpich\t1\n" +
		"heat2d P=1\tsec/iter\tmpios\t3\n" +
		"pingpong\tlatency_us\tmpios\t10\n"
	var out strings.Builder
	if err := run(strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	want := "| benchmark | metric | mpios (median) | mpich (median) | mpios/mpich |\n" +
		"| --- | --- | ---: | ---: | ---: |\n" +
		"| heat2d P=1 | sec/iter | 3 | 1 | 3.00 |\n" +
		"| pingpong | latency_us | 10 | – | – |\n"
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
	if err := run(strings.NewReader("a\tb\tc\n"), &out); err == nil {
		t.Error("malformed line accepted")
	}
}

func TestTableExtraRatioBetweenOtherImplementations(t *testing.T) {
	in := "pingpong\tlatency_us\tmpios\t1\n" +
		"pingpong\tlatency_us\tmpich\t0.5\n" +
		"pingpong\tlatency_us\tmpios-tcp\t8\n" +
		"pingpong\tlatency_us\topenmpi\t4\n"
	var out strings.Builder
	if err := run(strings.NewReader(in), &out, "mpios-tcp/openmpi"); err != nil {
		t.Fatal(err)
	}
	want := "| benchmark | metric | mpios (median) | mpich (median) | mpios-tcp (median) | openmpi (median) | mpios/mpich | mpios/mpios-tcp | mpios/openmpi | mpios-tcp/openmpi |\n" +
		"| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n" +
		"| pingpong | latency_us | 1 | 0.5 | 8 | 4 | 2.00 | 0.12 | 0.25 | 2.00 |\n"
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
	if err := run(strings.NewReader(in), &out, "mpios/lam"); err == nil {
		t.Error("a ratio with an unknown implementation was accepted")
	}
}
