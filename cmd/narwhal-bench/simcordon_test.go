package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/internal/simcheck"
	"github.com/narwhal-bench/narwhal-bench/journal"
)

// sim --cordon plays maintenance windows in every run: the table and
// --json say which, the runs' metadata and Parquet carry them (and their
// config hash differs from the same runs without), two sweeps with the
// same windows are byte-identical, and bad windows exit 2 naming --cordon.
func TestSimCordon(t *testing.T) {
	args := []string{"sim", "--trace", "demo", "--arms", "static:4P4D,adaptive", "--rates", "1x,1.5x", "--cordon", "e4@20s+40s, e0@10s+1m"}
	code, out, errs := runCLI(t, append(args, "--json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var res struct {
		Cordons string `json:"cordons"`
		Runs    []struct {
			Attainment float64 `json:"attainment"`
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Cordons != "e0@10s+60s,e4@20s+40s" {
		t.Fatalf("--json cordons %q: %v", res.Cordons, err)
	}
	if _, again, _ := runCLI(t, append(args, "--json", "--workers", "1")...); again != out {
		t.Error("two sweeps with the same windows differ")
	}
	_, plain, _ := runCLI(t, "sim", "--trace", "demo", "--arms", "static:4P4D,adaptive", "--rates", "1x,1.5x", "--json")
	if plain == out {
		t.Error("the windows changed nothing")
	}
	if _, table, _ := runCLI(t, args...); !strings.Contains(table, "maintenance windows (--cordon, every run): e0@10s+60s,e4@20s+40s") {
		t.Errorf("the table does not say the windows:\n%s", table)
	}

	dir := t.TempDir()
	if code, _, errs := runCLI(t, append(args, "--journal", dir)...); code != 0 {
		t.Fatalf("--journal: exit %d: %s", code, errs)
	}
	runs := 0
	hashes := map[string]bool{}
	if err := journal.ReadExport(filepath.Join(dir, "parquet"), func(run *journal.ExportedRun) error {
		runs++
		hashes[run.Meta.ConfigHash] = true
		if run.Meta.Cordons != "e0@10s+60s,e4@20s+40s" {
			t.Errorf("run %s: cordons %q in its Parquet metadata", run.Name, run.Meta.Cordons)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if runs != 4 || len(hashes) != 4 {
		t.Errorf("%d runs, %d config hashes", runs, len(hashes))
	}

	for _, c := range []struct{ spec, want string }{
		{"e8@1s+1s", `no engine "e8" in the fleet`},
		{"e1@1s", "expected NAME@START+DURATION"},
		{"e1@1s+0s", `duration "0s": expected a duration above 0`},
		{"e1@-1s+2s", `start "-1s"`},
		{"e1@1s+5s,e1@3s+5s", "overlaps window 1 on e1"},
		{"e1@2000000h+2000000h", `start "2000000h": expected a duration from 0 to 1000h`},
		{"e1@60+1s", `start "60"`},
	} {
		if code, _, errs := runCLI(t, "sim", "--trace", "demo", "--arms", "static:4P4D", "--cordon", c.spec); code != 2 || !strings.Contains(errs, "--cordon") || !strings.Contains(errs, c.want) {
			t.Errorf("--cordon %s: exit %d %q, expected 2 and %q", c.spec, code, errs, c.want)
		}
	}
	if code, _, errs := runCLI(t, "sim", "--trace", "demo", "--arms", "static:4P4D,oracle", "--cordon", "e1@1s+1s"); code != 2 || !strings.Contains(errs, "--cordon: with the hindsight arm oracle") {
		t.Errorf("--cordon with the oracle: exit %d %q", code, errs)
	}
	if code, _, errs := runCLI(t, "sim", "--replay", dir, "--cordon", "e1@1s+1s"); code != 2 || !strings.Contains(errs, "--cordon with --replay") {
		t.Errorf("--cordon with --replay: exit %d %q", code, errs)
	}
}

// live --cordon plays the windows through the router in this process:
// the journal has the cordon and the uncordon (cause operator) near their
// times and no prompt or decode placed on the engine between them (the
// invariants' checker), its metadata carries the windows, and sim
// --replay plays the same windows. --cordon with --target is refused.
func TestLiveCordon(t *testing.T) {
	fleetPath, tracePath := liveFiles(t, "4s")
	dir := filepath.Join(t.TempDir(), "live")
	code, out, errs := liveCLI(t, context.Background(), "live", "--fleet", fleetPath, "--stub", "--trace", tracePath,
		"--arm", "static:1P2D", "--cordon", "e2@1s+2s", "--journal", dir)
	if code != 0 {
		t.Fatalf("live: exit %d\n%s\n%s", code, out, errs)
	}
	runs, err := journal.Runs(dir)
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs %v %v", runs, err)
	}
	r, err := journal.Open(runs[0])
	if err != nil {
		t.Fatal(err)
	}
	if m := r.Meta(); m.Cordons != "e2@1s+2s" {
		t.Errorf("metadata cordons %q", m.Cordons)
	}
	check := simcheck.New(t)
	var health []event.Record
	if err := r.Replay(func(rec *event.Record) error {
		if rec.Seq > 0 { // (the run's metadata record is not the run's)
			check.Record(rec)
		}
		if rec.Kind == event.KindHealth {
			health = append(health, *rec)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if len(health) != 2 || health[0].Inst != 2 || health[0].Text != "down" || health[0].Cause != event.CauseOperator ||
		health[1].Text != "up" || health[1].Cause != event.CauseOperator {
		t.Fatalf("health records %+v: expected e2 down then up by the operator", health)
	}
	// Near their times (the router starts a little before the load).
	if d := health[1].At - health[0].At; d < 1900*event.Millisecond || d > 2500*event.Millisecond {
		t.Errorf("the window lasted %v, expected about 2 s", d)
	}

	replayDir := filepath.Join(t.TempDir(), "replay")
	if code, _, errs := runCLI(t, "sim", "--replay", dir, "--fleet", fleetPath, "--journal", replayDir); code != 0 {
		t.Fatalf("replay: exit %d %s", code, errs)
	}
	rruns, _ := journal.Runs(replayDir)
	rr, err := journal.Open(rruns[0])
	if err != nil {
		t.Fatal(err)
	}
	var rhealth []string
	rr.Replay(func(rec *event.Record) error {
		if rec.Kind == event.KindHealth {
			rhealth = append(rhealth, fmt.Sprintf("%d %s %.0fs", rec.Inst, rec.Text, rec.At.Seconds()))
		}
		return nil
	})
	if m := rr.Meta(); m.Cordons != "e2@1s+2s" || strings.Join(rhealth, ", ") != "2 down 1s, 2 up 3s" {
		t.Errorf("the replay's cordons %q, health %v", m.Cordons, rhealth)
	}
	rr.Close()

	if code, _, errs := liveCLI(t, context.Background(), "live", "--target", "http://127.0.0.1:1", "--trace", tracePath, "--cordon", "e2@1s+2s"); code != 2 || !strings.Contains(errs, "--cordon with --target") {
		t.Errorf("--cordon with --target: exit %d %q", code, errs)
	}
}

// An experiment file's cordons play in every run of `run`, as sim
// --cordon's; a bad window names the file's field.
func TestRunCordons(t *testing.T) {
	dir := t.TempDir()
	exp := filepath.Join(dir, "maint.yaml")
	os.WriteFile(exp, []byte("name: maint\ntrace: demo\narms: [static:4P4D, adaptive]\nrates: [\"1x\"]\ncordons: \"e0@15s+30s\"\n"), 0o644)
	out := filepath.Join(dir, "out")
	if code, _, errs := runCLI(t, "run", exp, "--out", out); code != 0 {
		t.Fatalf("run: exit %d %s", code, errs)
	}
	table, err := os.ReadFile(filepath.Join(out, "maint", "cache-off", "seed-default", "table.txt"))
	if err != nil || !strings.Contains(string(table), "maintenance windows (--cordon, every run): e0@15s+30s") {
		t.Errorf("table: %v\n%s", err, table)
	}
	n := 0
	if err := journal.ReadExport(filepath.Join(out, "maint", "cache-off", "seed-default", "parquet"), func(run *journal.ExportedRun) error {
		n++
		if run.Meta.Cordons != "e0@15s+30s" {
			t.Errorf("run %s: cordons %q", run.Name, run.Meta.Cordons)
		}
		return nil
	}); err != nil || n != 2 {
		t.Errorf("%d runs, %v", n, err)
	}
	os.WriteFile(exp, []byte("name: maint\ntrace: demo\narms: [static:4P4D]\ncordons: \"e9@15s+30s\"\n"), 0o644)
	if code, _, errs := runCLI(t, "run", exp, "--out", filepath.Join(dir, "out2")); code != 2 || !strings.Contains(errs, "field cordons: ") {
		t.Errorf("a bad window: exit %d %q", code, errs)
	}
}
