package report

import (
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// OracleArm is the arm whose split timeline is the target of the
// adaptation lag.
const OracleArm = "oracle"

// WorkBin is the width of the bins of arriving work in the prefill-share
// plot.
const WorkBin = 10 * event.Second

// maxBins caps a run's work bins; a longer run gets wider bins.
const maxBins = 1 << 16

// cdfPoints caps the sample a CDF plot keeps of each run.
const cdfPoints = 2000

// builder accumulates runs, one at a time, reusing its scratch slices.
type builder struct {
	opts  Options
	runs  []RunReport
	plots []runPlot
	refs  bool
	ttft  []int64
	tpot  []int64
	wait  []int64
	// whole names each whole journal read so far by its metadata and
	// end-of-run record: the same journal twice (a run directory copied
	// over another) is refused, not reported as two runs.
	whole map[string]string
}

func newBuilder(opts Options) *builder { return &builder{opts: opts, whole: map[string]string{}} }

// sloOf returns the SLO a run is judged by: its metadata, unless overridden.
func (b *builder) sloOf(m event.RunMeta) event.SLO {
	slo := event.SLO{TTFT: event.Seconds(m.TTFTSLO), TPOT: event.Seconds(m.TPOTSLO)}
	if b.opts.TTFTSLO > 0 {
		slo.TTFT = event.Time(b.opts.TTFTSLO)
	}
	if b.opts.TPOTSLO > 0 {
		slo.TPOT = event.Time(b.opts.TPOTSLO)
	}
	return slo
}

// qualityAcc accumulates one class's F1.
type qualityAcc struct {
	refs, scored, unscored int
	sum, sloSum            float64
}

// runAcc scores one run a row at a time, so a run's rows need never be
// held at once: its percentiles keep three numbers a request, its plots
// the work bins and a sample.
type runAcc struct {
	rr      RunReport
	pl      runPlot
	slo     event.SLO
	sum     Summary
	refused [256]int
	expired [256]int
	failed  [256]int
	quality map[string]*qualityAcc
}

// begin starts scoring a run; its rows follow in request order (row),
// then end.
func (b *builder) begin(name, partial string, m event.RunMeta) *runAcc {
	slo := b.sloOf(m)
	a := &runAcc{slo: slo,
		rr: RunReport{Run: name, Partial: partial, Arm: m.Arm, Rate: m.Rate, Trace: m.Trace, Fleet: m.Fleet, Instances: m.Instances, GPUs: m.GPUs,
			TTFTSLO: slo.TTFT.Seconds(), TPOTSLO: slo.TPOT.Seconds(), Degraded: m.Degraded, LoadLagP99: m.LagP99},
		pl: runPlot{first: event.Never, end: 0, binWidth: WorkBin},
	}
	b.ttft, b.tpot, b.wait = b.ttft[:0], b.tpot[:0], b.wait[:0]
	return a
}

// row scores one more offered request. Rows must come in request order:
// the quality sums add in that order, so the report is the same whichever
// way the run was read.
func (b *builder) row(a *runAcc, r *event.Row) {
	a.sum.Add(r, a.slo)
	pl := &a.pl
	switch r.Terminal {
	case event.KindFinish:
		if t := r.TTFT(); t != event.Never {
			b.ttft = append(b.ttft, int64(t))
		}
		if t := r.TPOT(); t != event.Never {
			b.tpot = append(b.tpot, int64(t))
		}
	case event.KindRefuse:
		a.refused[r.Cause]++
	case event.KindExpire:
		a.expired[r.Cause]++
	case event.KindFail:
		a.failed[r.Cause]++
	}
	if r.Admit != event.Never && r.Arrival != event.Never {
		b.wait = append(b.wait, int64(r.Admit-r.Arrival))
	}
	if r.Scheduled != event.Never && r.Scheduled < pl.first {
		pl.first = r.Scheduled
	}
	if r.End != event.Never && r.End > pl.end {
		pl.end = r.End
	}
	if r.Arrival != event.Never && r.Arrival > pl.lastArr {
		pl.lastArr = r.Arrival
		for pl.lastArr/pl.binWidth >= maxBins {
			pl.widen()
		}
	}
	if r.Arrival != event.Never && r.Arrival >= 0 {
		k := int(r.Arrival / pl.binWidth)
		pl.growBins(k + 1)
		pl.prefill[k] += r.InputTokens
		pl.decode[k] += r.WantOutput
	}
	if r.Reference != "" {
		b.refs = true
		if a.quality == nil {
			a.quality = map[string]*qualityAcc{}
		}
		q := a.quality[r.Class]
		if q == nil {
			q = &qualityAcc{}
			a.quality[r.Class] = q
		}
		q.refs++
		if r.Completed() {
			if r.Response == "" {
				q.unscored++
			} else {
				f := F1(r.Response, r.Reference)
				q.scored++
				q.sum += f
				if event.Qualify(r, a.slo) == event.CheckOK {
					q.sloSum += f
				}
			}
		}
	}
}

// growBins lengthens the work bins to n (zeros).
func (pl *runPlot) growBins(n int) {
	for len(pl.prefill) < n {
		pl.prefill = append(pl.prefill, 0)
		pl.decode = append(pl.decode, 0)
	}
}

// widen doubles the work bins' width, each new bin the sum of two old
// ones: a bin of width 2w starting at 2kw holds what bins 2k and 2k+1 of
// width w held, so the bins come out as if the final width had been used
// from the start.
func (pl *runPlot) widen() {
	n := (len(pl.prefill) + 1) / 2
	for k := 0; k < n; k++ {
		p, d := pl.prefill[2*k], pl.decode[2*k]
		if 2*k+1 < len(pl.prefill) {
			p, d = p+pl.prefill[2*k+1], d+pl.decode[2*k+1]
		}
		pl.prefill[k], pl.decode[k] = p, d
	}
	pl.prefill, pl.decode = pl.prefill[:n], pl.decode[:n]
	pl.binWidth *= 2
}

// end finishes a run begun with begin, with its role-move records.
func (b *builder) end(a *runAcc, moves []event.Record) {
	rr, pl, sum := &a.rr, &a.pl, &a.sum
	// Counts and the four groups come from the one scoring rule.
	rr.Offered = sum.Offered
	rr.Completed, rr.Refused, rr.Expired, rr.Failed = sum.Completed, sum.Refused, sum.Expired, sum.Failed
	rr.Preemptions, rr.Spilled = sum.Preemptions, sum.Spilled
	g := &rr.Groups
	g.Qualified, g.AtCap, g.NotDone = sum.Qualified, sum.Misses[event.CheckLength], sum.Misses[event.CheckNotDone]
	g.MissTTFT, g.MissTPOT = sum.Misses[event.CheckTTFT], sum.Misses[event.CheckTPOT]
	g.MissShort, g.MissCancl = sum.Misses[event.CheckTooShort], sum.Misses[event.CheckCancelled]
	g.Missed = g.MissTTFT + g.MissTPOT + g.MissShort + g.MissCancl
	if rr.Offered > 0 {
		pl.growBins(int(pl.lastArr/pl.binWidth) + 1) // the last arrival's bin, even when empty
	}
	rr.Qualified = rr.Groups.Qualified
	rr.CompletedShare = share(rr.Completed, rr.Offered)
	rr.Attainment = share(rr.Qualified, rr.Offered)
	rr.TTFT, pl.ttftCDF = quantiles(b.ttft, true)
	rr.TPOT, pl.tpotCDF = quantiles(b.tpot, true)
	rr.QueueWait, _ = quantiles(b.wait, false)
	rr.Refusals, rr.Expiries, rr.Failures = causeCounts(&a.refused), causeCounts(&a.expired), causeCounts(&a.failed)

	if pl.first == event.Never {
		pl.first = 0
	}
	if rr.Offered > 0 && pl.end > pl.first {
		rr.Goodput.SpanS = (pl.end - pl.first).Seconds()
		rr.Goodput.RPS = float64(rr.Qualified) / rr.Goodput.SpanS
	}
	if rr.GPUs > 0 {
		v := rr.Goodput.RPS / float64(rr.GPUs)
		rr.Goodput.PerGPU = &v
	}

	rr.Moves = Moves(moves)
	pl.splits = Splits(moves)
	rr.Thrash = Thrash(pl.splits, DefaultThrashWindow)
	openPrefill := false
	for i := range moves {
		if moves[i].Opening() && moves[i].To == event.RoleMixed {
			// the aggregated arm: no prefill pool from the start (the
			// adaptive arm's aggregated spells are moves, and keep their
			// split line at 0 prefill engines)
			pl.mixed = true
		}
		if moves[i].Opening() && moves[i].To == event.RolePrefill {
			openPrefill = true
		}
	}
	if openPrefill {
		// A hybrid fleet (hybrid:kPmM) opens mixed engines beside a
		// prefill pool: it has a split, and its lag is measured.
		pl.mixed = false
	}
	if a.quality != nil {
		rr.Quality = qualityOf(a.quality)
	}
	b.runs = append(b.runs, *rr)
	b.plots = append(b.plots, *pl)
}

func share(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}

// percentile returns the nearest-rank p-quantile (0 < p <= 1) of a sorted
// sample: the smallest value with at least p of the sample at or below it.
func percentile(sorted []int64, p float64) int64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	k := int(math.Ceil(p*float64(n))) - 1
	k = max(0, min(k, n-1))
	return sorted[k]
}

// quantiles sorts xs (nanoseconds) and returns its p50/p95/p99 in seconds,
// and, when cdf is set, a sorted sample of at most cdfPoints values for a
// CDF plot.
func quantiles(xs []int64, cdf bool) (Quantiles, []float64) {
	slices.Sort(xs)
	q := Quantiles{N: len(xs)}
	if len(xs) == 0 {
		return q, nil
	}
	sec := func(v int64) float64 { return float64(v) / 1e9 }
	q.P50, q.P95, q.P99 = sec(percentile(xs, 0.50)), sec(percentile(xs, 0.95)), sec(percentile(xs, 0.99))
	if !cdf {
		return q, nil
	}
	n := min(len(xs), cdfPoints)
	out := make([]float64, n)
	for i := range out {
		j := i
		if len(xs) > cdfPoints {
			j = int(int64(i) * int64(len(xs)-1) / int64(cdfPoints-1))
		}
		out[i] = sec(xs[j])
	}
	return q, out
}

// causeName names a cause for the report; CauseNone is "unspecified".
func causeName(c event.Cause) string {
	if c == event.CauseNone {
		return "unspecified"
	}
	return c.String()
}

func causeCounts(n *[256]int) []CauseCount {
	out := []CauseCount{}
	for c, k := range n {
		if k > 0 {
			out = append(out, CauseCount{Cause: causeName(event.Cause(c)), N: k})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cause < out[j].Cause })
	return out
}

// AllClasses names the quality row of every class together.
const AllClasses = "(all)"

func qualityOf(m map[string]*qualityAcc) []ClassQuality {
	classes := make([]string, 0, len(m))
	for c := range m {
		classes = append(classes, c)
	}
	sort.Strings(classes)
	row := func(name string, q *qualityAcc) ClassQuality {
		cq := ClassQuality{Class: name, WithReference: q.refs, Scored: q.scored, Unscored: q.unscored}
		if q.scored > 0 {
			c, a, s := q.sum/float64(q.scored), q.sum/float64(q.refs), q.sloSum/float64(q.refs)
			cq.CompletedF1, cq.AllOfferF1, cq.SLOF1 = &c, &a, &s
		}
		return cq
	}
	out := make([]ClassQuality, 0, len(classes)+1)
	var all qualityAcc // summed in class order, so the floats do not depend on map order
	for _, c := range classes {
		q := m[c]
		out = append(out, row(c, q))
		all.refs += q.refs
		all.scored += q.scored
		all.unscored += q.unscored
		all.sum += q.sum
		all.sloSum += q.sloSum
	}
	return append(out, row(AllClasses, &all))
}

// finish sorts the runs and computes what spans runs: the arms' DistServe
// goodput and the adaptation lag against the oracle.
func (b *builder) finish() *Report {
	sortRuns(b.runs, b.plots)
	rep := &Report{AttainmentTarget: AttainmentTarget, ThrashWindow: DefaultThrashWindow.Seconds(),
		Runs: b.runs, plots: b.plots, HasReferences: b.refs, Arms: []ArmReport{}}
	if rep.Runs == nil {
		rep.Runs = []RunReport{}
	}
	for i := range rep.Runs {
		if rep.Runs[i].Partial != "" {
			rep.Partial = true
		}
	}
	var over []string
	if b.opts.TTFTSLO > 0 {
		over = append(over, "ttft")
	}
	if b.opts.TPOTSLO > 0 {
		over = append(over, "tpot")
	}
	rep.SLOOverride = strings.Join(over, ",")

	// Arms, in run order (runs are sorted by arm).
	for i := 0; i < len(rep.Runs); {
		j := i
		for j < len(rep.Runs) && rep.Runs[j].Arm == rep.Runs[i].Arm {
			j++
		}
		a := ArmReport{Arm: rep.Runs[i].Arm, GPUs: rep.Runs[i].GPUs}
		var rates, att []float64
		for k := i; k < j; k++ {
			r := &rep.Runs[k]
			if len(a.Rates) == 0 || a.Rates[len(a.Rates)-1] != r.Rate {
				a.Rates = append(a.Rates, r.Rate)
			}
			v := r.Attainment
			if r.Partial != "" {
				// A run cut short shows what it did, not what the rate
				// sustains: requests never offered cannot miss. It counts as
				// failing, so the goodput stays a floor.
				v = -1
				if n := len(a.PartialRates); n == 0 || a.PartialRates[n-1] != r.Rate {
					a.PartialRates = append(a.PartialRates, r.Rate)
				}
			}
			rates, att = append(rates, r.Rate), append(att, v)
			if r.GPUs != a.GPUs {
				a.GPUs = 0
			}
		}
		if v, ok := Sustained(rates, att, AttainmentTarget); ok {
			a.DistServe = &v
			a.DistServeGridTop = v == rates[len(rates)-1]
			if a.GPUs > 0 {
				pg := v / float64(a.GPUs)
				a.DistServePerGPU = &pg
			}
		}
		for k := i; k < j; k++ {
			rep.Runs[k].Goodput.DistServe, rep.Runs[k].Goodput.DSPerGPU = a.DistServe, a.DistServePerGPU
		}
		rep.Arms = append(rep.Arms, a)
		i = j
	}

	for i := range rep.Runs {
		rep.Runs[i].Lag = rep.lagOf(i)
	}
	return rep
}

// oracleAt returns the index of the first oracle run at rate, or -1.
func (r *Report) oracleAt(rate float64) int {
	for i := range r.Runs {
		if r.Runs[i].Arm == OracleArm && r.Runs[i].Rate == rate {
			return i
		}
	}
	return -1
}

// lagOf measures run i's adaptation lag against the oracle at its rate:
// for each change of the oracle's split, the time until run i's split is
// first within one engine of the oracle's new split, censored at the
// oracle's next change (or at run i's last end for the last change).
func (r *Report) lagOf(i int) LagReport {
	run := &r.Runs[i]
	if run.Arm == OracleArm {
		return LagReport{Status: LagOracle}
	}
	if r.plots[i].mixed {
		return LagReport{Status: LagNoSplit}
	}
	o := r.oracleAt(run.Rate)
	if o < 0 {
		return LagReport{Status: LagNoOracle}
	}
	target := Changes(r.plots[o].splits)
	phases := make([]PhaseTarget, len(target))
	for k, t := range target {
		end := r.plots[i].end
		if k+1 < len(target) {
			end = target[k+1].At
		}
		phases[k] = PhaseTarget{Start: t.At, End: max(end, t.At), Prefill: t.Prefill}
	}
	lags, missed := Lag(r.plots[i].splits, phases)
	if len(lags) == 0 {
		return LagReport{Status: LagNoChange, OracleRun: r.Runs[o].Run}
	}
	l := LagReport{Status: LagMeasured, OracleRun: r.Runs[o].Run, Changes: len(lags), Missed: missed,
		Lags: []float64{}, Targets: []int{}, ChangesAt: []float64{}}
	var sum event.Time
	for k, v := range lags {
		sum += v
		l.Lags = append(l.Lags, v.Seconds())
		l.Targets = append(l.Targets, phases[k+1].Prefill)
		l.ChangesAt = append(l.ChangesAt, phases[k+1].Start.Seconds())
	}
	if len(lags) > 0 {
		l.Mean = (sum / event.Time(len(lags))).Seconds()
	}
	return l
}
