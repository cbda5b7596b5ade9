package journal

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// BenchmarkRecordLatency measures how long each Writer.Record call takes
// under SyncEveryBatch while another goroutine calls Flush every
// flushEvery records (as `serve` flushes once a second), on a real
// directory. It reports percentiles of the single calls, the worst call,
// and how many calls per million took over 100 µs: an fsync waited for on
// the appending goroutine shows up there.
//
// "paced" records arrive open-loop every gap (a router below saturation:
// the disk keeps up on average, so no design needs to make Record wait);
// "flat-out" appends as fast as it can, so the disk is the bottleneck and
// any bounded writer must make Record wait for it. Run with:
//
//	go test -run '^$' -bench BenchmarkRecordLatency -benchtime 200000x ./journal/
func BenchmarkRecordLatency(b *testing.B) {
	const flushEvery = 2000
	recs := benchRecords()
	for _, c := range []struct {
		gap   time.Duration // 0: flat out
		batch int
	}{{10 * time.Microsecond, 256}, {10 * time.Microsecond, DefaultBatchRecords}, {0, DefaultBatchRecords}} {
		name := fmt.Sprintf("paced=%v/batch=%d", c.gap, c.batch)
		if c.gap == 0 {
			name = fmt.Sprintf("flat-out/batch=%d", c.batch)
		}
		b.Run(name, func(b *testing.B) {
			dir := filepath.Join(b.TempDir(), "run")
			w, err := Create(dir, testMeta("bench", 1), Options{Sync: SyncEveryBatch, BatchRecords: c.batch})
			if err != nil {
				b.Fatal(err)
			}
			kick := make(chan struct{}, 1)
			flushed := make(chan error)
			go func() {
				var ferr error
				for range kick {
					if err := w.Flush(); err != nil && ferr == nil {
						ferr = err
					}
				}
				flushed <- ferr
			}()
			lat := make([]time.Duration, b.N)
			var r event.Record
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				// Open loop: record i arrives at start + i*gap; one that
				// arrives while Record is blocked runs as soon as it returns.
				for due := time.Duration(i) * c.gap; time.Since(start) < due; {
				}
				r = recs[i%len(recs)]
				t := time.Now()
				w.Record(&r)
				lat[i] = time.Since(t)
				if i%flushEvery == flushEvery-1 {
					select {
					case kick <- struct{}{}:
					default: // a Flush is still running
					}
				}
			}
			b.StopTimer()
			close(kick)
			if err := <-flushed; err != nil {
				b.Fatal(err)
			}
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
			slow := 0
			for _, d := range lat {
				if d > 100*time.Microsecond {
					slow++
				}
			}
			slices.Sort(lat)
			q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Nanoseconds()) }
			b.ReportMetric(q(0.5), "p50-ns")
			b.ReportMetric(q(0.99), "p99-ns")
			b.ReportMetric(q(0.999), "p99.9-ns")
			b.ReportMetric(q(0.9999), "p99.99-ns")
			b.ReportMetric(float64(lat[len(lat)-1].Nanoseconds()), "max-ns")
			b.ReportMetric(1e6*float64(slow)/float64(b.N), "over100µs/M")
		})
	}
}
