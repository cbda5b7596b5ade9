package sweep

import (
	"testing"

	"github.com/narwhal-bench/narwhal-bench/core"
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
