package state

import (
	"bytes"
	"errors"
	"hash/crc32"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
)

type (
	Temp  float64
	Grid  []float64
	Field []Temp
	Count int32
)

type Params struct {
	Name    string
	Alpha   float64
	Steps   []int
	Weights map[string]float64
	Nested  *Params
	private int // not serialized
}

// numericState has one slice and one scalar of every raw kind, with nonzero values.
type numericState struct {
	I8   []int8
	I16  []int16
	I32  []int32
	I64  []int64
	I    []int
	U8   []uint8
	U16  []uint16
	U32  []uint32
	U64  []uint64
	U    []uint
	F32  []float32
	F64  []float64
	C64  []complex64
	C128 []complex128

	SI8   int8
	SI16  int16
	SI32  int32
	SI64  int64
	SI    int
	SU8   uint8
	SU16  uint16
	SU32  uint32
	SU64  uint64
	SU    uint
	SF32  float32
	SF64  float64
	SC64  complex64
	SC128 complex128
}

func filledNumeric() *numericState {
	return &numericState{
		I8: []int8{math.MinInt8, -1, 0, math.MaxInt8}, I16: []int16{math.MinInt16, 7, math.MaxInt16},
		I32: []int32{math.MinInt32, 1, math.MaxInt32}, I64: []int64{math.MinInt64, 2, math.MaxInt64},
		I: []int{math.MinInt, 3, math.MaxInt}, U8: []uint8{0, 1, 255}, U16: []uint16{1, math.MaxUint16},
		U32: []uint32{4, math.MaxUint32}, U64: []uint64{5, math.MaxUint64}, U: []uint{6, math.MaxUint},
		F32:  []float32{1.5, float32(math.Inf(-1)), math.SmallestNonzeroFloat32},
		F64:  []float64{math.Pi, math.Inf(1), math.Copysign(0, -1), math.MaxFloat64},
		C64:  []complex64{complex(1, -2), complex(float32(math.Inf(1)), 0)},
		C128: []complex128{complex(math.E, math.Pi)},
		SI8:  -8, SI16: -16, SI32: -32, SI64: -64, SI: -1 << 40, SU8: 8, SU16: 16, SU32: 32, SU64: 1 << 63,
		SU: 1 << 50, SF32: 3.25, SF64: -2.5e300, SC64: complex(3, 4), SC128: complex(-5, 6e200),
	}
}

// registerFields registers every field of *s under its field name.
func registerFields(t testing.TB, r *Registry, s any) {
	t.Helper()
	v := reflect.ValueOf(s).Elem()
	for i := 0; i < v.NumField(); i++ {
		if err := r.Register(v.Type().Field(i).Name, v.Field(i).Addr().Interface()); err != nil {
			t.Fatal(err)
		}
	}
}

func encode(t testing.TB, r *Registry) []byte {
	t.Helper()
	var buf bytes.Buffer
	n, err := r.WriteTo(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo returned %d, wrote %d", n, buf.Len())
	}
	return buf.Bytes()
}

func TestRoundTripNumericKinds(t *testing.T) {
	src := filledNumeric()
	w := NewRegistry()
	registerFields(t, w, src)
	for _, e := range w.entries {
		if e.enc != encRaw {
			t.Fatalf("%s: want raw encoding", e.name)
		}
	}
	data := encode(t, w)
	if got := w.Size(); got != int64(len(data)) {
		t.Errorf("Size() = %d, stream is %d bytes", got, len(data))
	}

	dst := &numericState{}
	r := NewRegistry()
	registerFields(t, r, dst)
	n, err := r.ReadFrom(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(len(data)) {
		t.Errorf("ReadFrom returned %d, want %d", n, len(data))
	}
	if !reflect.DeepEqual(src, dst) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", dst, src)
	}
	if !math.Signbit(dst.F64[2]) {
		t.Error("negative zero lost")
	}
}

func TestRoundTripNamedTypes(t *testing.T) {
	g, f, c, temp := Grid{1, 2, 3}, Field{-1, 2.5}, Count(42), Temp(36.6)
	w := NewRegistry()
	for name, p := range map[string]any{"g": &g, "f": &f, "c": &c, "t": &temp} {
		if err := w.Register(name, p); err != nil {
			t.Fatal(err)
		}
		if e := w.byName[name]; e.enc != encRaw {
			t.Fatalf("%s: named numeric type not raw", name)
		}
	}
	data := encode(t, w)

	var g2 Grid
	var f2 Field
	var c2 Count
	var t2 Temp
	r := NewRegistry()
	for name, p := range map[string]any{"g": &g2, "f": &f2, "c": &c2, "t": &t2} {
		if err := r.Register(name, p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.ReadFrom(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, g2) || !reflect.DeepEqual(f, f2) || c != c2 || temp != t2 {
		t.Fatalf("got %v %v %v %v", g2, f2, c2, t2)
	}
}

func TestNamedAndPlainAreCompatible(t *testing.T) {
	// A Grid written can be read into a []float64: the stream records kinds, not type names.
	g := Grid{1, 2}
	w := NewRegistry()
	must(t, w.Register("u", &g))
	var u []float64
	r := NewRegistry()
	must(t, r.Register("u", &u))
	if _, err := r.ReadFrom(bytes.NewReader(encode(t, w))); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(u, []float64{1, 2}) {
		t.Fatalf("got %v", u)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

type msgState struct {
	P      Params
	PP     *Params
	M      map[string][]int
	S      string
	Rows   [][]float64
	B      bool
	Any    any
	Arr    [3]float64
	Strs   []string
	Empty  []string
	NilMap map[int]string
}

func TestRoundTripMsgpack(t *testing.T) {
	src := &msgState{
		P:    Params{Name: "heat", Alpha: 0.25, Steps: []int{1, 2}, Weights: map[string]float64{"a": 1, "b": 2}, private: 9},
		PP:   &Params{Name: "inner", Nested: &Params{Name: "deeper"}},
		M:    map[string][]int{"x": {1, 2, 3}, "y": nil},
		S:    "héllo",
		Rows: [][]float64{{1, 2}, {}, {3}},
		B:    true,
		Any:  map[string]any{"k": "v"},
		Arr:  [3]float64{1, 2, 3},
		Strs: []string{"a", ""}, Empty: []string{},
	}
	w := NewRegistry()
	registerFields(t, w, src)
	for _, e := range w.entries {
		if e.enc != encMsgpack {
			t.Fatalf("%s: want msgpack encoding", e.name)
		}
	}
	data := encode(t, w)
	dst := &msgState{P: Params{Name: "stale", Steps: []int{9, 9, 9, 9}}}
	r := NewRegistry()
	registerFields(t, r, dst)
	if _, err := r.ReadFrom(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	src.P.private = 0 // unexported fields are not saved
	if !reflect.DeepEqual(src, dst) {
		t.Fatalf("round trip:\n got %#v\nwant %#v", dst, src)
	}
	if est, got := w.Size(), int64(len(data)); est < got/2 || est > got*2 {
		t.Errorf("Size() = %d, far from the actual %d", est, got)
	}
}

func TestEmptyAndNilSlices(t *testing.T) {
	var nilF []float64
	emptyF := []float64{}
	var nilS [][]int
	emptyS := [][]int{}
	w := NewRegistry()
	must(t, w.Register("nilF", &nilF))
	must(t, w.Register("emptyF", &emptyF))
	must(t, w.Register("nilS", &nilS))
	must(t, w.Register("emptyS", &emptyS))
	data := encode(t, w)

	a, b, c, d := []float64{1}, []float64(nil), [][]int{{1}}, [][]int(nil)
	r := NewRegistry()
	must(t, r.Register("nilF", &a))
	must(t, r.Register("emptyF", &b))
	must(t, r.Register("nilS", &c))
	must(t, r.Register("emptyS", &d))
	if _, err := r.ReadFrom(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if a != nil || b == nil || len(b) != 0 || c != nil || d == nil || len(d) != 0 {
		t.Fatalf("nil/empty not preserved: %#v %#v %#v %#v", a, b, c, d)
	}
}

func TestReadResizes(t *testing.T) {
	src := []int64{1, 2, 3}
	w := NewRegistry()
	must(t, w.Register("v", &src))
	data := encode(t, w)
	for _, init := range [][]int64{nil, {9}, make([]int64, 10, 100)} {
		dst := init
		r := NewRegistry()
		must(t, r.Register("v", &dst))
		if _, err := r.ReadFrom(bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(dst, src) {
			t.Fatalf("from %v: got %v", init, dst)
		}
	}
}

// noLen hides Len and Seek so ReadFrom takes the unknown-size path.
type noLen struct{ r io.Reader }

func (n noLen) Read(p []byte) (int, error) { return n.r.Read(p) }

func TestUnknownSizeReader(t *testing.T) {
	big := make([]float64, 3<<20/8+5) // > 2 chunks, not a multiple: exercises growth
	for i := range big {
		big[i] = float64(i)
	}
	rows := make([][]float64, 600) // > msgpackBufferMax: exercises the two-pass encoder
	for i := range rows {
		rows[i] = big[:1000]
	}
	w := NewRegistry()
	must(t, w.Register("big", &big))
	must(t, w.Register("rows", &rows))
	data := encode(t, w)

	var big2 []float64
	var rows2 [][]float64
	r := NewRegistry()
	must(t, r.Register("big", &big2))
	must(t, r.Register("rows", &rows2))
	if _, err := r.ReadFrom(noLen{bytes.NewReader(data)}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(big, big2) || !reflect.DeepEqual(rows, rows2) {
		t.Fatal("round trip through an unknown-size reader differs")
	}
}

func TestReadStopsAtTrailer(t *testing.T) {
	x := 7
	w := NewRegistry()
	must(t, w.Register("x", &x))
	data := append(encode(t, w), "rest"...)
	var y int
	r := NewRegistry()
	must(t, r.Register("x", &y))
	rd := noLen{bytes.NewReader(data)}
	if _, err := r.ReadFrom(rd); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(rd)
	if y != 7 || string(rest) != "rest" {
		t.Fatalf("y=%d rest=%q", y, rest)
	}
}

func TestRegisterErrors(t *testing.T) {
	var f float64
	var fn func()
	var ch chan int
	cases := []struct {
		name string
		ptr  any
		want error
	}{
		{"", &f, ErrInvalidName},
		{"a/b", &f, ErrInvalidName},
		{"../x", &f, ErrInvalidName},
		{strings.Repeat("x", MaxNameLen+1), &f, ErrInvalidName},
		{"nil", nil, ErrInvalidPointer},
		{"typednil", (*float64)(nil), ErrInvalidPointer},
		{"value", f, ErrInvalidPointer},
		{"fn", &fn, ErrInvalidPointer},
		{"ch", &ch, ErrInvalidPointer},
	}
	r := NewRegistry()
	for _, c := range cases {
		if err := r.Register(c.name, c.ptr); !errors.Is(err, c.want) {
			t.Errorf("Register(%q, %T) = %v, want %v", c.name, c.ptr, err, c.want)
		}
	}
	must(t, r.Register("ok.name-1_x", &f))
	if err := r.Register("ok.name-1_x", &f); !errors.Is(err, ErrDuplicate) {
		t.Errorf("duplicate: %v", err)
	}
	if r.Len() != 1 || r.Names()[0] != "ok.name-1_x" {
		t.Errorf("Names() = %v", r.Names())
	}
}

// read reads data into a registry built by reg and checks the error.
func expectMismatch(t *testing.T, data []byte, entry string, reg func(*Registry)) {
	t.Helper()
	r := NewRegistry()
	reg(r)
	_, err := r.ReadFrom(bytes.NewReader(data))
	var me *MismatchError
	if !errors.As(err, &me) || !errors.Is(err, ErrMismatch) || me.Entry != entry {
		t.Fatalf("got %v, want mismatch on %q", err, entry)
	}
}

func TestMismatch(t *testing.T) {
	u := []float64{1, 2}
	it := 5
	p := Params{Name: "x"}
	w := NewRegistry()
	must(t, w.Register("u", &u))
	must(t, w.Register("iter", &it))
	must(t, w.Register("p", &p))
	data := encode(t, w)

	var (
		u2  []float64
		it2 int
		p2  Params
	)
	t.Run("unknown", func(t *testing.T) {
		expectMismatch(t, data, "iter", func(r *Registry) { must(t, r.Register("u", &u2)); must(t, r.Register("p", &p2)) })
	})
	t.Run("missing", func(t *testing.T) {
		var extra string
		expectMismatch(t, data, "extra", func(r *Registry) {
			must(t, r.Register("u", &u2))
			must(t, r.Register("iter", &it2))
			must(t, r.Register("p", &p2))
			must(t, r.Register("extra", &extra))
		})
	})
	t.Run("elemType", func(t *testing.T) {
		var f32 []float32
		expectMismatch(t, data, "u", func(r *Registry) {
			must(t, r.Register("u", &f32))
			must(t, r.Register("iter", &it2))
			must(t, r.Register("p", &p2))
		})
	})
	t.Run("shape", func(t *testing.T) {
		var its []int
		expectMismatch(t, data, "iter", func(r *Registry) {
			must(t, r.Register("u", &u2))
			must(t, r.Register("iter", &its))
			must(t, r.Register("p", &p2))
		})
	})
	t.Run("encoding", func(t *testing.T) {
		var rows [][]float64
		expectMismatch(t, data, "u", func(r *Registry) {
			must(t, r.Register("u", &rows))
			must(t, r.Register("iter", &it2))
			must(t, r.Register("p", &p2))
		})
	})
	t.Run("msgpackKind", func(t *testing.T) {
		var s string
		expectMismatch(t, data, "p", func(r *Registry) {
			must(t, r.Register("u", &u2))
			must(t, r.Register("iter", &it2))
			must(t, r.Register("p", &s))
		})
	})
	t.Run("msgpackStructure", func(t *testing.T) {
		var other struct{ Name []int }
		expectMismatch(t, data, "p", func(r *Registry) {
			must(t, r.Register("u", &u2))
			must(t, r.Register("iter", &it2))
			must(t, r.Register("p", &other))
		})
	})
	if u2 != nil || it2 != 0 || p2.Name != "" {
		t.Fatal("a failed ReadFrom modified registered values")
	}
}

func TestWriteError(t *testing.T) {
	x := make([]float64, 1<<18)
	w := NewRegistry()
	must(t, w.Register("x", &x))
	boom := errors.New("disk full")
	_, err := w.WriteTo(failWriter{boom})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), `"x"`) {
		t.Fatalf("got %v", err)
	}
}

type failWriter struct{ err error }

func (f failWriter) Write([]byte) (int, error) { return 0, f.err }

func TestSize(t *testing.T) {
	u := make([]float64, 1000)
	var s struct{ A []float64 }
	s.A = make([]float64, 1000)
	r := NewRegistry()
	must(t, r.Register("u", &u))
	must(t, r.Register("s", &s))
	got := r.Size()
	actual := int64(len(encode(t, r)))
	if got < actual*9/10 || got > actual*11/10 {
		t.Fatalf("Size() = %d, actual %d", got, actual)
	}
}

// checksummingSink is a SummingWriter that records what it was given.
type checksummingSink struct {
	bytes.Buffer
	checked int // bytes given to WriteSummed
}

func (s *checksummingSink) WriteSummed(p []byte) (uint32, error) {
	s.checked += len(p)
	_, err := s.Write(p)
	return crc32.Checksum(p, castagnoli), err
}

// A SummingWriter gets the same stream as any writer, and the stream's CRCs are those of the
// data it was given.
func TestWriteToSummingWriter(t *testing.T) {
	big := make([]float64, 3*chunkSize/8+5) // several chunks, zero blocks and data
	for i := range big {
		if i%5000 < 700 {
			big[i] = float64(i)
		}
	}
	small, params := []int32{1, 2, 3}, Params{Name: "p", Steps: []int{4}}
	w := NewRegistry()
	must(t, w.Register("big", &big))
	must(t, w.Register("small", &small))
	must(t, w.Register("params", &params))
	var sink checksummingSink
	n, err := w.WriteTo(&sink)
	if err != nil || n != int64(sink.Len()) {
		t.Fatalf("WriteTo: %d, %v; %d bytes arrived", n, err, sink.Len())
	}
	if want := encode(t, w); !bytes.Equal(sink.Bytes(), want) {
		t.Fatal("the stream differs from the one written to a plain writer")
	}
	if sink.checked < 8*len(big) {
		t.Fatalf("%d bytes went through WriteSummed; the raw data is %d bytes", sink.checked, 8*len(big))
	}
}
