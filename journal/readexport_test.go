package journal

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// Reading an export back gives the journal's folded rows, role moves and
// metadata, run by run.
func TestReadExportRoundTrip(t *testing.T) {
	root := writeSynthRoot(t)
	out := t.TempDir()
	if _, err := Export(root, out); err != nil {
		t.Fatal(err)
	}
	if !IsExport(out) || IsExport(root) {
		t.Fatal("IsExport")
	}
	dirs, _ := Runs(root)
	i := 0
	err := ReadExport(out, func(run *ExportedRun) error {
		if i >= len(dirs) {
			t.Fatalf("run %d: only %d journals", i, len(dirs))
		}
		r, rows := foldRun(t, dirs[i])
		moves, err := RoleMoves(r)
		if err != nil {
			t.Fatal(err)
		}
		for j := range moves {
			moves[j].Seq = 0
		}
		if run.Name != filepath.Base(dirs[i]) || run.Meta != r.Meta() {
			t.Errorf("run %d: %s %+v, want %s %+v", i, run.Name, run.Meta, filepath.Base(dirs[i]), r.Meta())
		}
		if !reflect.DeepEqual(run.Rows, rows) {
			t.Errorf("run %s: rows differ", run.Name)
		}
		if !reflect.DeepEqual(run.Moves, moves) {
			t.Errorf("run %s: %d moves, want %d", run.Name, len(run.Moves), len(moves))
		}
		i++
		return nil
	})
	if err != nil || i != len(dirs) {
		t.Fatalf("ReadExport: %v after %d runs", err, i)
	}
}

func TestReadExportBadInput(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{RunsFile, RequestsFile} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("not parquet at all"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !IsExport(dir) {
		t.Fatal("IsExport")
	}
	err := ReadExport(dir, func(*ExportedRun) error { return nil })
	if err == nil || !strings.Contains(err.Error(), ManifestFile) {
		t.Fatalf("garbage export: %v", err)
	}
	if err := ReadExport(t.TempDir(), func(*ExportedRun) error { return nil }); err == nil {
		t.Fatal("empty directory accepted")
	}
	// Unknown names are refused.
	if _, err := rowOf(&requestRow{Terminal: "finish", Cause: "bogus"}, false); err == nil {
		t.Fatal("unknown cause accepted")
	}
	if _, err := rowOf(&requestRow{Terminal: "admit"}, true); err == nil {
		t.Fatal("non-terminal kind accepted")
	}
	if r, err := rowOf(&requestRow{Terminal: "refuse", Cause: "overload", AdmitNs: -1, FirstTokenNs: -1}, false); err != nil ||
		r.Terminal != event.KindRefuse || r.Cause != event.CauseOverload || r.Admit != event.Never || r.FirstToken != event.Never {
		t.Fatalf("rowOf: %+v %v", r, err)
	}
	// A request that never ended is a row only in a partial run.
	if _, err := rowOf(&requestRow{Terminal: "none"}, false); err == nil {
		t.Fatal("unended request accepted in a whole run")
	}
	if r, err := rowOf(&requestRow{Terminal: "none"}, true); err != nil || r.Terminal != event.KindNone {
		t.Fatalf("unended request in a partial run: %+v %v", r, err)
	}
}

// An export written before requests.parquet had its preemptions column and
// runs.parquet its live load-generator columns (testdata/export-v1: demo,
// static:4P4D at 0.3 req/s, seed 1, by the build of 2026-12-01) still
// reads: the columns it lacks read as zero, and nothing else changes.
func TestReadExportWithoutLaterColumns(t *testing.T) {
	n := 0
	err := ReadExport(filepath.Join("testdata", "export-v1"), func(run *ExportedRun) error {
		n++
		if run.Name != "static-4P4D@0.3" || run.Meta.Arm != "static:4P4D" || run.Meta.Trace != "demo" || run.Partial != "" {
			t.Errorf("run %s: %+v", run.Name, run.Meta)
		}
		if m := run.Meta; m.Target != "" || m.Planned != 0 || m.Sent != 0 || m.LagP99 != 0 || m.Degraded || m.Partial || m.PrefixCache {
			t.Errorf("live fields of a simulation: %+v", m)
		}
		finished := 0
		for _, r := range run.Rows {
			if r.Preemptions != 0 {
				t.Errorf("request %d: %d preemptions from an export without the column", r.Req, r.Preemptions)
			}
			if r.Terminal == event.KindFinish {
				finished++
			}
		}
		if len(run.Rows) != 23 || finished != 23 {
			t.Errorf("%d requests, %d finished: want 23 and 23 (what the sweep reported)", len(run.Rows), finished)
		}
		return nil
	})
	if err != nil || n != 1 {
		t.Fatalf("ReadExport: %v after %d runs", err, n)
	}
}

// ReadExportEach streams a run's rows; a run whose rows fn skips is
// checked and passed over, the next run read whole; rows read twice, or
// a yield's error, end the read with that error.
func TestReadExportEach(t *testing.T) {
	root := writeSynthRoot(t)
	out := t.TempDir()
	if _, err := Export(root, out); err != nil {
		t.Fatal(err)
	}
	dirs, _ := Runs(root)
	if len(dirs) < 2 {
		t.Fatalf("%d runs: the test needs two", len(dirs))
	}
	i := 0
	err := ReadExportEach(out, ReadExportOptions{}, func(run *ExportedRun, rows RunRows) error {
		defer func() { i++ }()
		if run.Rows != nil {
			t.Errorf("run %s: Rows set", run.Name)
		}
		if i%2 == 0 {
			return nil // skipped: the reader checks the rows and moves on
		}
		var got []event.Row
		if err := rows(func(chunk []event.Row) error {
			got = append(got, chunk...)
			return nil
		}); err != nil {
			return err
		}
		if _, want := foldRun(t, dirs[i]); !reflect.DeepEqual(got, want) {
			t.Errorf("run %s: rows differ from the journal's", run.Name)
		}
		if err := rows(func([]event.Row) error { return nil }); err == nil || !strings.Contains(err.Error(), "already read") {
			t.Errorf("rows read twice: %v, want an error", err)
		}
		return nil
	})
	if err != nil || i != len(dirs) {
		t.Fatalf("ReadExportEach: %v after %d runs", err, i)
	}
	stop := os.ErrClosed
	err = ReadExportEach(out, ReadExportOptions{}, func(run *ExportedRun, rows RunRows) error {
		return rows(func([]event.Row) error { return stop })
	})
	if err != stop {
		t.Fatalf("yield's error: got %v", err)
	}
}
