package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/internal/journaltest"
	"github.com/narwhal-bench/narwhal-bench/journal"
)

// TestDamageExit2: every kind of damage to a journal or its Parquet export
// makes narwhal-report exit 2 with a message naming the run (or file) and
// the damage; --partial does not change that (it accepts runs cut short,
// never damage).
func TestDamageExit2(t *testing.T) {
	for _, d := range journaltest.Damages {
		t.Run(d.Name, func(t *testing.T) {
			root := t.TempDir()
			writeRun(t, filepath.Join(root, "a-good"), "static:2P2D", 1)
			dir := filepath.Join(root, "b-hurt")
			writeRun(t, dir, "static:2P2D", 2)
			d.Do(t, dir)
			args := [][]string{{root}}
			if d.Name != "writer killed" {
				args = append(args, []string{"--partial", root})
			}
			for _, a := range args {
				code, out, errs := runCLI(t, a...)
				if code != 2 || !strings.Contains(errs, d.Want) || !strings.Contains(errs, "b-hurt") {
					t.Errorf("%v: exit %d, stderr %q; want exit 2 naming b-hurt and %q", a, code, errs, d.Want)
				}
				if out != "" {
					t.Errorf("%v: printed a report for damaged input:\n%s", a, out)
				}
			}
		})
	}
	for _, d := range journaltest.ExportDamages {
		t.Run(d.Name, func(t *testing.T) {
			root := t.TempDir()
			writeRun(t, filepath.Join(root, "a"), "static:2P2D", 1)
			out := filepath.Join(root, "parquet")
			if _, err := journal.Export(root, out); err != nil {
				t.Fatal(err)
			}
			d.Do(t, out)
			code, _, errs := runCLI(t, out)
			if code != 2 || !strings.Contains(errs, d.Want) {
				t.Errorf("exit %d, stderr %q; want exit 2 and %q", code, errs, d.Want)
			}
		})
	}
}

// TestPartialFlag: a killed writer's run (no end-of-run record) and an
// interrupted run are refused with exit 2 naming the run, what is missing
// and the last sequence number read; --partial scores them, labelled.
func TestPartialFlag(t *testing.T) {
	root := t.TempDir()
	writeRun(t, filepath.Join(root, "a-whole"), "static:2P2D", 1)
	w, err := journal.Create(filepath.Join(root, "b-cut"), event.RunMeta{Version: "test", Driver: "sim", Arm: "static:2P2D", Rate: 2,
		Trace: "t", Fleet: "f", Instances: 4, GPUs: 4, TTFTSLO: 1, TPOTSLO: 0.1}, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w.Record(&event.Record{At: 0, Kind: event.KindArrival, Req: 1, Tokens: 10, Want: 5, Inst: event.NoInstance, Peer: event.NoInstance})
	if err := w.ClosePartial("interrupted by SIGINT"); err != nil {
		t.Fatal(err)
	}
	code, _, errs := runCLI(t, root)
	for _, want := range []string{"b-cut", "marked partial (interrupted by SIGINT)", "last record read: seq 1", "--partial"} {
		if code != 2 || !strings.Contains(errs, want) {
			t.Errorf("without --partial: exit %d, stderr %q; want exit 2 mentioning %q", code, errs, want)
		}
	}
	for _, format := range []string{"text", "markdown"} {
		code, out, errs := runCLI(t, "--partial", "--format", format, root)
		if code != 0 {
			t.Fatalf("--partial: exit %d: %s", code, errs)
		}
		if n := strings.Count(out, "[partial]"); n < 5 || !strings.Contains(out, "PARTIAL: run b-cut") {
			t.Errorf("--partial --format %s: %d tables labelled partial:\n%s", format, n, out)
		}
	}
	code, out, _ := runCLI(t, "--partial", "--format", "json", root)
	if code != 0 || !strings.Contains(out, `"partial": "interrupted by SIGINT"`) || !strings.Contains(out, `"partial": true`) {
		t.Errorf("--partial --format json: exit %d:\n%s", code, out)
	}
	plots := t.TempDir()
	if code, _, errs := runCLI(t, "--partial", "--plots", plots, root); code != 0 {
		t.Fatalf("--partial --plots: exit %d: %s", code, errs)
	}
	if ents, _ := os.ReadDir(plots); len(ents) == 0 {
		t.Fatal("no plots")
	}
}

// TestPlotRateNeedsPlots: --plot-rate alone is bad input, not ignored.
func TestPlotRateNeedsPlots(t *testing.T) {
	root := t.TempDir()
	writeRun(t, filepath.Join(root, "a"), "static:2P2D", 1)
	if code, _, errs := runCLI(t, "--plot-rate", "1", root); code != 2 || !strings.Contains(errs, "--plot-rate: only with --plots") {
		t.Fatalf("exit %d: %s", code, errs)
	}
}
