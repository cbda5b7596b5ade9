package sweep

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
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
	runReport(b, cfg, "s/sweep")
}

// BenchmarkBuiltinScale runs the adaptive arm once on each built-in
// production-size case (issue 12): the day-long trace on eval8, and
// steady's chat traffic scaled to fleet512 (64x, 384 req/s) and fleet1024
// (128x, 768 req/s) for its 10 minutes; it reports wall seconds per run
// and simulated requests per wall-second.
func BenchmarkBuiltinScale(b *testing.B) {
	for _, c := range []struct {
		name, trace, fleet string
		scale              float64
	}{
		{"day/eval8", "day", "eval8", 1},
		{"steady/fleet512", "steady", "fleet512", 64},
		{"steady/fleet1024", "steady", "fleet1024", 128},
	} {
		b.Run(c.name, func(b *testing.B) {
			tr, _ := load(b, c.trace)
			fl, err := fleet.Load(c.fleet)
			if err != nil {
				b.Fatal(err)
			}
			cfg := Config{Trace: tr, Fleet: fl, Arms: []string{"adaptive"}, Rates: []float64{c.scale * tr.MeanRate()}, Seed: tr.Seed, Workers: 1}
			runReport(b, cfg, "s/run")
		})
	}
}

// BenchmarkOracleFleet512 runs the oracle arm on fleet512: steady's chat
// traffic at 64x (384 req/s) for 120 s, about 46,000 requests, where the
// searches try a grid of split counts (docs/decisions/0012-split-grid.md).
func BenchmarkOracleFleet512(b *testing.B) {
	cfg := steadyOracle(b, 120, "fleet512")
	cfg.Rates = []float64{64 * cfg.Trace.MeanRate()}
	runReport(b, cfg, "s/run")
}

// BenchmarkOracle runs the oracle arm (the hindsight bound's search, its
// rivals and the per-phase oracle it starts from) on steady's chat
// traffic on eval8 at 6 req/s, NWB_ORACLE_REQUESTS requests long
// (default 20,000; the issue 12 figure is 1,000,000).
func BenchmarkOracle(b *testing.B) {
	n := 20000
	if v := os.Getenv("NWB_ORACLE_REQUESTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 100 {
			b.Fatalf("NWB_ORACLE_REQUESTS=%q: expected a count of at least 100", v)
		}
	}
	runReport(b, steadyOracle(b, n/6, "eval8"), "s/run")
}

// steadyOracle is a sweep of the oracle arm alone on steady's chat
// traffic lasting seconds, on the named fleet, at the trace's own rate.
func steadyOracle(b *testing.B, seconds int, fleetName string) Config {
	spec, err := os.ReadFile(filepath.Join("..", "traces", "steady.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	src := strings.Replace(string(spec), "duration: 600s", fmt.Sprintf("duration: %ds", seconds), 1)
	path := filepath.Join(b.TempDir(), "steady.yaml")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		b.Fatal(err)
	}
	tr, err := traces.Open(path, "")
	if err != nil {
		b.Fatal(err)
	}
	fl, err := fleet.Load(fleetName)
	if err != nil {
		b.Fatal(err)
	}
	return Config{Trace: tr, Fleet: fl, Arms: []string{"oracle"}, Seed: tr.Seed}
}

// runReport runs cfg b.N times and reports seconds per run (as unit) and
// simulated requests per second (the oracle's replays not counted); it
// returns the requests simulated.
func runReport(b *testing.B, cfg Config, unit string) int {
	b.Helper()
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
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), unit)
	return reqs
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
	reqs := runReport(b, cfg, "s/run")
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(reqs), "ns/request")
	b.ReportMetric(float64(ms.Sys)/(1<<20), "MiB-sys")
}
