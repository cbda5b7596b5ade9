package main

import (
	"github.com/narwhal-bench/narwhal-bench/journal"

	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --shard I/N: the shards run disjoint combinations that together make the
// whole campaign, and the unsharded run over their merged output skips
// every combination and prints the same summary as a whole run.
func TestRunShards(t *testing.T) {
	dir := t.TempDir()
	exp := filepath.Join(dir, "exp.yaml")
	os.WriteFile(exp, []byte("name: e\ntrace: demo\narms: [static:4P4D, adaptive]\nrates: [\"1.6\"]\nseeds: [1, 2, 3]\n"), 0o644)
	whole := filepath.Join(dir, "whole")
	code, want, errs := runCLI(t, "run", "--out", whole, exp)
	if code != 0 {
		t.Fatalf("whole run: exit %d: %s", code, errs)
	}
	merged := filepath.Join(dir, "merged")
	ran := 0
	for _, s := range []string{"0/2", "1/2"} {
		code, out, errs := runCLI(t, "run", "--out", merged, "--shard", s, exp)
		if code != 0 || out != "" {
			t.Fatalf("shard %s: exit %d, stdout %q: %s", s, code, out, errs)
		}
		ran += strings.Count(errs, ": running ")
		if s == "0/2" {
			// Half the campaign is there: --summary-only runs nothing,
			// prints no summary and names what is missing.
			code, out, errs := runCLI(t, "run", "--out", merged, "--summary-only", exp)
			if code != 1 || out != "" || strings.Contains(errs, ": running ") || !strings.Contains(errs, "1 of 3 combinations have no current result") ||
				!strings.Contains(errs, filepath.Join("seed-2")+": not run") {
				t.Fatalf("--summary-only over shard 0/2: exit %d, stdout %q: %s", code, out, errs)
			}
		}
	}
	if ran != 3 {
		t.Fatalf("the shards ran %d combinations, want 3", ran)
	}
	for _, args := range [][]string{{"--summary-only"}, {}} {
		code, got, errs := runCLI(t, append(append([]string{"run", "--out", merged}, args...), exp)...)
		if code != 0 || strings.Contains(errs, ": running ") || got != want {
			t.Fatalf("merged rerun %v: exit %d, ran again: %v, summary equal: %v\n%s", args, code, strings.Contains(errs, ": running "), got == want, errs)
		}
	}
	for _, args := range [][]string{{"--summary-only", "--shard", "0/2"}, {"--summary-only", "--force"}} {
		if code, _, errs := runCLI(t, append(append([]string{"run", "--out", merged}, args...), exp)...); code != 2 || !strings.Contains(errs, "--summary-only and") {
			t.Errorf("%v: exit %d, %s", args, code, errs)
		}
	}
	for _, bad := range []string{"2/2", "-1/2", "1", "0/0", "a/b", "1/2/3"} {
		if code, _, errs := runCLI(t, "run", "--out", merged, "--shard", bad, exp); code != 2 || !strings.Contains(errs, "--shard") {
			t.Errorf("--shard %s: exit %d, %q", bad, code, errs)
		}
	}
}

// A rerun skips a finished combination only when the same binary made it
// from the same settings: after the experiment file changes, or when the
// result's key does not match, the combination runs again.
func TestRunRerunsStaleResults(t *testing.T) {
	dir := t.TempDir()
	exp := filepath.Join(dir, "exp.yaml")
	out := filepath.Join(dir, "out")
	write := func(rate string) {
		os.WriteFile(exp, []byte("name: e\ntrace: demo\narms: [static:4P4D]\nrates: [\""+rate+"\"]\nseeds: [1]\n"), 0o644)
	}
	ran := func() bool {
		t.Helper()
		code, _, errs := runCLI(t, "run", "--out", out, exp)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		return strings.Contains(errs, ": running ")
	}
	write("1.6")
	if !ran() {
		t.Fatal("first run: nothing ran")
	}
	if ran() {
		t.Fatal("unchanged rerun: ran again, want skipped")
	}
	write("2.4")
	if !ran() {
		t.Fatal("rates changed: skipped the old result, want a new run")
	}
	key := filepath.Join(out, "e", "cache-off", "seed-1", "result.key")
	if err := os.WriteFile(key, []byte("made by another binary"), 0o644); err != nil {
		t.Fatal(err)
	}
	if !ran() {
		t.Fatal("another binary's result: skipped, want a new run")
	}
	if ran() {
		t.Fatal("unchanged rerun after that: ran again, want skipped")
	}
}

// run checks every file before running any: two experiments of one name,
// repeated seeds and an unknown arm in a later file are refused (exit 2)
// with nothing run, in every shard alike; a shard with nothing to do says
// so.
func TestRunChecksEveryFileFirst(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o644)
		return p
	}
	good := write("good.yaml", "name: e\ntrace: demo\narms: [static:4P4D]\nrates: [\"1.6\"]\n")
	same := write("same.yaml", "name: e\ntrace: demo\narms: [adaptive]\nrates: [\"1.6\"]\n")
	typo := write("typo.yaml", "name: f\ntrace: demo\narms: [adaptive, nosucharm]\nrates: [\"1.6\"]\n")
	nofleet := write("nofleet.yaml", "name: h\ntrace: ../../traces/azure/code.csv\narms: [static:4P4D]\n")
	twice := write("twice.yaml", "name: g\ntrace: demo\narms: [static:4P4D]\nseeds: [1, 1]\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{good, same}, `both named "e"`},
		{[]string{good, typo}, "field arms[1]: "},
		{[]string{good, typo}, "nosucharm"},
		{[]string{nofleet}, "field fleet: trace code is imported and names no fleet: expected a built-in fleet"},
		{[]string{"--shard", "0/2", good, typo}, "nosucharm"},
		{[]string{twice}, "seeds[1]: 1 given twice"},
	} {
		code, _, errs := runCLI(t, append([]string{"run", "--out", filepath.Join(dir, "out")}, c.args...)...)
		if code != 2 || !strings.Contains(errs, c.want) || strings.Contains(errs, "running") {
			t.Errorf("%v: exit %d, %s: want exit 2, %q, nothing run", c.args, code, errs, c.want)
		}
	}
	if code, _, errs := runCLI(t, "run", "--out", filepath.Join(dir, "out"), "--shard", "3/5", good); code != 0 || !strings.Contains(errs, "shard 3/5 has no combination: the campaign has 1") {
		t.Errorf("an empty shard: exit %d, %s", code, errs)
	}
}

// A finished combination whose journals no longer read whole (a table
// truncated) runs again, saying why, rather than printing a summary the
// report would refuse; once whole, it is skipped. One whose journals are
// whole but whose export is not (gone, its manifest gone, a table cut) is
// exported again and skipped, and the report then reads it.
func TestRunRerunsDamagedJournals(t *testing.T) {
	dir := t.TempDir()
	exp := filepath.Join(dir, "exp.yaml")
	out := filepath.Join(dir, "out")
	os.WriteFile(exp, []byte("name: e\ntrace: demo\narms: [static:4P4D]\nrates: [\"1.6\"]\nseeds: [1]\n"), 0o644)
	run := func() string {
		t.Helper()
		code, _, errs := runCLI(t, "run", "--out", out, exp)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		return errs
	}
	run()
	combo := filepath.Join(out, "e", "cache-off", "seed-1")
	ssts, _ := filepath.Glob(filepath.Join(combo, "runs", "*", "events", "*.sst"))
	if len(ssts) == 0 {
		t.Fatal("no journal table to damage")
	}
	if err := os.Truncate(ssts[0], 100); err != nil {
		t.Fatal(err)
	}
	if errs := run(); !strings.Contains(errs, "does not read whole") || !strings.Contains(errs, ": running ") {
		t.Fatalf("a damaged journal: %s: want it run again", errs)
	}
	if errs := run(); !strings.Contains(errs, "done earlier, skipped") {
		t.Fatalf("after the rerun: %s: want it skipped", errs)
	}
	pq := filepath.Join(combo, "parquet")
	for _, damage := range []func() error{
		func() error { return os.RemoveAll(pq) },
		func() error { return os.Remove(filepath.Join(pq, "manifest.json")) },
		func() error { return os.Truncate(filepath.Join(pq, "requests.parquet"), 50) },
	} {
		if err := damage(); err != nil {
			t.Fatal(err)
		}
		errs := run()
		if !strings.Contains(errs, "exported its journals again") || !strings.Contains(errs, "done earlier, skipped") || strings.Contains(errs, ": running ") {
			t.Fatalf("a damaged export: %s: want it exported again, the runs skipped", errs)
		}
		if err := journal.ReadExport(pq, func(*journal.ExportedRun) error { return nil }); err != nil {
			t.Fatalf("the export after the rerun: %v", err)
		}
	}
}

// A combination another process holds (a requeued array task still
// running, a shard on a shared --out) is neither run nor removed: it is
// skipped, the other combinations run, no summary is printed and the exit
// is 1; once free, the rerun runs it.
func TestRunSkipsLockedCombination(t *testing.T) {
	dir := t.TempDir()
	exp := filepath.Join(dir, "exp.yaml")
	out := filepath.Join(dir, "out")
	os.WriteFile(exp, []byte("name: e\ntrace: demo\narms: [static:4P4D]\nrates: [\"1.6\"]\nseeds: [1, 2]\n"), 0o644)
	held := filepath.Join(out, "e", "cache-off", "seed-2")
	if err := os.MkdirAll(filepath.Join(held, "runs"), 0o755); err != nil {
		t.Fatal(err)
	}
	mine := filepath.Join(held, "runs", "in-progress")
	os.WriteFile(mine, []byte("another process's journal"), 0o644)
	unlock, busy, err := lockCombo(held, true)
	if err != nil || busy {
		t.Fatalf("lock: %v, held %v", err, busy)
	}
	// A second experiment file after it still runs.
	exp2 := filepath.Join(dir, "exp2.yaml")
	os.WriteFile(exp2, []byte("name: f\ntrace: demo\narms: [static:4P4D]\nrates: [\"1.6\"]\nseeds: [1]\n"), 0o644)
	code, stdout, errs := runCLI(t, "run", "--out", out, exp, exp2)
	if code != 1 || !strings.Contains(errs, "in progress in another process") || strings.Count(errs, ": running ") != 2 ||
		!strings.Contains(stdout, "## f") || strings.Contains(stdout, "## e") {
		t.Fatalf("with e's seed-2 held: exit %d, stdout %q: %s; expected e's seed-1 and f run, f's summary alone", code, stdout, errs)
	}
	if _, err := os.Stat(mine); err != nil {
		t.Fatalf("the held combination's files were touched: %v", err)
	}
	code, _, errs = runCLI(t, "run", "--out", out, "--summary-only", exp)
	if code != 1 || !strings.Contains(errs, "in progress in another process") {
		t.Fatalf("--summary-only with seed-2 held: exit %d: %s", code, errs)
	}
	unlock()
	code, stdout, errs = runCLI(t, "run", "--out", out, exp)
	if code != 0 || stdout == "" || strings.Count(errs, ": running ") != 1 || !strings.Contains(errs, "done earlier, skipped") {
		t.Fatalf("once free: exit %d, stdout %q: %s", code, stdout, errs)
	}
}

// A result whose key differs only in the binary says it was another
// build, not other settings.
func TestRunAnotherBuildSaid(t *testing.T) {
	dir := t.TempDir()
	exp := filepath.Join(dir, "exp.yaml")
	out := filepath.Join(dir, "out")
	os.WriteFile(exp, []byte("name: e\ntrace: demo\narms: [static:4P4D]\nrates: [\"1.6\"]\nseeds: [1]\n"), 0o644)
	if code, _, errs := runCLI(t, "run", "--out", out, exp); code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	keyPath := filepath.Join(out, "e", "cache-off", "seed-1", "result.key")
	key, err := os.ReadFile(keyPath)
	if err != nil || !strings.HasPrefix(string(key), "binary ") || !strings.Contains(string(key), "\nsettings ") {
		t.Fatalf("result.key %q, %v: expected a binary line and a settings line", key, err)
	}
	lines := strings.SplitN(string(key), "\n", 2)
	os.WriteFile(keyPath, []byte("binary 0123456789abcdef\n"+lines[1]), 0o644)
	code, _, errs := runCLI(t, "run", "--out", out, "--summary-only", exp)
	if code != 1 || !strings.Contains(errs, "another build of narwhal-bench (binary 0123456789ab") {
		t.Fatalf("--summary-only over another build's result: exit %d: %s", code, errs)
	}
}

// Several seeds on an imported trace without batches are refused (exit 2,
// naming the flag or field): its arrivals and sizes are data, so every
// seed gives the same run, which would count as independent draws. With
// batches laid over it the seed draws them, and several are taken.
func TestSeedsOnImportedTrace(t *testing.T) {
	dir := t.TempDir()
	azure := filepath.Join("..", "..", "traces", "azure", "code.csv")
	code, _, errs := runCLI(t, "sim", "--trace", azure, "--fleet", "eval8", "--arms", "static:4P4D", "--rates", "1x", "--seeds", "3")
	if code != 2 || !strings.Contains(errs, "--seeds 3") || !strings.Contains(errs, "imported") {
		t.Errorf("sim --seeds 3 on an imported trace: exit %d, %s", code, errs)
	}
	code, out, errs := runCLI(t, "sim", "--trace", azure, "--fleet", "eval8", "--arms", "static:4P4D", "--rates", "1x", "--seeds", "2", "--batch-mean", "4")
	if code != 0 || !strings.Contains(out, "2 seeds") {
		t.Errorf("sim --seeds 2 --batch-mean 4: exit %d, %s\n%s", code, errs, out)
	}
	exp := filepath.Join(dir, "az.yaml")
	os.WriteFile(exp, []byte("name: az\ntrace: "+azure+"\nfleet: eval8\narms: [static:4P4D]\nseeds: [1, 2]\n"), 0o644)
	code, _, errs = runCLI(t, "run", "--out", filepath.Join(dir, "out"), exp)
	if code != 2 || !strings.Contains(errs, "field seeds") || strings.Contains(errs, "running") {
		t.Errorf("an experiment with two seeds on an imported trace: exit %d, %s", code, errs)
	}
	os.WriteFile(exp, []byte("name: az\ntrace: "+azure+"\nfleet: eval8\narms: [static:4P4D]\n"), 0o644)
	code, _, errs = runCLI(t, "run", "--out", filepath.Join(dir, "out"), "--seeds", "1..2", exp)
	if code != 2 || !strings.Contains(errs, "--seeds 1..2") || strings.Contains(errs, "running") {
		t.Errorf("run --seeds 1..2 over an imported trace: exit %d, %s", code, errs)
	}
}

// Requests needing more KV than an engine holds are said on stderr by sim
// alone, sim --seeds (naming the seed) and run, each.
func TestOverKVNoteEverySweep(t *testing.T) {
	dir := t.TempDir()
	fl := filepath.Join(dir, "small-kv.yaml")
	b, err := os.ReadFile(filepath.Join("testdata", "demo-fifth.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	small := strings.Replace(string(b), "kv_capacity_tokens: 105888", "kv_capacity_tokens: 3000", 1)
	if small == string(b) {
		t.Fatal("testdata/demo-fifth.yaml: no kv_capacity_tokens to shrink")
	}
	os.WriteFile(fl, []byte(small), 0o644)
	const want = "need more KV than an engine holds (prompt and answer over kv_capacity_tokens 3000)"
	if code, _, errs := runCLI(t, "sim", "--trace", "demo", "--fleet", fl, "--arms", "static:4P4D", "--rates", "1.6"); code != 0 || !strings.Contains(errs, want) {
		t.Errorf("sim: exit %d, stderr %q", code, errs)
	}
	if code, _, errs := runCLI(t, "sim", "--trace", "demo", "--fleet", fl, "--arms", "static:4P4D", "--rates", "1.6", "--seeds", "3..4"); code != 0 ||
		!strings.Contains(errs, want) || !strings.Contains(errs, ", seed ") {
		t.Errorf("sim --seeds: exit %d, stderr %q", code, errs)
	}
	exp := filepath.Join(dir, "exp.yaml")
	os.WriteFile(exp, []byte("name: e\ntrace: demo\nfleet: "+fl+"\narms: [static:4P4D]\nrates: [\"1.6\"]\nseeds: [1]\n"), 0o644)
	if code, _, errs := runCLI(t, "run", "--out", filepath.Join(dir, "out"), exp); code != 0 || !strings.Contains(errs, want) {
		t.Errorf("run: exit %d, stderr %q", code, errs)
	}
	// The demo fleet's own capacity holds demo's requests: no note.
	if code, _, errs := runCLI(t, "sim", "--trace", "demo", "--arms", "static:4P4D", "--rates", "1.6", "--seeds", "2"); code != 0 || strings.Contains(errs, "more KV") {
		t.Errorf("sim --seeds on demo: exit %d, stderr %q", code, errs)
	}
}
