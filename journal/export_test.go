package journal

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/parquet-go/parquet-go"
)

var tableFiles = []string{RequestsFile, RoleMovesFile, DecisionsFile, FaultsFile, RunsFile}

func TestExportDeterministic(t *testing.T) {
	root := writeSynthRoot(t)
	a, b := t.TempDir(), t.TempDir()
	sa, err := Export(root, a)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := Export(root, b)
	if err != nil {
		t.Fatal(err)
	}
	if sa.Requests != 6000 || sa.Runs != 3 || sa.RoleMoves == 0 || sa.Decisions == 0 || sa.Faults == 0 {
		t.Fatalf("stats = %+v", sa)
	}
	sa.Files, sb.Files = nil, nil
	if !reflect.DeepEqual(sa, sb) {
		t.Fatalf("stats differ: %+v vs %+v", sa, sb)
	}
	for _, name := range tableFiles {
		x, err := os.ReadFile(filepath.Join(a, name))
		if err != nil {
			t.Fatal(err)
		}
		y, err := os.ReadFile(filepath.Join(b, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(x, y) {
			t.Errorf("%s: two exports of the same journals differ", name)
		}
	}
	// Exporting again over the same directory replaces the files and
	// leaves no temporary files behind.
	if _, err := Export(root, a); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(a)
	if len(ents) != len(tableFiles)+1 { // the tables and manifest.json
		t.Fatalf("out dir holds %d entries, want %d", len(ents), len(tableFiles)+1)
	}
}

// TestExportRows checks the exported rows against the journal, read back
// with parquet-go (DuckDB checks them independently in duckdb_test.go).
func TestExportRows(t *testing.T) {
	root := writeSynthRoot(t)
	out := t.TempDir()
	if _, err := Export(root, out); err != nil {
		t.Fatal(err)
	}
	got, err := parquet.ReadFile[requestRow](filepath.Join(out, RequestsFile))
	if err != nil {
		t.Fatal(err)
	}
	runs, _ := Runs(root)
	var want []requestRow
	var wantMoves, wantDecs, wantFaults int
	for _, dir := range runs {
		r, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := Fold(r)
		if err != nil {
			t.Fatal(err)
		}
		for i := range rows {
			want = append(want, requestRowOf(filepath.Base(dir), r.Meta(), sloOf(r.Meta()), &rows[i]))
		}
		m, _ := RoleMoves(r)
		d, _ := Decisions(r)
		f, _ := Faults(r)
		wantMoves, wantDecs, wantFaults = wantMoves+len(m), wantDecs+len(d), wantFaults+len(f)
		r.Close()
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("requests.parquet: %d rows, want %d; first row %+v", len(got), len(want), got[0])
	}
	moves, err := parquet.ReadFile[roleMoveRow](filepath.Join(out, RoleMovesFile))
	if err != nil || len(moves) != wantMoves {
		t.Fatalf("role_moves: %d rows, %v; want %d", len(moves), err, wantMoves)
	}
	decs, err := parquet.ReadFile[decisionRow](filepath.Join(out, DecisionsFile))
	if err != nil || len(decs) != wantDecs {
		t.Fatalf("decisions: %d rows, %v; want %d", len(decs), err, wantDecs)
	}
	faults, err := parquet.ReadFile[faultRow](filepath.Join(out, FaultsFile))
	if err != nil || len(faults) != wantFaults {
		t.Fatalf("faults: %d rows, %v; want %d", len(faults), err, wantFaults)
	}
	rr, err := parquet.ReadFile[runRow](filepath.Join(out, RunsFile))
	if err != nil || len(rr) != 3 {
		t.Fatalf("runs: %d rows, %v", len(rr), err)
	}
	if rr[0].Run != "aggregated_r2.4" || rr[0].Offered != 2000 || rr[0].Arm != "aggregated" || rr[0].TTFTSLOs != 0.5 || rr[0].Records < 2000*3 {
		t.Fatalf("runs row 0 = %+v", rr[0])
	}
}

// TestExportSemantics pins the meaning of the derived request columns on
// a hand-written run.
func TestExportSemantics(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "hand")
	meta := testMeta("static:1P1D", 1)
	meta.TTFTSLO, meta.TPOTSLO = 0.2, 0.01
	w, err := Create(dir, meta, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ms := event.Millisecond
	rec := func(k event.Kind, at event.Time, req event.RequestID, f func(*event.Record)) {
		r := event.Record{Kind: k, At: at, Req: req, Inst: event.NoInstance, Peer: event.NoInstance}
		if f != nil {
			f(&r)
		}
		w.Record(&r)
	}
	// Request 1: finishes within both SLOs, crossed to instance 1.
	rec(event.KindArrival, 5*ms, 1, func(r *event.Record) { r.Ref, r.Tokens, r.Want, r.Class = 0, 100, 11, "chat" })
	rec(event.KindAdmit, 6*ms, 1, func(r *event.Record) { r.Inst = 0 })
	rec(event.KindPrefillStart, 7*ms, 1, func(r *event.Record) { r.Inst, r.Tokens = 0, 40 })
	rec(event.KindPrefillDone, 100*ms, 1, func(r *event.Record) { r.Inst = 0 })
	rec(event.KindDecodeStart, 101*ms, 1, func(r *event.Record) { r.Inst, r.Peer, r.Cause = 1, 0, event.CauseCrossed })
	rec(event.KindFinish, 200*ms, 1, func(r *event.Record) { r.Inst, r.Tokens, r.Cause = 1, 11, event.CauseStop })
	// Request 2: refused.
	rec(event.KindArrival, 10*ms, 2, func(r *event.Record) { r.Ref, r.Tokens, r.Want, r.Class = 10*ms, 5000, 5, "code" })
	rec(event.KindRefuse, 10*ms, 2, func(r *event.Record) { r.Cause = event.CausePrompt })
	// Request 3: finishes, but its TTFT misses the SLO.
	rec(event.KindArrival, 20*ms, 3, func(r *event.Record) { r.Ref, r.Tokens, r.Want, r.Class = 20*ms, 10, 3, "chat" })
	rec(event.KindAdmit, 20*ms, 3, func(r *event.Record) { r.Inst = 1 })
	rec(event.KindPrefillDone, 500*ms, 3, func(r *event.Record) { r.Inst = 1 })
	rec(event.KindDecodeStart, 500*ms, 3, func(r *event.Record) { r.Inst, r.Peer = 1, 1 })
	rec(event.KindFinish, 510*ms, 3, func(r *event.Record) { r.Inst, r.Tokens, r.Cause = 1, 3, event.CauseStop })
	rec(event.KindHealth, 600*ms, 0, func(r *event.Record) { r.Inst, r.Tokens, r.Cause, r.Text = 1, 2, event.CauseOperator, "down" })
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if _, err := Export(dir, out); err != nil {
		t.Fatal(err)
	}
	got, err := parquet.ReadFile[requestRow](filepath.Join(out, RequestsFile))
	if err != nil {
		t.Fatal(err)
	}
	want := []requestRow{
		{Run: "hand", Arm: "static:1P1D", Rate: 1, Req: 1, Class: "chat", ScheduledNs: 0, ArrivalNs: int64(5 * ms), AdmitNs: int64(6 * ms),
			PrefillInst: 0, DecodeInst: 1, Crossed: true, FirstTokenNs: int64(100 * ms), EndNs: int64(200 * ms),
			TTFTNs: int64(100 * ms), TPOTNs: int64(10 * ms), E2ENs: int64(200 * ms),
			InputTokens: 100, WantTokens: 11, OutputTokens: 11, CachedTokens: 40,
			Terminal: "finish", Cause: "stop", SLOOK: true, FirstFailedCheck: "ok"},
		{Run: "hand", Arm: "static:1P1D", Rate: 1, Req: 2, Class: "code", ScheduledNs: int64(10 * ms), ArrivalNs: int64(10 * ms), AdmitNs: -1,
			PrefillInst: -1, DecodeInst: -1, FirstTokenNs: -1, EndNs: int64(10 * ms), TTFTNs: -1, TPOTNs: -1, E2ENs: -1,
			InputTokens: 5000, WantTokens: 5, Terminal: "refuse", Cause: "prompt", FirstFailedCheck: "not_completed"},
		{Run: "hand", Arm: "static:1P1D", Rate: 1, Req: 3, Class: "chat", ScheduledNs: int64(20 * ms), ArrivalNs: int64(20 * ms), AdmitNs: int64(20 * ms),
			PrefillInst: 1, DecodeInst: 1, FirstTokenNs: int64(500 * ms), EndNs: int64(510 * ms),
			TTFTNs: int64(480 * ms), TPOTNs: int64(5 * ms), E2ENs: int64(490 * ms),
			InputTokens: 10, WantTokens: 3, OutputTokens: 3, Terminal: "finish", Cause: "stop", FirstFailedCheck: "ttft"},
	}
	if !reflect.DeepEqual(got, want) {
		for i := range want {
			if i < len(got) && got[i] != want[i] {
				t.Errorf("row %d:\n got %+v\nwant %+v", i, got[i], want[i])
			}
		}
		t.Fatalf("got %d rows", len(got))
	}
	faults, err := parquet.ReadFile[faultRow](filepath.Join(out, FaultsFile))
	if err != nil || len(faults) != 1 || faults[0] != (faultRow{Run: "hand", Arm: "static:1P1D", Rate: 1, AtNs: int64(600 * ms), Kind: "health", Inst: 1, Tokens: 2, Cause: "operator", State: "down"}) {
		t.Fatalf("faults = %+v, %v", faults, err)
	}
}

func TestExportRefusesOpenRequests(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "crashed")
	w, err := Create(dir, testMeta("a", 1), Options{})
	if err != nil {
		t.Fatal(err)
	}
	w.Record(&event.Record{Kind: event.KindArrival, Req: 1, Inst: event.NoInstance, Peer: event.NoInstance})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	_, err = Export(root, out)
	if err == nil || !strings.Contains(err.Error(), "crashed") || !strings.Contains(err.Error(), "never ended") {
		t.Fatalf("Export = %v, want an error naming the run and the open request", err)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Fatalf("a failed export left %d files behind", len(ents))
	}
}

func TestExportEmptyRun(t *testing.T) {
	root := t.TempDir()
	w, err := Create(filepath.Join(root, "idle"), testMeta("static:1P1D", 0.5), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	st, err := Export(root, out)
	if err != nil {
		t.Fatal(err)
	}
	if st.Runs != 1 || st.Records != 1 || st.Requests != 0 || len(st.Files) != len(tableFiles)+1 {
		t.Fatalf("stats = %+v", st)
	}
	reqs, err := parquet.ReadFile[requestRow](filepath.Join(out, RequestsFile))
	if err != nil || len(reqs) != 0 {
		t.Fatalf("requests: %d rows, %v", len(reqs), err)
	}
	runs, err := parquet.ReadFile[runRow](filepath.Join(out, RunsFile))
	if err != nil || len(runs) != 1 || runs[0].Run != "idle" || runs[0].Offered != 0 || runs[0].Records != 1 {
		t.Fatalf("runs = %+v, %v", runs, err)
	}
}

// A run of several fold chunks (the export lets each chunk of written rows
// go as it goes: event.Fold.Release) exports every row, equal to the
// whole fold's.
func TestExportRowsAcrossChunks(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "static-3P5D_r2.4")
	writeSynth(t, dir, testMeta("static:3P5D", 2.4), 40000, 3, Options{})
	out := t.TempDir()
	if _, err := Export(root, out); err != nil {
		t.Fatal(err)
	}
	got, err := parquet.ReadFile[requestRow](filepath.Join(out, RequestsFile))
	if err != nil {
		t.Fatal(err)
	}
	r, rows := foldRun(t, dir)
	if len(got) != len(rows) || len(rows) != 40000 {
		t.Fatalf("requests.parquet: %d rows, the fold %d: expected 40000", len(got), len(rows))
	}
	for i := range rows {
		if want := requestRowOf(filepath.Base(dir), r.Meta(), sloOf(r.Meta()), &rows[i]); !reflect.DeepEqual(got[i], want) {
			t.Fatalf("row %d: %+v, want %+v", i, got[i], want)
		}
	}
}
