package traces

import (
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// validSeeds are small valid traces that use every feature, so that the
// fuzzer's mutations often stay valid and reach Generate.
var validSeeds = []string{`
name: all
arrival: {process: gamma, burstiness: 0.3}
base_rate: 3
classes:
  a:
    input: {dist: normal, mean: 50, stddev: 20, min: 2, max: 90}
    output: {dist: lognormal, median: 20, sigma: 1, max: 200}
    output_cap: 30
    prefix: {groups: 3, tokens: {dist: empirical, values: [5, 60], weights: [1, 2]}}
  b:
    input: {dist: uniform, min: 1, max: 9}
    output: {dist: fixed, value: 4}
phases:
  - {duration: 2s, rate: 5, mix: {a: 1, b: 2}}
  - {duration: 3s, rate_multiplier: 0.5, mix: {a: 1}, arrival: {process: uniform}}
  - {duration: 1s, requests: 7, mix: {b: 1}, arrival: {process: poisson}}
  - {duration: 1500ms, counts: {a: 2, b: 3}}
`, `
name: tiny
classes: {x: {input: {dist: fixed, value: 1}, output: {dist: fixed, value: 1}}}
phases: [{duration: 1ns, rate: 1e9, mix: {x: 1}}]
`}

// FuzzParse checks that Parse never panics, that whatever it accepts is
// valid, and that an accepted spec generates a well-formed trace at scale 1.
func FuzzParse(f *testing.F) {
	for _, name := range Builtin() {
		data, _ := builtinData(name)
		f.Add(data)
	}
	for _, src := range validSeeds {
		if _, err := Parse([]byte(src), "seed"); err != nil {
			f.Fatal(err)
		}
		f.Add([]byte(src))
	}
	bad, err := filepath.Glob("testdata/*.bad.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range bad {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data, "fuzz.yaml")
		if err != nil {
			if s != nil || err.Error() == "" {
				t.Fatalf("Parse: spec %v with error %q", s, err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("Parse accepted an invalid spec: %v", err)
		}
		if s.ExpectedRequests(1) > 200_000 {
			return // keep each fuzz input cheap
		}
		reqs, err := s.Generate(s.Seed, 1)
		if err != nil {
			t.Fatalf("Generate: %v", err)
		}
		checkInvariants(t, s, reqs)
	})
}

// FuzzGenerate builds specs from fuzzed parameters and checks that every
// valid one generates a well-formed trace at any scale, and streams the
// same requests.
func FuzzGenerate(f *testing.F) {
	f.Add(uint64(1), 1.0, 5.0, int64(10_000), uint8(0), 1.0, 1, 100, 50.0, 10.0, uint8(0), 3)
	f.Add(uint64(7), 2.5, 0.5, int64(60_000), uint8(2), 0.05, 10, 10, 1.0, 3.0, uint8(3), 1)
	f.Add(uint64(0), 0.01, 1000.0, int64(1), uint8(1), 0.0, 5, 6, 1e9, 1e-9, uint8(2), 0)
	f.Fuzz(func(t *testing.T, seed uint64, scale, rate float64, durMs int64, process uint8, k float64,
		lo, hi int, mean, spread float64, dist uint8, requests int) {
		a := Arrival{Process: []string{"poisson", "uniform", "gamma", ""}[process%4]}
		if a.Process == ProcessGamma {
			a.Burstiness = k
		}
		d := Dist{Kind: []string{DistUniform, DistNormal, DistLognormal, DistEmpirical}[dist%4], Min: &lo, Max: &hi}
		switch d.Kind {
		case DistNormal:
			d.Mean, d.Stddev = &mean, &spread
		case DistLognormal:
			d.Median, d.Sigma = &mean, &spread
		case DistEmpirical:
			d.Min, d.Max = nil, nil
			d.Values, d.Weights = []int{lo, hi}, []float64{mean, spread}
		}
		one := 1
		s := &Spec{
			Name:    "fuzz",
			Arrival: a,
			Classes: map[string]Class{
				"c": {Input: d, Output: d, OutputCap: 3, Prefix: &Prefix{Groups: 2, Tokens: d}},
				"f": {Input: Dist{Kind: DistFixed, Value: &one}, Output: d},
			},
			Phases: []Phase{
				{Duration: time.Duration(durMs) * time.Millisecond, Rate: &rate, Mix: map[string]float64{"c": 1, "f": 1}},
				{Duration: time.Second, Requests: &requests, Mix: map[string]float64{"c": 2}},
				{Duration: time.Second, Counts: map[string]int{"c": requests, "f": 1}},
			},
		}
		if s.Validate() != nil {
			return
		}
		if !(scale > 0) || math.IsInf(scale, 0) {
			if _, err := s.Generate(seed, scale); err == nil {
				t.Fatalf("Generate accepted scale %v", scale)
			}
			return
		}
		if !(s.ExpectedRequests(scale) <= 200_000) {
			return // keep each fuzz input cheap
		}
		reqs, err := s.Generate(seed, scale)
		if err != nil {
			t.Fatalf("Generate: %v", err)
		}
		checkInvariants(t, s, reqs)
		// The stream hands out the same requests, one at a time.
		st, err := s.Stream(seed, scale)
		if err != nil {
			t.Fatalf("Stream: %v", err)
		}
		var r Request
		for i := range reqs {
			if !st.Next(&r) || r != reqs[i] {
				t.Fatalf("Stream: request %d is %+v, Generate's %+v (err %v)", i, r, reqs[i], st.Err())
			}
		}
		if st.Next(&r) {
			t.Fatalf("Stream: more than Generate's %d requests", len(reqs))
		}
	})
}
