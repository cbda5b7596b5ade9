package main

import (
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
