package campaigncheck

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPoolDirsPoolsAggregatedSweep: burstiness.py keeps aggregated
// serving as a sweep of its own beside each case's sweep (issue 10,
// thirty-third round); seed_spread.py --pool-dirs pools the sweep that
// ran the adaptive arm as the static columns' (it used to stop on
// "several sweeps"; thirty-fourth round), and the aggregated sweeps,
// seed by seed, as a column of their own once every directory has one
// (thirty-sixth round).
func TestPoolDirsPoolsAggregatedSweep(t *testing.T) {
	py, root := python(t)
	a, b := t.TempDir(), t.TempDir()
	fullSweep(t, filepath.Join(a, "chatdoc-cv3-aaaa.json"), map[int]map[string]float64{
		16: {"adaptive": 2.0, "static:4P4D": 1.0, "static:4P4D/alg1": 2.0},
		17: {"adaptive": 2.0, "static:4P4D": 1.0, "static:4P4D/alg1": 2.0},
	})
	fullSweep(t, filepath.Join(a, "chatdoc-cv3-bbbb.json"), map[int]map[string]float64{16: {"aggregated": 9.0}, 17: {"aggregated": 9.0}})
	fullSweep(t, filepath.Join(b, "chatdoc-cv3-cccc.json"), map[int]map[string]float64{
		18: {"adaptive": 1.0, "static:4P4D": 1.0, "static:4P4D/alg1": 2.0},
		19: {"adaptive": 1.0, "static:4P4D": 1.0, "static:4P4D/alg1": 2.0},
	})
	cmd := exec.Command(py, "campaigns/seed_spread.py", "--pool-dirs", a+","+b)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("seed_spread.py --pool-dirs: %v\n%s", err, out)
	}
	// Over the four seeds adaptive's mean is 1.5, 4P4D's 1.0 and
	// 4P4D/alg1's 2.0; the aggregated sweep's 9.0 is not a static arm,
	// and with no aggregated sweep in b there is no aggregated column.
	want := "| chatdoc | gamma CV 3 | 16-17, 18-19 (4) | 1.500 ["
	if !strings.Contains(string(out), want) {
		t.Fatalf("pooled table lacks %q:\n%s", want, out)
	}
	if !strings.Contains(string(out), "| 0.750 [") || !strings.Contains(string(out), "] | - |") {
		t.Fatalf("pooled /alg1 ratio is not 0.750, or an aggregated column without b's sweep:\n%s", out)
	}
	// The summary line's second interval, by the delta method: per seed
	// d = (adaptive - 0.75 * alg1) / 2.0 is +0.25, +0.25, -0.25, -0.25,
	// so the standard error is sqrt((0.25/3)/4) = 0.1443 and the interval
	// 0.75 -+ 1.96 * 0.1443 (thirty-eighth round).
	if want := "(/alg1) over 1 cases: 0.7500 ["; !strings.Contains(string(out), want) ||
		!strings.Contains(string(out), "; delta method [0.4671, 1.0329] (chatdoc, gamma CV 3)") {
		t.Fatalf("pooled /alg1 summary line lacks the ratio or its delta-method interval [0.4671, 1.0329]:\n%s", out)
	}
	// With b's aggregated sweep (1.0 on its seeds, listed in another
	// order), aggregated's mean is 5.0 and adaptive / aggregated 0.300.
	fullSweep(t, filepath.Join(b, "chatdoc-cv3-eeee.json"), map[int]map[string]float64{19: {"aggregated": 1.0}, 18: {"aggregated": 1.0}})
	cmd = exec.Command(py, "campaigns/seed_spread.py", "--pool-dirs", a+","+b)
	cmd.Dir = root
	if out, err = cmd.CombinedOutput(); err != nil {
		t.Fatalf("seed_spread.py --pool-dirs: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "| 0.300 [") || !strings.Contains(string(out), "minimum adaptive / aggregated over 1 cases: 0.3000") {
		t.Fatalf("pooled adaptive / aggregated is not 0.300:\n%s", out)
	}
	// Two sweeps that both ran the adaptive arm are still an error.
	fullSweep(t, filepath.Join(b, "chatdoc-cv3-dddd.json"), map[int]map[string]float64{18: {"adaptive": 1.0, "static:4P4D": 1.0}})
	cmd = exec.Command(py, "campaigns/seed_spread.py", "--pool-dirs", a+","+b)
	cmd.Dir = root
	out, err = cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "several sweeps of chatdoc cv3") {
		t.Fatalf("two adaptive sweeps in one directory: want an error naming them, got %v:\n%s", err, out)
	}
}
