package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

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
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Cordons != "e4@20s+40s,e0@10s+60s" {
		t.Fatalf("--json cordons %q: %v", res.Cordons, err)
	}
	if _, again, _ := runCLI(t, append(args, "--json", "--workers", "1")...); again != out {
		t.Error("two sweeps with the same windows differ")
	}
	_, plain, _ := runCLI(t, "sim", "--trace", "demo", "--arms", "static:4P4D,adaptive", "--rates", "1x,1.5x", "--json")
	if plain == out {
		t.Error("the windows changed nothing")
	}
	if _, table, _ := runCLI(t, args...); !strings.Contains(table, "maintenance windows (--cordon, every run): e4@20s+40s,e0@10s+60s") {
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
		if run.Meta.Cordons != "e4@20s+40s,e0@10s+60s" {
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
	} {
		if code, _, errs := runCLI(t, "sim", "--trace", "demo", "--arms", "static:4P4D", "--cordon", c.spec); code != 2 || !strings.Contains(errs, "--cordon") || !strings.Contains(errs, c.want) {
			t.Errorf("--cordon %s: exit %d %q, expected 2 and %q", c.spec, code, errs, c.want)
		}
	}
	if code, _, errs := runCLI(t, "sim", "--replay", dir, "--cordon", "e1@1s+1s"); code != 2 || !strings.Contains(errs, "--cordon with --replay") {
		t.Errorf("--cordon with --replay: exit %d %q", code, errs)
	}
}
