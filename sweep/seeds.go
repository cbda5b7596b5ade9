package sweep

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/narwhal-bench/narwhal-bench/traces"
)

// Stat is one figure over seeds: the mean and an interval, a 95%
// Student-t confidence interval of the mean when there are at least
// five seeds, else the range (min to max) of the seeds' values.
type Stat struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	Lo   float64 `json:"lo"`
	Hi   float64 `json:"hi"`
	// Kind is "t95" (a 95% confidence interval of the mean) or "range"
	// (min and max, for fewer than five seeds).
	Kind string  `json:"interval"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
}

// MinSeedsForCI is the fewest seeds for which a Stat is a confidence
// interval rather than a range.
const MinSeedsForCI = 5

// tQuantile975 is Student's t 0.975 quantile for df = 1..30.
var tQuantile975 = [...]float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
	2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060,
	2.056, 2.052, 2.048, 2.045, 2.042}

// StatOf summarises values (one per seed).
func StatOf(v []float64) Stat {
	s := Stat{N: len(v)}
	if len(v) == 0 {
		return s
	}
	s.Min, s.Max = math.Inf(1), math.Inf(-1)
	for _, x := range v {
		s.Mean += x / float64(len(v))
		s.Min, s.Max = math.Min(s.Min, x), math.Max(s.Max, x)
	}
	if len(v) < MinSeedsForCI {
		s.Lo, s.Hi, s.Kind = s.Min, s.Max, "range"
		return s
	}
	var ss float64
	for _, x := range v {
		ss += (x - s.Mean) * (x - s.Mean)
	}
	sd := math.Sqrt(ss / float64(len(v)-1))
	t := 1.96
	if df := len(v) - 1; df <= len(tQuantile975) {
		t = tQuantile975[df-1]
	}
	h := t * sd / math.Sqrt(float64(len(v)))
	s.Lo, s.Hi, s.Kind = s.Mean-h, s.Mean+h, "t95"
	return s
}

// CheckSeeds refuses several seeds on a trace whose requests the seed
// does not change (an imported trace without batches): they would be one
// run counted as several independent draws, with an interval of zero
// width.
func CheckSeeds(tr *traces.Trace, seeds []uint64) error {
	if len(seeds) < 2 || tr.SeedMatters() {
		return nil
	}
	return fmt.Errorf("%d seeds on trace %s: it is imported, its arrival times and sizes are data, so every seed gives the same run, "+
		"counted as %d independent draws: expected one seed (or sim --batch-mean, whose batches are drawn from the seed)", len(seeds), tr.Name, len(seeds))
}

// ParseSeeds reads --seeds: a count N (N seeds from first: first,
// first+1, ...), a comma-separated list ("1,2,3"), or a range "A..B".
func ParseSeeds(s string, first uint64) ([]uint64, error) {
	s = strings.TrimSpace(s)
	bad := fmt.Errorf("%q: expected a count of seeds (5), a list (1,2,3) or a range (1..5)", s)
	switch {
	case strings.Contains(s, ".."):
		a, b, _ := strings.Cut(s, "..")
		lo, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 64)
		hi, err2 := strconv.ParseUint(strings.TrimSpace(b), 10, 64)
		if err1 != nil || err2 != nil || hi < lo || hi-lo >= 1000 {
			return nil, bad
		}
		out := make([]uint64, 0, hi-lo+1)
		for k := uint64(0); k <= hi-lo; k++ { // x++ would wrap at the top of uint64
			out = append(out, lo+k)
		}
		return out, nil
	case strings.Contains(s, ","):
		var out []uint64
		seen := map[uint64]bool{}
		for _, f := range strings.Split(s, ",") {
			x, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
			if err != nil {
				return nil, bad
			}
			if seen[x] {
				return nil, fmt.Errorf("%q: seed %d given twice: expected each seed once", s, x)
			}
			seen[x] = true
			out = append(out, x)
		}
		return out, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n < 1 || n > 1000 {
		return nil, bad
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = first + uint64(i)
	}
	return out, nil
}

// Multi is a sweep repeated over seeds: the per-seed results and, per
// (arm, rate) cell and per arm, the figures with their spread.
type Multi struct {
	Seeds   []uint64  `json:"seeds"`
	Trace   string    `json:"trace"`
	Fleet   string    `json:"fleet"`
	Rates   []float64 `json:"rates"`
	Arms    []string  `json:"arms"`
	SLO     SLOJSON   `json:"slo"`
	PerSeed []*Result `json:"per_seed"`
	// Cells is attainment per (arm, rate), in (arm, rate) order.
	Cells []CellStat `json:"cells"`
	// Sustained is each arm's standard sustained rate over seeds (a seed
	// where the arm sustains no swept rate counts 0); GridTop counts the
	// seeds where the arm passed at the grid's top (its sustained rate
	// there is a lower bound).
	Sustained map[string]Stat `json:"sustained"`
	GridTop   map[string]int  `json:"sustained_grid_top_seeds"`
	// Crossing is the interpolated crossing over the seeds that have one.
	Crossing map[string]Stat `json:"sustained_crossing"`
	// Refine is the bisections that refined each seed's sustained rates
	// (Config.Refine; each seed's runs for it are in PerSeed[i].Refined).
	Refine int `json:"refine,omitempty"`
	// Cordons are the maintenance windows every run played (Result.Cordons).
	Cordons string `json:"cordons,omitempty"`
}

// CellStat is one (arm, rate) cell over seeds.
type CellStat struct {
	Arm        string  `json:"arm"`
	Rate       float64 `json:"rate"`
	Attainment Stat    `json:"attainment"`
	Failed     Stat    `json:"failed"`
	Moves      Stat    `json:"moves"`
	Reversals  Stat    `json:"reversals_60s"`
}

// ExecuteSeeds runs cfg once per seed (cfg.Seed is ignored) and
// summarises the runs over seeds.
func ExecuteSeeds(cfg Config, seeds []uint64) (*Multi, error) {
	if len(seeds) == 0 {
		return nil, fmt.Errorf("sweep: no seeds: expected at least one")
	}
	m := &Multi{Seeds: seeds}
	for _, sd := range seeds {
		c := cfg
		c.Seed = sd
		r, err := Execute(c)
		if err != nil {
			return nil, fmt.Errorf("seed %d: %w", sd, err)
		}
		m.PerSeed = append(m.PerSeed, r)
	}
	m.summarise()
	return m, nil
}

func (m *Multi) summarise() {
	r0 := m.PerSeed[0]
	m.Trace, m.Fleet, m.Rates, m.Arms, m.SLO, m.Refine, m.Cordons = r0.Trace, r0.Fleet, r0.Rates, r0.Arms, r0.SLO, r0.Refine, r0.Cordons
	m.Sustained, m.GridTop, m.Crossing = map[string]Stat{}, map[string]int{}, map[string]Stat{}
	for k := range r0.Runs {
		var att, fail, mv, rev []float64
		for _, r := range m.PerSeed {
			x := r.Runs[k]
			att = append(att, x.Attainment)
			fail = append(fail, float64(x.Failed))
			mv = append(mv, float64(x.Moves))
			rev = append(rev, float64(x.Reversals))
		}
		a := StatOf(att)
		a.Lo, a.Hi = max(a.Lo, 0), min(a.Hi, 1) // a share: the interval is clipped to [0, 1]
		m.Cells = append(m.Cells, CellStat{Arm: r0.Runs[k].Arm, Rate: r0.Runs[k].Rate, Attainment: a,
			Failed: StatOf(fail), Moves: StatOf(mv), Reversals: StatOf(rev)})
	}
	for _, a := range m.Arms {
		var sus, cross []float64
		for _, r := range m.PerSeed {
			v := 0.0
			if s := r.Sustained[a]; s != nil {
				v = *s
			}
			sus = append(sus, v)
			if r.SustainedGridTop[a] {
				m.GridTop[a]++
			}
			if c := r.SustainedCrossing[a]; c != nil {
				cross = append(cross, *c)
			}
		}
		st := StatOf(sus)
		st.Lo = max(st.Lo, 0) // a rate: the interval is clipped at 0
		m.Sustained[a] = st
		if len(cross) > 0 {
			m.Crossing[a] = StatOf(cross)
		}
	}
}

// Cell returns the cell of arm at rate index ri.
func (m *Multi) Cell(ai, ri int) CellStat { return m.Cells[ai*len(m.Rates)+ri] }

// fmtStat prints a stat as "mean [lo, hi]" with f formatting each value.
func fmtStat(s Stat, f func(float64) string) string {
	if s.N <= 1 {
		return f(s.Mean)
	}
	return f(s.Mean) + " [" + f(s.Lo) + ", " + f(s.Hi) + "]"
}

// WriteMultiTable prints a sweep over seeds: per arm and rate the mean
// attainment and its interval; per arm the sustained rate with its
// interval, the seeds at the grid top, and the ratio to the best static
// split (the static split with the highest mean sustained rate).
func WriteMultiTable(w interface{ Write([]byte) (int, error) }, m *Multi) error {
	var b strings.Builder
	kind := "95% confidence interval of the mean (Student t)"
	if len(m.Seeds) < MinSeedsForCI {
		kind = "range over the seeds (min, max): fewer than 5 seeds"
	}
	fmt.Fprintf(&b, "trace: %s | fleet: %s | SLO ttft<=%gs tpot<=%gs | %d seeds: %s\n", m.Trace, m.Fleet, m.SLO.TTFT, m.SLO.TPOT,
		len(m.Seeds), seedList(m.Seeds))
	fmt.Fprintf(&b, "cells: mean share of offered requests that met both SLOs [%s]\n", kind)
	fmt.Fprintf(&b, "sustained: highest rate such that it and every lower swept rate reach 90%%, per seed, then over seeds (a seed with none counts 0)\n")
	b.WriteString(cordonNote(m.Cordons) + refineNote(m.Refine) + "\n")
	width := len("arm")
	for _, a := range m.Arms {
		width = max(width, len(a))
	}
	pct := func(x float64) string { return strconv.FormatFloat(100*x, 'f', 0, 64) }
	cells := make([][]string, len(m.Arms))
	cw := 6
	for ai := range m.Arms {
		for ri := range m.Rates {
			s := fmtStat(m.Cell(ai, ri).Attainment, pct)
			cells[ai] = append(cells[ai], s)
			cw = max(cw, len(s)+1)
		}
	}
	head := fmt.Sprintf("%-*s", width+2, "arm")
	for _, r := range m.Rates {
		head += fmt.Sprintf("%*s", cw, fmtRate(r))
	}
	head += "   sustained (req/s)"
	b.WriteString(head + "\n" + strings.Repeat("-", len(head)) + "\n")
	for ai, a := range m.Arms {
		fmt.Fprintf(&b, "%-*s", width+2, a)
		for ri := range m.Rates {
			fmt.Fprintf(&b, "%*s", cw, cells[ai][ri])
		}
		fmt.Fprintf(&b, "   %s", fmtStat(m.Sustained[a], fmtRate))
		if g := m.GridTop[a]; g > 0 {
			fmt.Fprintf(&b, " (grid top in %d of %d seeds: at least that)", g, len(m.Seeds))
		}
		b.WriteString("\n")
	}
	best, bestArm := -1.0, ""
	for _, a := range m.Arms {
		if s := m.Sustained[a]; strings.HasPrefix(a, "static:") && !strings.Contains(a, "/") && s.Mean > best {
			best, bestArm = s.Mean, a
		}
	}
	if bestArm != "" && best > 0 {
		fmt.Fprintf(&b, "\nbest static split (by mean sustained rate): %s, %s req/s\n", bestArm, fmtStat(m.Sustained[bestArm], fmtRate))
		for _, a := range m.Arms {
			if a == bestArm {
				continue
			}
			var ratios []float64
			for _, r := range m.PerSeed {
				num, den := 0.0, 0.0
				if s := r.Sustained[a]; s != nil {
					num = *s
				}
				if s := r.Sustained[bestArm]; s != nil {
					den = *s
				}
				if den > 0 {
					ratios = append(ratios, num/den)
				}
			}
			if len(ratios) == 0 {
				continue
			}
			st := StatOf(ratios)
			st.Lo = max(st.Lo, 0) // a ratio of rates: the interval is clipped at 0
			fmt.Fprintf(&b, "%-*s %sx the best static split's sustained rate (per seed; min %.2fx)\n", width, a,
				fmtStat(st, func(x float64) string { return strconv.FormatFloat(x, 'f', 2, 64) }), st.Min)
		}
	}
	_, err := w.Write([]byte(b.String()))
	return err
}

func seedList(s []uint64) string {
	c := append([]uint64(nil), s...)
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	contiguous := true
	for i := 1; i < len(c); i++ {
		if c[i] != c[i-1]+1 {
			contiguous = false
		}
	}
	if contiguous && len(c) > 2 {
		return fmt.Sprintf("%d..%d", c[0], c[len(c)-1])
	}
	parts := make([]string, len(s))
	for i, x := range s {
		parts[i] = strconv.FormatUint(x, 10)
	}
	return strings.Join(parts, ",")
}
