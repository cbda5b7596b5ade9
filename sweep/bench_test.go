package sweep

import (
	"runtime"
	"testing"
	"time"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/fleet"
	"github.com/narwhal-bench/narwhal-bench/traces"
)

// BenchmarkDemoSweep runs the whole demo sweep (every static split,
// aggregated and adaptive at the eight demo rates on 8 instances) and
// reports simulated requests per wall-second and the sweep's wall time.
func BenchmarkDemoSweep(b *testing.B) {
	tr, fl := load(b, "demo")
	arms := append(core.StaticArms(8), "aggregated", "adaptive")
	cfg := Config{Trace: tr, Fleet: fl, Arms: arms, Rates: []float64{0.6, 1.0, 1.6, 2.4, 3.2, 4.4, 5.4, 6.4}, Seed: tr.Seed}
	var reqs int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := Execute(cfg)
		if err != nil {
			b.Fatal(err)
		}
		reqs += res.Requests
	}
	b.ReportMetric(float64(reqs)/b.Elapsed().Seconds(), "requests/s")
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/sweep")
}

// BenchmarkStreamedRun runs the adaptive arm on eval8 over the first
// 166,667 s of bench/steady-10m.yaml (about 1,000,000 requests, one
// tenth of the scale benchmark): each run streams its requests and scores
// them as they end, so memory follows the requests in flight. It reports
// simulated requests per wall-second, wall time per request, and the
// memory the Go runtime holds from the system (MiB-sys: an upper bound of
// the heap's peak, about the process's RSS less its binary).
func BenchmarkStreamedRun(b *testing.B) {
	tr, err := traces.Open("../bench/steady-10m.yaml", "")
	if err != nil {
		b.Fatal(err)
	}
	sp := *tr.Spec
	sp.Phases = append([]traces.Phase(nil), sp.Phases...)
	sp.Phases[0].Duration = 166667 * time.Second
	tr = &traces.Trace{Name: sp.Name, Fleet: sp.Fleet, Seed: sp.Seed, Spec: &sp}
	fl, err := fleet.Load("eval8")
	if err != nil {
		b.Fatal(err)
	}
	cfg := Config{Trace: tr, Fleet: fl, Arms: []string{"adaptive"}, Seed: tr.Seed, Workers: 1}
	var reqs int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := Execute(cfg)
		if err != nil {
			b.Fatal(err)
		}
		reqs += res.Requests
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(reqs)/b.Elapsed().Seconds(), "requests/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(reqs), "ns/request")
	b.ReportMetric(float64(ms.Sys)/(1<<20), "MiB-sys")
}
