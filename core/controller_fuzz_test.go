package core

import (
	"math"
	"strconv"
	"strings"
	"testing"
)

// FuzzNewController: any arm name, for any fleet of 1 or more, builds a
// controller or says why, without a panic. An error names the arm. A
// static or hybrid split is k >= 1 prefill and n-k >= 1 others; a dynamo
// or ray arm's parameters stay within docs/baselines.md's ranges (start,
// busy, upscale >= 0; interval > 0; target >= 0.001; maxongoing a whole number
// from 0 to 1e9), the ones the name does not set at their defaults.
func FuzzNewController(f *testing.F) {
	for _, arm := range []string{
		"static:3P5D", "static:1P7D/alg1", "static:0P8D", "static:99999999999999999999P1D", "hybrid:1P7M", "hybrid:8P0M",
		"aggregated", "adaptive", "arrow", "planner", "coldswap", "dynamo", "ray", "oracle", "phase-oracle",
		"dynamo:start=30s", "dynamo:busy=0", "dynamo:busy=4/interval=60s", "dynamo:interval=0s", "dynamo:busy=NaN",
		"dynamo:start=-1s", "dynamo:start=30", "ray:start=0s/target=8", "ray:target=1e9", "ray:target=0",
		"ray:maxongoing=64", "ray:maxongoing=1.5", "ray:maxongoing=2e9", "ray:upscale=0s", "ray:busy=1", "ray:",
		"dynamo:start=9223372036s", "ray:target=+Inf", "", "static:", "Static:3P5D",
	} {
		f.Add(arm, 8)
	}
	f.Fuzz(func(t *testing.T, arm string, n int) {
		if n < 1 {
			return // a fleet has an instance or more
		}
		c, err := NewController(arm, n)
		if err != nil {
			if c != nil || !strings.HasPrefix(err.Error(), "arm "+strconv.Quote(arm)+": ") {
				t.Fatalf("%q on %d: %v, %v", arm, n, c, err)
			}
			return
		}
		switch x := c.(type) {
		case *Static:
			if x.Prefill < 1 || x.Prefill > n-1 {
				t.Fatalf("%q on %d: %d prefill", arm, n, x.Prefill)
			}
		case *Hybrid:
			if x.Prefill < 1 || x.Prefill > n-1 {
				t.Fatalf("%q on %d: %d prefill", arm, n, x.Prefill)
			}
		case *Dynamo:
			d := x.Cfg
			if d.StartupDelay < 0 || d.Interval <= 0 || !(d.BusyTTFT >= 0) || math.IsInf(d.BusyTTFT, 0) {
				t.Fatalf("%q: %+v", arm, d)
			}
			d.StartupDelay, d.Interval, d.BusyTTFT = DefaultDynamo.StartupDelay, DefaultDynamo.Interval, DefaultDynamo.BusyTTFT
			if d != DefaultDynamo {
				t.Fatalf("%q: %+v: a parameter no key sets moved", arm, x.Cfg)
			}
		case *Ray:
			r := x.Cfg
			if r.StartupDelay < 0 || r.UpscaleDelay < 0 || !(r.TargetOngoing >= 0.001) || math.IsInf(r.TargetOngoing, 0) || r.MaxOngoing < 0 || r.MaxOngoing > 1e9 {
				t.Fatalf("%q: %+v", arm, r)
			}
			r.StartupDelay, r.UpscaleDelay, r.TargetOngoing, r.MaxOngoing = DefaultRay.StartupDelay, DefaultRay.UpscaleDelay, DefaultRay.TargetOngoing, DefaultRay.MaxOngoing
			if r != DefaultRay {
				t.Fatalf("%q: %+v: a parameter no key sets moved", arm, x.Cfg)
			}
		}
	})
}
