package traces

import (
	"reflect"
	"runtime"
	"testing"
)

// collect drains a stream.
func collect(t testing.TB, st *Stream) []Request {
	t.Helper()
	var out []Request
	var r Request
	for st.Next(&r) {
		out = append(out, r)
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if st.Next(&r) {
		t.Fatal("Next handed out a request after the end")
	}
	return out
}

// streamSpecs covers every phase kind, prefix scopes, and arrival
// processes.
const streamSpec = `
name: kinds
classes:
  chat:
    input:  {dist: lognormal, median: 600, sigma: 0.6, min: 16, max: 8192}
    output: {dist: normal, mean: 250, stddev: 100, min: 8, max: 2048}
    output_cap: 400
  doc:
    input:  {dist: uniform, min: 6000, max: 9000}
    output: {dist: empirical, values: [50, 100, 200], weights: [1, 2, 1]}
    prefix: {groups: 50, tokens: {dist: uniform, min: 5000, max: 6000}, scope: phase}
  code:
    input:  {dist: fixed, value: 300}
    output: {dist: uniform, min: 10, max: 20}
    prefix: {groups: 3, tokens: {dist: fixed, value: 100}}
phases:
  - {duration: 60s, rate: 20, mix: {chat: 2, doc: 1, code: 1}}
  - {duration: 30s, rate: 0, mix: {chat: 1}}
  - {duration: 40s, requests: 700, mix: {chat: 1, doc: 2}}
  - {duration: 50s, counts: {chat: 100, doc: 30, code: 7}}
  - {duration: 20s, rate: 5, mix: {code: 1}, arrival: {process: uniform}}
  - {duration: 20s, rate: 9, mix: {chat: 1}, arrival: {process: gamma, cv: 3}}
`

// Stream hands out exactly what Generate returns, for every built-in
// trace and a spec with every phase kind, at several seeds and scales,
// with and without bursty arrivals and batches.
func TestStreamEqualsGenerate(t *testing.T) {
	var all []*Trace
	for _, name := range Builtin() {
		tr, err := Open(name, "")
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, tr)
	}
	sp := mustParse(t, streamSpec)
	all = append(all, &Trace{Name: sp.Name, Spec: sp})
	for _, tr := range all {
		for _, burst := range [][2]float64{{0, 0}, {2, 0}, {0, 4}, {0.5, 2.5}} {
			bt, err := tr.WithBurst(burst[0], burst[1])
			if err != nil {
				t.Fatal(err)
			}
			for _, seed := range []uint64{1, 7, 99} {
				for _, scale := range []float64{0.3, 1, 2.7} {
					want, err := bt.Generate(seed, scale)
					if err != nil {
						t.Fatal(err)
					}
					st, err := bt.Stream(seed, scale)
					if err != nil {
						t.Fatal(err)
					}
					if got := collect(t, st); !reflect.DeepEqual(got, want) {
						t.Fatalf("%s seed %d scale %v: stream of %d requests differs from Generate's %d", bt.Name, seed, scale, len(got), len(want))
					}
				}
			}
		}
	}
}

// An imported trace streams the requests Generate returns: scaled, kept
// inside their phases, batched.
func TestStreamImported(t *testing.T) {
	for _, arg := range []string{"azure/code.csv", "azure/code.csv+azure/conv.csv"} {
		tr, err := Open(arg, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, batch := range []float64{0, 3} {
			bt, err := tr.WithBurst(0, batch)
			if err != nil {
				t.Fatal(err)
			}
			for _, scale := range []float64{0.5, 1, 3} {
				want, err := bt.Generate(2, scale)
				if err != nil {
					t.Fatal(err)
				}
				st, err := bt.Stream(2, scale)
				if err != nil {
					t.Fatal(err)
				}
				if got := collect(t, st); !reflect.DeepEqual(got, want) {
					t.Fatalf("%s scale %v: stream differs from Generate", bt.Name, scale)
				}
			}
		}
	}
}

// A stream holds no request it handed out: streaming 300,000 requests
// allocates a few kilobytes, not the 64 bytes a request Generate needs.
func TestStreamHoldsNoTrace(t *testing.T) {
	sp := mustParse(t, `
name: long
classes:
  chat:
    input:  {dist: lognormal, median: 600, sigma: 0.6, min: 16, max: 8192}
    output: {dist: lognormal, median: 450, sigma: 0.5, min: 8, max: 4096}
phases:
  - {duration: 50000s, rate: 6, mix: {chat: 1}}
`)
	st, err := sp.Stream(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	n := 0
	var r Request
	for st.Next(&r) {
		n++
	}
	runtime.ReadMemStats(&after)
	if n < 290000 {
		t.Fatalf("%d requests, want about 300,000", n)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<10 {
		t.Fatalf("streaming %d requests allocated %d bytes: expected no allocation per request", n, got)
	}
}

// A spec beyond what Generate materialises (MaxRequests) still streams,
// up to MaxStreamRequests; Generate refuses it before generating.
func TestStreamLimits(t *testing.T) {
	sp := mustParse(t, `
name: big
classes:
  chat:
    input:  {dist: fixed, value: 10}
    output: {dist: fixed, value: 10}
phases:
  - {duration: 1000h, rate: 10, mix: {chat: 1}}
`)
	if _, err := sp.Generate(1, 1); err == nil {
		t.Fatal("Generate accepted 36M requests")
	}
	st, err := sp.Stream(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	var r Request
	for i := 0; i < 1000; i++ {
		if !st.Next(&r) {
			t.Fatalf("stream ended after %d requests: %v", i, st.Err())
		}
	}
	if _, err := sp.Stream(1, 100); err == nil {
		t.Fatal("Stream accepted 3.6e9 requests")
	}
}
