package report

import (
	"bytes"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/journal"
)

// writeInterleavedRun writes a run of n requests that overlap: each ends
// up to 40 arrivals later, so requests end out of order and the journal's
// rows end long after later ones arrive. Arrivals are gap seconds apart.
// Some carry a reference answer and a response (the quality table's F1).
func writeInterleavedRun(t testing.TB, dir string, n int, gap float64, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	f := newFixtureRun(t, dir, fixtureMeta("adaptive", 1/gap, 8))
	f.roles(4, 4, false)
	var recs []event.Record
	words := []string{"alpha", "beta", "gamma", "delta", "kv", "cache", "decode"}
	text := func(k int) string {
		var b bytes.Buffer
		for i := 0; i < k; i++ {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(words[rng.IntN(len(words))])
		}
		return b.String()
	}
	for i := 0; i < n; i++ {
		id := event.RequestID(i + 1)
		sched := sec(float64(i) * gap)
		arr := sched + event.Millisecond
		a := event.Record{At: arr, Kind: event.KindArrival, Req: id, Ref: sched, Tokens: int64(1 + rng.IntN(4000)), Want: int64(1 + rng.IntN(300)),
			Class: []string{"chat", "doc", "code"}[rng.IntN(3)]}
		if rng.IntN(4) == 0 {
			a.Text = text(1 + rng.IntN(6))
		}
		recs = append(recs, a)
		if rng.IntN(20) == 0 {
			recs = append(recs, event.Record{At: arr, Kind: event.KindRefuse, Req: id, Cause: event.CauseOverload})
			continue
		}
		admit := arr + sec(rng.Float64()*gap)
		first := admit + sec(rng.Float64()*10*gap)
		end := first + sec(rng.Float64()*30*gap)
		inst := event.Instance(rng.IntN(4))
		recs = append(recs,
			event.Record{At: admit, Kind: event.KindAdmit, Req: id, Inst: inst},
			event.Record{At: admit, Kind: event.KindPrefillStart, Req: id, Inst: inst},
			event.Record{At: first, Kind: event.KindPrefillDone, Req: id, Inst: inst},
			event.Record{At: first, Kind: event.KindDecodeStart, Req: id, Inst: 4 + inst, Cause: event.CauseCrossed})
		fin := event.Record{At: end, Kind: event.KindFinish, Req: id, Inst: 4 + inst, Tokens: int64(1 + rng.IntN(200)), Cause: event.CauseStop}
		if a.Text != "" && rng.IntN(3) > 0 {
			fin.Text = text(1 + rng.IntN(6))
		}
		recs = append(recs, fin)
	}
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].At < recs[j].At })
	for _, r := range recs {
		f.rec(r)
	}
	f.close()
}

// Reading a run row by row as its requests end (a journal, letting ended
// rows go) or a row group at a time (an export) gives the report of its
// rows read whole: the same text, JSON, CSV and work bins. The run is
// longer than a Parquet row group (2^17 rows) and than the fold's chunks,
// its requests end out of order, and its arrivals span more than maxBins
// work bins, so the bins widen while it is read.
func TestStreamedReportMatchesWholeRows(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 135,000-request journal")
	}
	root := t.TempDir()
	dir := filepath.Join(root, "adaptive@0.2")
	const n, gap = 135000, 5.0 // 675,000 s of arrivals: more than maxBins bins of WorkBin
	writeInterleavedRun(t, dir, n, gap, 3)
	out := filepath.Join(t.TempDir(), "parquet")
	if _, err := journal.Export(root, out); err != nil {
		t.Fatal(err)
	}

	// The rows read whole, as the report read them before it streamed.
	r, err := journal.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	var fold event.Fold
	var moves []event.Record
	if err := r.Replay(func(rec *event.Record) error {
		fold.Record(rec)
		if rec.Kind == event.KindRoleMove {
			moves = append(moves, *rec)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := fold.Err(); err != nil {
		t.Fatal(err)
	}
	rows := fold.Rows()
	b := newBuilder(Options{})
	a := b.begin(journal.RunName(dir), "", r.Meta())
	for i := range rows {
		b.row(a, &rows[i])
	}
	b.end(a, moves)
	whole := b.finish()
	r.Close()

	// The work bins, binned directly at the width the run's span needs.
	w := WorkBin
	var last event.Time
	for i := range rows {
		last = max(last, rows[i].Arrival)
	}
	for last/w >= maxBins {
		w *= 2
	}
	if w == WorkBin {
		t.Fatalf("the run's arrivals (last %v) fit %d bins of %v: the test does not widen the bins", last, maxBins, WorkBin)
	}
	pre, dec := make([]int64, last/w+1), make([]int64, last/w+1)
	for i := range rows {
		pre[rows[i].Arrival/w] += rows[i].InputTokens
		dec[rows[i].Arrival/w] += rows[i].WantOutput
	}
	if pl := whole.plots[0]; pl.binWidth != w || !reflect.DeepEqual(pl.prefill, pre) || !reflect.DeepEqual(pl.decode, dec) {
		t.Fatalf("work bins: width %v (%d bins), want %v (%d bins), or their sums differ", pl.binWidth, len(pl.prefill), w, len(pre))
	}
	if !whole.HasReferences {
		t.Fatal("no reference answers in the run: the quality sums are not compared")
	}

	for _, src := range []string{root, out} {
		got := load(t, src, Options{})
		for _, f := range allFormats {
			if a, b := written(t, whole, f), written(t, got, f); !bytes.Equal(a, b) {
				t.Errorf("%s, %s: the streamed report differs from the whole rows':\n%s", src, f, firstDiff(a, b))
			}
		}
		if !reflect.DeepEqual(got.Runs, whole.Runs) { // every number, the quality sums' last bits included
			t.Errorf("%s: the runs' numbers differ from the whole rows'", src)
		}
		if !reflect.DeepEqual(got.plots, whole.plots) {
			t.Errorf("%s: the plots' series differ from the whole rows'", src)
		}
	}
}
