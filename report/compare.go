package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// Comparison is narwhal-report --compare A B: the same runs measured twice
// (a live run and its simulator replay, say), paired by run name, metric
// by metric.
type Comparison struct {
	A     string    `json:"a"`
	B     string    `json:"b"`
	Pairs []RunPair `json:"pairs"`
	// UnpairedA and UnpairedB name runs found on one side only.
	UnpairedA []string `json:"unpaired_a,omitempty"`
	UnpairedB []string `json:"unpaired_b,omitempty"`
}

// RunPair is one run on both sides.
type RunPair struct {
	Run     string          `json:"run"` // A's run name
	RunB    string          `json:"run_b"`
	Arm     string          `json:"arm"`
	Rate    float64         `json:"rate"`
	Metrics []MetricCompare `json:"metrics"`
	// PartialA and PartialB say why a side's run is not whole (--partial;
	// "" when it is).
	PartialA string `json:"partial_a,omitempty"`
	PartialB string `json:"partial_b,omitempty"`
}

// MetricCompare is one metric on both sides and the error of B against A:
// Diff = B − A in the metric's unit (percentage points for shares), and
// Rel = (B − A)/A for latencies and counts (null when A is 0).
type MetricCompare struct {
	Metric string   `json:"metric"`
	Unit   string   `json:"unit"`
	A      float64  `json:"a"`
	B      float64  `json:"b"`
	Diff   float64  `json:"diff"`
	Rel    *float64 `json:"rel"`
}

// Get returns the named metric.
func (p *RunPair) Get(metric string) (MetricCompare, bool) {
	for _, m := range p.Metrics {
		if m.Metric == metric {
			return m, true
		}
	}
	return MetricCompare{}, false
}

// Compare pairs a's and b's runs by name (a single run on each side pairs
// whatever the names) and compares attainment, completed, TTFT p50/p95/p99,
// TPOT p50/p95, moves and the time spent in each split (prefill pool size).
func Compare(a, b *Report, nameA, nameB string) *Comparison {
	c := &Comparison{A: nameA, B: nameB}
	byName := map[string]int{}
	for j := range b.Runs {
		byName[b.Runs[j].Run] = j
	}
	used := map[int]bool{}
	for i := range a.Runs {
		j, ok := byName[a.Runs[i].Run]
		if !ok && len(a.Runs) == 1 && len(b.Runs) == 1 {
			j, ok = 0, true
		}
		if !ok {
			c.UnpairedA = append(c.UnpairedA, a.Runs[i].Run)
			continue
		}
		used[j] = true
		c.Pairs = append(c.Pairs, comparePair(a, i, b, j))
	}
	for j := range b.Runs {
		if !used[j] {
			c.UnpairedB = append(c.UnpairedB, b.Runs[j].Run)
		}
	}
	return c
}

func comparePair(a *Report, i int, b *Report, j int) RunPair {
	x, y := &a.Runs[i], &b.Runs[j]
	p := RunPair{Run: x.Run, RunB: y.Run, Arm: x.Arm, Rate: x.Rate, PartialA: x.Partial, PartialB: y.Partial}
	add := func(metric, unit string, va, vb float64, rel bool) {
		m := MetricCompare{Metric: metric, Unit: unit, A: va, B: vb, Diff: vb - va}
		if rel && va != 0 {
			r := (vb - va) / va
			m.Rel = &r
		}
		p.Metrics = append(p.Metrics, m)
	}
	add("attainment", "%", 100*x.Attainment, 100*y.Attainment, false)
	add("completed", "requests", float64(x.Completed), float64(y.Completed), true)
	add("offered", "requests", float64(x.Offered), float64(y.Offered), true)
	add("ttft_p50", "s", x.TTFT.P50, y.TTFT.P50, true)
	add("ttft_p95", "s", x.TTFT.P95, y.TTFT.P95, true)
	add("ttft_p99", "s", x.TTFT.P99, y.TTFT.P99, true)
	add("tpot_p50", "ms", 1000*x.TPOT.P50, 1000*y.TPOT.P50, true)
	add("tpot_p95", "ms", 1000*x.TPOT.P95, 1000*y.TPOT.P95, true)
	add("moves", "moves", float64(x.Moves), float64(y.Moves), false)
	ta, tb := splitTimes(&a.plots[i]), splitTimes(&b.plots[j])
	keys := map[int]bool{}
	for k := range ta {
		keys[k] = true
	}
	for k := range tb {
		keys[k] = true
	}
	ks := make([]int, 0, len(keys))
	for k := range keys {
		ks = append(ks, k)
	}
	sort.Ints(ks)
	for _, k := range ks {
		label := fmt.Sprintf("time_%dP", k)
		if a.plots[i].mixed || b.plots[j].mixed {
			label = fmt.Sprintf("time_split_%d", k)
		}
		add(label, "s", ta[k], tb[k], true)
	}
	return p
}

// splitTimes is how long the run spent at each prefill pool size, from
// its first scheduled send to its last end.
func splitTimes(pl *runPlot) map[int]float64 {
	out := map[int]float64{}
	if len(pl.splits) == 0 || pl.end <= pl.first {
		return out
	}
	for k, s := range pl.splits {
		from := max(s.At, pl.first)
		to := pl.end
		if k+1 < len(pl.splits) {
			to = min(pl.splits[k+1].At, pl.end)
		}
		if to > from {
			out[s.Prefill] += (to - from).Seconds()
		}
	}
	return out
}

// WriteCompare renders c: text (a table per run pair) or json.
func (c *Comparison) Write(w io.Writer, f Format) error {
	if f == FormatJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(c)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "A: %s\nB: %s\n", c.A, c.B)
	b.WriteString("error: B - A (points for attainment), and (B - A)/A for latencies, counts and times\n")
	for _, p := range c.Pairs {
		name := p.Run
		if p.RunB != p.Run {
			name += " / " + p.RunB
		}
		fmt.Fprintf(&b, "\n%s (arm %s, %s req/s)\n", name, p.Arm, fmtRate(p.Rate))
		for _, side := range []struct{ name, why string }{{"A", p.PartialA}, {"B", p.PartialB}} {
			if side.why != "" {
				fmt.Fprintf(&b, "PARTIAL: %s's run is not whole (%s): requests that had not ended count as not completed\n", side.name, side.why)
			}
		}
		fmt.Fprintf(&b, "%-14s %-9s %12s %12s %12s %9s\n", "metric", "unit", "A", "B", "B - A", "error")
		b.WriteString(strings.Repeat("-", 73) + "\n")
		for _, m := range p.Metrics {
			rel := "-"
			if m.Rel != nil {
				rel = fmt.Sprintf("%+.1f%%", 100**m.Rel)
			} else if m.Unit == "%" {
				rel = fmt.Sprintf("%+.1f pt", m.Diff)
			}
			fmt.Fprintf(&b, "%-14s %-9s %12s %12s %12s %9s\n", m.Metric, m.Unit, num(m.A), num(m.B), num(m.Diff), rel)
		}
	}
	for _, n := range c.UnpairedA {
		fmt.Fprintf(&b, "\nrun %s: in A only\n", n)
	}
	for _, n := range c.UnpairedB {
		fmt.Fprintf(&b, "\nrun %s: in B only\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func num(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e9 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.4g", v)
}
