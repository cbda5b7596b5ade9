package campaigncheck

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// python is the python3 that runs the campaign scripts and the
// repository's root to run them from; the test is skipped without one.
func python(t *testing.T) (py, root string) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed: the campaign scripts need it")
	}
	return py, repoRoot(t)
}

// repoRoot is the repository's root, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// fullSweep writes a sim --json sweep at path with the fields
// seed_spread.py's table reads: per seed, each arm's sustained rate and
// one run per arm at the grid's one rate (attainment 1 where the arm
// sustains anything, 0.5 where not), and the arms' means over seeds.
func fullSweep(t *testing.T, path string, perSeed map[int]map[string]float64) {
	t.Helper()
	type run struct {
		Arm          string  `json:"arm"`
		Rate         float64 `json:"rate"`
		Attainment   float64 `json:"attainment"`
		Moves        int     `json:"moves"`
		Reversals60s int     `json:"reversals_60s"`
		SplitChanges int     `json:"split_changes"`
		SimSeconds   float64 `json:"sim_seconds"`
	}
	type seed struct {
		Seed      int                `json:"seed"`
		Sustained map[string]float64 `json:"sustained"`
		Rates     []float64          `json:"rates"`
		Runs      []run              `json:"runs"`
	}
	arms := map[string]bool{}
	sums := map[string][]float64{}
	var seeds []seed
	for s, rates := range perSeed {
		sd := seed{Seed: s, Sustained: rates, Rates: []float64{1}}
		for a, v := range rates {
			arms[a] = true
			sums[a] = append(sums[a], v)
			att := 0.5
			if v > 0 {
				att = 1
			}
			sd.Runs = append(sd.Runs, run{Arm: a, Rate: 1, Attainment: att, Moves: 2, Reversals60s: 0, SplitChanges: 2, SimSeconds: 3600})
		}
		seeds = append(seeds, sd)
	}
	sustained := map[string]map[string]float64{}
	var names []string
	for a := range arms {
		names = append(names, a)
		v := sums[a]
		lo, hi, sum := v[0], v[0], 0.0
		for _, x := range v {
			lo, hi, sum = min(lo, x), max(hi, x), sum+x
		}
		sustained[a] = map[string]float64{"mean": sum / float64(len(v)), "min": lo, "max": hi}
	}
	writeJSON(t, path, map[string]any{
		"arms": names, "per_seed": seeds, "sustained": sustained, "rates": []float64{1},
		"cells": []map[string]any{{"rate": 1, "attainment": map[string]float64{"mean": 0.5}}},
	})
}

// writeJSON writes v at path as JSON.
func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSeedSpreadTableRows: seed_spread.py's table names the seeds each
// case ran, read off its sweep, and gives a per-seed difference's 95%
// interval only over two seeds or more: the Azure traces' recorded
// arrivals run on one seed (no seed changes them), and their row said
// "23000-23019" and "[+nan, +nan]" before the forty-first round.
func TestSeedSpreadTableRows(t *testing.T) {
	py, root := python(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "fake-narwhal-bench") // never run: every sweep is cached
	if err := os.WriteFile(bin, []byte("not a binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Where seed_spread.py --first 5 looks for each case's two sweeps.
	where := exec.Command(py, "-c", `import sys
sys.path.insert(0, 'campaigns')
import burstiness as B, seed_spread as S
B.SEEDS.update(S.seeds_from(5))
for t, lv in [('demo', 'cv1'), ('azure', 'cv1')]:
    for arms in (B.STATIC + ',' + B.STATIC_ALG1 + ',adaptive', 'aggregated'):
        print(B.sweep_path(sys.argv[1], sys.argv[2], t, lv, arms)[1])
`, bin, dir)
	where.Dir = root
	out, err := where.CombinedOutput()
	if err != nil {
		t.Fatalf("sweep paths: %v\n%s", err, out)
	}
	paths := strings.Fields(string(out))
	if len(paths) != 4 {
		t.Fatalf("want 4 sweep paths, got %q", paths)
	}
	split := func(ad, tok, alg1 float64) map[string]float64 {
		return map[string]float64{"adaptive": ad, "static:4P4D": tok, "static:4P4D/alg1": alg1}
	}
	fullSweep(t, paths[0], map[int]map[string]float64{5: split(2, 1, 2), 6: split(3, 2, 3)})
	fullSweep(t, paths[1], map[int]map[string]float64{5: {"aggregated": 1}, 6: {"aggregated": 1}})
	fullSweep(t, paths[2], map[int]map[string]float64{5: split(8, 6, 6)})
	fullSweep(t, paths[3], map[int]map[string]float64{5: {"aggregated": 4}})
	cmd := exec.Command(py, "campaigns/seed_spread.py", "--bin", bin, "--out", dir, "--first", "5", "--cases", "demo:cv1,azure:cv1")
	cmd.Dir = root
	out, err = cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("seed_spread.py: %v\n%s", err, out)
	}
	table := string(out)
	// Demo: two seeds, each adaptive 1.0 req/s over 4P4D: a zero-width
	// interval; over aggregated +1.0 and +2.0: 1.5 +- 1.96 * 0.5.
	containsAll(t, "table", table,
		"| demo | Poisson (CV 1) | 5-6 | 4P4D 1.50 | 2.50 | 1.667 | +1.00 [+1.00, +1.00] | 0 / 0 / 2 |",
		"| 1.00 | 2.500; +1.50 [+0.52, +2.48]; 0 / 0 / 2 |",
		"| azure | recorded arrivals | 5 | 4P4D 6.00 | 8.00 | 1.333 | +2.00 (one seed: no interval) | 0 / 0 / 1 |",
		"| 4.00 | 2.000; +4.00 (one seed: no interval); 0 / 0 / 1 |",
	)
	if strings.Contains(table, "nan") {
		t.Errorf("table prints nan:\n%s", table)
	}
}

// TestDevelopCompareInterval: develop.py compare gives each case's
// per-seed difference B - A with its 95% interval beside the means
// (forty-first round), and the one seed's difference alone where a case
// ran one seed (the Azure traces on the development seeds).
func TestDevelopCompareInterval(t *testing.T) {
	py, root := python(t)
	a, b := t.TempDir(), t.TempDir()
	// Demo: B is 1.0 and 3.0 req/s above A on its two seeds, so B - A is
	// 2.0 with a standard error of sqrt(2)/sqrt(2) = 1: 2.0 -+ 1.96.
	fullSweep(t, filepath.Join(a, "demo-cv1.json"), map[int]map[string]float64{300: {"adaptive": 2}, 301: {"adaptive": 2}})
	fullSweep(t, filepath.Join(b, "demo-cv1.json"), map[int]map[string]float64{300: {"adaptive": 3}, 301: {"adaptive": 5}})
	fullSweep(t, filepath.Join(a, "azure-b8.json"), map[int]map[string]float64{300: {"adaptive": 8}})
	fullSweep(t, filepath.Join(b, "azure-b8.json"), map[int]map[string]float64{300: {"adaptive": 7.5}})
	cmd := exec.Command(py, "campaigns/develop.py", "compare", a, b)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("develop.py compare: %v\n%s", err, out)
	}
	containsAll(t, "compare", string(out),
		"demo     cv1    2.000 ->   4.000  B-A +2.000 [+0.040, +3.960]  seeds lower/higher 0/2",
		"azure    b8     8.000 ->   7.500  B-A -0.500 (one seed)  seeds lower/higher 1/0",
	)
}

// gridSweep writes a sim --json sweep of the adaptive arm at path: the
// grid rates, and per seed its sustained rate and one run per rate with
// the attainment att[seed][k] at rates[k] and the given TTFT misses,
// TPOT misses and spilled prompts; a refined rate is added on every
// seed, as sim --refine adds its bisections, for attainment to leave
// out (the two runs compared refine at different rates, as real ones do).
func gridSweep(t *testing.T, path string, rates []float64, refined float64, sustained map[int]float64,
	att map[int][]float64, ttft, tpot, spilled int) {
	t.Helper()
	var seeds []map[string]any
	for s, a := range att {
		var runs []map[string]any
		for k, r := range rates {
			runs = append(runs, map[string]any{"arm": "adaptive", "rate": r, "attainment": a[k],
				"miss_ttft": ttft, "miss_tpot": tpot, "spilled": spilled})
		}
		runs = append(runs, map[string]any{"arm": "adaptive", "rate": refined, "attainment": 0.0})
		seeds = append(seeds, map[string]any{"seed": s, "runs": runs,
			"sustained": map[string]float64{"adaptive": sustained[s]}})
	}
	writeJSON(t, path, map[string]any{"rates": rates, "per_seed": seeds})
}

// TestDevelopAttainment: develop.py attainment pairs the two runs'
// attainment seed by seed at each grid rate (forty-fourth round), with a
// Student-t interval, marks a rate whose interval excludes zero, sums
// each run's misses and spilled prompts, prints the first grid rate above
// every seed's sustained rate in A and stops there, leaves refined rates
// out, and refuses runs of other seeds.
func TestDevelopAttainment(t *testing.T) {
	py, root := python(t)
	a, b, c := t.TempDir(), t.TempDir(), t.TempDir()
	rates := []float64{1, 2, 3, 4}
	sus := map[int]float64{300: 2, 301: 2, 302: 1}
	// At rate 1 B is 0.4, 0.5 and 0.6 points under A on the three seeds:
	// -0.5 with a standard error of 0.1/sqrt(3), times t(2) = 4.303:
	// -0.50 -+ 0.25. At 2 B is 1 point up on one seed only: +0.33 -+ 1.43.
	gridSweep(t, filepath.Join(a, "chatdoc-b8.json"), rates, 1.5, sus, map[int][]float64{
		300: {0.95, 0.92, 0.80, 0.70}, 301: {0.95, 0.92, 0.80, 0.70}, 302: {0.95, 0.89, 0.80, 0.70}}, 2, 5, 7)
	gridSweep(t, filepath.Join(b, "chatdoc-b8.json"), rates, 1.25, sus, map[int][]float64{
		300: {0.946, 0.93, 0.80, 0.70}, 301: {0.945, 0.92, 0.80, 0.70}, 302: {0.944, 0.89, 0.80, 0.70}}, 3, 1, 4)
	run := func(args ...string) (string, error) {
		cmd := exec.Command(py, append([]string{"campaigns/develop.py", "attainment"}, args...)...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run(a, b)
	if err != nil {
		t.Fatalf("develop.py attainment: %v\n%s", err, out)
	}
	containsAll(t, "attainment", out,
		"1.000   95.00%  -0.50 [-0.75, -0.25] *         3/0             6 -> 9              15 -> 3            21 -> 12",
		"2.000   91.00%  +0.33 [-1.10, +1.77]           0/1  ",
		"3.000   80.00%  +0.00 [+0.00, +0.00]           0/0  ",
		"chatdoc  b8   B lower (interval below zero) at: 1.000; higher (interval above zero) at: none",
	)
	if strings.Contains(out, "  4.000 ") || strings.Contains(out, "1.500") || strings.Contains(out, "1.250") {
		t.Errorf("attainment printed a rate past the first above every sustained rate, or a refined one:\n%s", out)
	}
	if out, err = run(a, b, "--all-rates"); err != nil || !strings.Contains(out, "  4.000 ") {
		t.Errorf("attainment --all-rates lacks the grid's top rate (%v):\n%s", err, out)
	}
	gridSweep(t, filepath.Join(c, "chatdoc-b8.json"), rates, 1.5, map[int]float64{300: 2},
		map[int][]float64{300: {0.95, 0.92, 0.80, 0.70}}, 2, 5, 7)
	if out, err = run(a, c); err == nil || !strings.Contains(out, "chatdoc b8: the two runs have different seeds or grids") {
		t.Errorf("attainment over other seeds: err %v, want a refusal naming the case:\n%s", err, out)
	}
}

// containsAll reports each of wants that out lacks, naming what out is.
func containsAll(t *testing.T, name, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("%s lacks %q:\n%s", name, want, out)
		}
	}
}
