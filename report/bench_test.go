package report

import (
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/journal"
)

// bench1M is a 1,000,000-request single-run journal, built once per test
// binary (outside the timer) and removed by TestMain.
var (
	bench1MOnce sync.Once
	bench1MDir  string
	bench1MErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if bench1MDir != "" {
		os.RemoveAll(filepath.Dir(bench1MDir))
	}
	os.Exit(code)
}

// write1M writes n requests of about six records each (arrival, admit,
// prefill start and done, decode start, terminal), a mix of outcomes, and
// a role move every 5000 requests.
func write1M(dir string, n int) error {
	w, err := journal.Create(dir, event.RunMeta{Version: "bench", Driver: "sim", Arm: "adaptive", Rate: 50, Trace: "bench",
		Fleet: "bench", Instances: 16, GPUs: 16, TTFTSLO: 1, TPOTSLO: 0.05}, journal.Options{Sync: journal.SyncOnClose})
	if err != nil {
		return err
	}
	var r event.Record
	put := func(x event.Record) {
		r = x
		w.Record(&r)
	}
	for i := 0; i < 16; i++ {
		to := event.RoleDecode
		if i < 6 {
			to = event.RolePrefill
		}
		put(event.Record{Kind: event.KindRoleMove, Inst: event.Instance(i), Peer: event.NoInstance, From: event.RoleNone, To: to})
	}
	x := uint64(0x9e3779b97f4a7c15)
	rnd := func(k uint64) uint64 { // xorshift, deterministic
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return x % k
	}
	classes := []string{"chat", "code", "batch"}
	for i := 1; i <= n; i++ {
		id := event.RequestID(i)
		sched := event.Time(i) * 20 * event.Millisecond
		at := sched + event.Time(rnd(1000))*event.Microsecond
		inst := event.Instance(rnd(16))
		if i%5000 == 0 {
			from, to := event.RoleDecode, event.RolePrefill
			if i%10000 == 0 {
				from, to = to, from
			}
			put(event.Record{At: at, Kind: event.KindRoleMove, Inst: inst, Peer: event.NoInstance, From: from, To: to, Cause: event.CauseController})
		}
		put(event.Record{At: at, Kind: event.KindArrival, Req: id, Inst: event.NoInstance, Peer: event.NoInstance, Ref: sched,
			Tokens: int64(100 + rnd(4000)), Want: int64(10 + rnd(500)), Class: classes[rnd(3)]})
		if rnd(100) < 3 {
			put(event.Record{At: at, Kind: event.KindRefuse, Req: id, Inst: event.NoInstance, Peer: event.NoInstance, Cause: event.CauseOverload})
			continue
		}
		admit := at + event.Time(rnd(5000))*event.Microsecond
		put(event.Record{At: admit, Kind: event.KindAdmit, Req: id, Inst: inst, Peer: event.NoInstance})
		put(event.Record{At: admit, Kind: event.KindPrefillStart, Req: id, Inst: inst, Peer: event.NoInstance})
		first := admit + event.Time(50+rnd(1500))*event.Millisecond
		put(event.Record{At: first, Kind: event.KindPrefillDone, Req: id, Inst: inst, Peer: event.NoInstance})
		put(event.Record{At: first, Kind: event.KindDecodeStart, Req: id, Inst: inst, Peer: inst})
		out := int64(2 + rnd(300))
		end := first + event.Time(out)*event.Time(20+rnd(60))*event.Millisecond
		cause := event.CauseStop
		if rnd(10) == 0 {
			cause = event.CauseLength
		}
		put(event.Record{At: end, Kind: event.KindFinish, Req: id, Inst: inst, Peer: event.NoInstance, Tokens: out, Cause: cause})
	}
	return w.Close()
}

func build1M(b *testing.B) string {
	bench1MOnce.Do(func() {
		root, err := os.MkdirTemp("", "report-bench-1m-")
		if err != nil {
			bench1MErr = err
			return
		}
		bench1MDir = filepath.Join(root, "adaptive@50")
		bench1MErr = write1M(bench1MDir, 1_000_000)
	})
	if bench1MErr != nil {
		b.Fatal(bench1MErr)
	}
	return bench1MDir
}

// BenchmarkReport1M loads and prints the report of a 1,000,000-request
// single-run journal (about 6 million records), built outside the timer.
// Target: at most 3 s per report. peak-heap-MB is the largest live heap
// seen by a sampler during the last iteration: the run's folded rows
// (the fold holds one run at a time) plus the percentile samples.
//
//	go test -run '^$' -bench BenchmarkReport1M -benchtime 3x ./report/
func BenchmarkReport1M(b *testing.B) { benchReport(b, build1M(b)) }

// BenchmarkReport1MParquet is BenchmarkReport1M reading the run's Parquet
// export (exported outside the timer) instead of its journal.
//
//	go test -run '^$' -bench 'BenchmarkReport1M' -benchtime 2x ./report/
func BenchmarkReport1MParquet(b *testing.B) {
	dir := build1M(b)
	out := filepath.Join(filepath.Dir(dir), "parquet")
	if !journal.IsExport(out) {
		if _, err := journal.Export(dir, out); err != nil {
			b.Fatal(err)
		}
	}
	benchReport(b, out)
}

func benchReport(b *testing.B, dir string) {
	b.ReportAllocs()
	var peak uint64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		stop := make(chan struct{})
		done := make(chan uint64)
		if i == b.N-1 {
			go func() { // sample the live heap every 20 ms
				var ms runtime.MemStats
				var hi uint64
				for {
					runtime.ReadMemStats(&ms)
					hi = max(hi, ms.HeapAlloc)
					select {
					case <-stop:
						done <- hi
						return
					default:
					}
					select {
					case <-stop:
						done <- hi
						return
					case <-time20ms():
					}
				}
			}()
		}
		r, err := Load(dir, Options{})
		if err != nil {
			b.Fatal(err)
		}
		if r.Runs[0].Offered != 1_000_000 || r.Runs[0].Groups.Sum() != 1_000_000 {
			b.Fatalf("offered %d", r.Runs[0].Offered)
		}
		for _, f := range allFormats {
			if err := r.Write(io.Discard, f); err != nil {
				b.Fatal(err)
			}
		}
		if i == b.N-1 {
			close(stop)
			peak = <-done
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
	b.ReportMetric(1e6*float64(b.N)/b.Elapsed().Seconds(), "requests/s")
}

func time20ms() <-chan time.Time { return time.After(20 * time.Millisecond) }
