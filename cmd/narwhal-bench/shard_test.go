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
	}
	if ran != 3 {
		t.Fatalf("the shards ran %d combinations, want 3", ran)
	}
	code, got, errs := runCLI(t, "run", "--out", merged, exp)
	if code != 0 || strings.Contains(errs, ": running ") || got != want {
		t.Fatalf("merged rerun: exit %d, ran again: %v, summary equal: %v\n%s", code, strings.Contains(errs, ": running "), got == want, errs)
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
	typo := write("typo.yaml", "name: f\ntrace: demo\narms: [nosucharm]\nrates: [\"1.6\"]\n")
	twice := write("twice.yaml", "name: g\ntrace: demo\narms: [static:4P4D]\nseeds: [1, 1]\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{good, same}, `both named "e"`},
		{[]string{good, typo}, "nosucharm"},
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
