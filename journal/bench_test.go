package journal

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// benchRecords is a pool of realistic records the append benchmark cycles
// through (about 6 records per request).
var benchRecords = sync.OnceValue(func() []event.Record {
	var out []event.Record
	synth(50000, 11, func(r *event.Record) { out = append(out, *r) })
	return out
})

// BenchmarkAppend measures Writer.Record throughput, Close included, for
// both sync policies. Run with:
//
//	go test -run '^$' -bench BenchmarkAppend -benchtime 3000000x ./journal/
func BenchmarkAppend(b *testing.B) {
	recs := benchRecords()
	for _, pol := range []SyncPolicy{SyncOnClose, SyncEveryBatch} {
		b.Run(pol.String(), func(b *testing.B) {
			dir := filepath.Join(b.TempDir(), "run")
			w, err := Create(dir, testMeta("bench", 1), Options{Sync: pol})
			if err != nil {
				b.Fatal(err)
			}
			var r event.Record
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r = recs[i%len(recs)]
				w.Record(&r)
			}
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// export1M is a 1,000,000-request single-run journal, built once per test
// binary and removed by TestMain.
var (
	export1MOnce sync.Once
	export1MRoot string
	export1MErr  error
)

func build1M(b *testing.B) string {
	export1MOnce.Do(func() {
		root, err := os.MkdirTemp("", "journal-bench-1m-")
		if err != nil {
			export1MErr = err
			return
		}
		export1MRoot = root
		w, err := Create(filepath.Join(root, "run-1m"), testMeta("static:3P5D", 6.4), Options{Sync: SyncOnClose})
		if err != nil {
			export1MErr = err
			return
		}
		synth(1_000_000, 42, w.Record)
		export1MErr = w.Close()
	})
	if export1MErr != nil {
		b.Fatal(export1MErr)
	}
	return export1MRoot
}

func TestMain(m *testing.M) {
	code := m.Run()
	if export1MRoot != "" {
		os.RemoveAll(export1MRoot)
	}
	os.Exit(code)
}

// BenchmarkExport1M exports a 1,000,000-request run (about 6.2 million
// records). "full" is Export end to end (replay, fold, all five tables);
// "requests-table" is only the requests.parquet write of the folded rows,
// the part with the 2 s target. The journal is built outside the timer.
//
//	go test -run '^$' -bench BenchmarkExport1M -benchtime 3x ./journal/
func BenchmarkExport1M(b *testing.B) {
	root := build1M(b)
	b.Run("full", func(b *testing.B) {
		out := b.TempDir()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			st, err := Export(root, out)
			if err != nil {
				b.Fatal(err)
			}
			if st.Requests != 1_000_000 {
				b.Fatalf("exported %d requests", st.Requests)
			}
		}
		b.StopTimer()
		b.ReportMetric(1e6*float64(b.N)/b.Elapsed().Seconds(), "requests/s")
	})
	b.Run("replay-fold", func(b *testing.B) {
		r, err := Open(filepath.Join(root, "run-1m"))
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			rows, err := Fold(r)
			if err != nil || len(rows) != 1_000_000 {
				b.Fatal(len(rows), err)
			}
		}
	})
	b.Run("requests-table", func(b *testing.B) {
		r, err := Open(filepath.Join(root, "run-1m"))
		if err != nil {
			b.Fatal(err)
		}
		rows, err := Fold(r)
		m := r.Meta()
		r.Close()
		if err != nil {
			b.Fatal(err)
		}
		out := b.TempDir()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			e := &exporter{}
			if e.requests, err = newTable[requestRow](out, RequestsFile); err != nil {
				b.Fatal(err)
			}
			slo := sloOf(m)
			for k := range rows {
				if err := e.requests.add(requestRowOf("run-1m", m, slo, &rows[k])); err != nil {
					b.Fatal(err)
				}
			}
			if err := e.requests.complete(); err != nil {
				b.Fatal(err)
			}
			if err := e.requests.publish(); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		if st, err := os.Stat(filepath.Join(out, RequestsFile)); err == nil {
			b.ReportMetric(float64(st.Size())/1e6, "MB")
		}
	})
}
