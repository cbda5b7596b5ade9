package journal

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/internal/journaltest"
)

// writeRun writes a whole run of n synthetic requests into root/name.
func writeRun(t *testing.T, root, name string, n int) string {
	t.Helper()
	dir := filepath.Join(root, name)
	w, err := Create(dir, testMeta(name, 1), Options{})
	if err != nil {
		t.Fatal(err)
	}
	synth(n, 3, func(r *event.Record) { w.Record(r) })
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// readWhole opens a run and replays it through Fold, as every reader does.
func readWhole(dir string) error {
	r, err := Open(dir)
	if err != nil {
		return err
	}
	defer r.Close()
	_, err = Fold(r)
	return err
}

// TestDamage: every kind of damage to a run is an error from the reader and
// from the export, naming the run and the damage; none reads as a smaller
// run.
func TestDamage(t *testing.T) {
	for _, d := range journaltest.Damages {
		t.Run(d.Name, func(t *testing.T) {
			root := t.TempDir()
			writeRun(t, root, "a-good", 300)
			dir := writeRun(t, root, "b-hurt", 300)
			if err := readWhole(dir); err != nil {
				t.Fatalf("before damage: %v", err)
			}
			d.Do(t, dir)
			err := readWhole(dir)
			if err == nil || !strings.Contains(err.Error(), d.Want) || !strings.Contains(err.Error(), dir) {
				t.Fatalf("reader: %v\nwant an error naming %s and containing %q", err, dir, d.Want)
			}
			t.Logf("reader: %v", err)
			_, err = Export(root, t.TempDir())
			if err == nil || !strings.Contains(err.Error(), d.Want) || !strings.Contains(err.Error(), "b-hurt") {
				t.Fatalf("export: %v\nwant an error naming b-hurt and containing %q", err, d.Want)
			}
		})
	}
}

// TestPartial: a run closed with ClosePartial, and a run whose writer never
// closed, are refused by default and read with OpenOptions.Partial /
// ExportOptions.Partial, which label them.
func TestPartial(t *testing.T) {
	root := t.TempDir()
	writeRun(t, root, "a-whole", 50)
	w, err := Create(filepath.Join(root, "b-interrupted"), testMeta("b", 1), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	synth(50, 3, func(r *event.Record) {
		// Stop mid-run: the last requests never end.
		if n++; n < 120 {
			w.Record(r)
		}
	})
	if err := w.ClosePartial("interrupted by SIGINT"); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close after ClosePartial: %v (want the first result again)", err)
	}
	dir := w.Dir()
	var inc *IncompleteError
	if _, err := Open(dir); !errors.As(err, &inc) || inc.Reason != "interrupted by SIGINT" || inc.LastSeq != 119 ||
		!strings.Contains(err.Error(), "marked partial (interrupted by SIGINT)") {
		t.Fatalf("Open of a partial run = %v", err)
	}
	r, err := OpenWith(dir, OpenOptions{Partial: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Partial() != "interrupted by SIGINT" {
		t.Fatalf("Partial() = %q", r.Partial())
	}
	rows, err := Fold(r)
	r.Close()
	if err != nil || len(rows) == 0 || rows[len(rows)-1].Terminal != event.KindNone {
		t.Fatalf("Fold of a partial run: %d rows, %v (want the last request unended)", len(rows), err)
	}
	if _, err := Export(root, t.TempDir()); !errors.As(err, &inc) || !strings.Contains(err.Error(), "b-interrupted") {
		t.Fatalf("Export with a partial run = %v", err)
	}
	out := t.TempDir()
	st, err := ExportWith(root, out, ExportOptions{Partial: true})
	if err != nil || st.Partial != 1 || st.Runs != 2 {
		t.Fatalf("ExportWith(Partial) = %+v, %v", st, err)
	}
	if err := ReadExport(out, func(*ExportedRun) error { return nil }); err == nil || !strings.Contains(err.Error(), "b-interrupted") {
		t.Fatalf("ReadExport of a partial export = %v", err)
	}
	var partial []string
	err = ReadExportWith(out, ReadExportOptions{Partial: true}, func(run *ExportedRun) error {
		partial = append(partial, run.Name+"="+run.Partial)
		return nil
	})
	if err != nil || strings.Join(partial, ",") != "a-whole=,b-interrupted=interrupted by SIGINT" {
		t.Fatalf("ReadExportWith(Partial): %v %v", partial, err)
	}
}

// TestExportDamage: a damaged export is an error naming the file.
func TestExportDamage(t *testing.T) {
	for _, d := range journaltest.ExportDamages {
		t.Run(d.Name, func(t *testing.T) {
			root := t.TempDir()
			writeRun(t, root, "a", 400)
			out := filepath.Join(root, "parquet")
			if _, err := Export(root, out); err != nil {
				t.Fatal(err)
			}
			d.Do(t, out)
			err := ReadExport(out, func(*ExportedRun) error { return nil })
			if err == nil || !strings.Contains(err.Error(), d.Want) {
				t.Fatalf("ReadExport: %v, want %q", err, d.Want)
			}
		})
	}
}
