package report

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Format is an output format of Write.
type Format string

// Formats.
const (
	FormatText     Format = "text" // aligned tables for a terminal
	FormatMarkdown Format = "markdown"
	FormatJSON     Format = "json" // the Report as one JSON object
	FormatCSV      Format = "csv"  // one row per run
)

// ParseFormat reads a --format value.
func ParseFormat(s string) (Format, error) {
	switch f := Format(strings.ToLower(s)); f {
	case FormatText, FormatMarkdown, FormatJSON, FormatCSV:
		return f, nil
	case "terminal", "table", "":
		return FormatText, nil
	case "md":
		return FormatMarkdown, nil
	}
	return "", fmt.Errorf("format %q: expected text, markdown, json or csv", s)
}

// Write renders the report in format f. The output depends only on the
// report: runs in their sorted order, no map iteration, no timestamps.
func (r *Report) Write(w io.Writer, f Format) error {
	switch f {
	case FormatJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	case FormatCSV:
		return r.writeCSV(w)
	case FormatMarkdown:
		return r.writeTables(w, true)
	case FormatText, "":
		return r.writeTables(w, false)
	}
	return fmt.Errorf("format %q: expected text, markdown, json or csv", f)
}

// Number formatting shared by the text and markdown tables.

// fmtRate prints a rate with four significant digits (3.958, 2.4).
func fmtRate(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }

func fmtPct(n, of int) string {
	if of == 0 {
		return "-"
	}
	return strconv.FormatFloat(100*float64(n)/float64(of), 'f', 1, 64) + "%"
}

func fmtCountPct(n, of int) string { return strconv.Itoa(n) + " (" + fmtPct(n, of) + ")" }

func fmtFixed(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }

func fmtPtr(v *float64, prec int) string {
	if v == nil {
		return "-"
	}
	return fmtFixed(*v, prec)
}

// fmtSec prints seconds with 3 decimals, fmtMs milliseconds with 1.
func fmtSec(q Quantiles, v float64) string {
	if q.N == 0 {
		return "-"
	}
	return fmtFixed(v, 3)
}

func fmtMs(q Quantiles, v float64) string {
	if q.N == 0 {
		return "-"
	}
	return fmtFixed(v*1000, 1)
}

// fmtDur prints a duration in seconds compactly: "10s", "125ms".
func fmtDur(s float64) string {
	if s >= 1 || s == 0 {
		return strconv.FormatFloat(s, 'f', -1, 64) + "s"
	}
	return strconv.FormatFloat(s*1000, 'f', -1, 64) + "ms"
}

func fmtCauses(total int, cs []CauseCount) string {
	if total == 0 {
		return "0"
	}
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = c.Cause + " " + strconv.Itoa(c.N)
	}
	return strconv.Itoa(total) + ": " + strings.Join(parts, ", ")
}

// table is one section of the text and markdown outputs.
type table struct {
	title  string
	header []string
	left   []int // the columns that are left-aligned (text); the rest are right-aligned
	rows   [][]string
	notes  []string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) isLeft(i int) bool {
	for _, j := range t.left {
		if i == j {
			return true
		}
	}
	return false
}

func (t *table) text(w *strings.Builder) {
	width := make([]int, len(t.header))
	for i, h := range t.header {
		width[i] = len(h)
	}
	for _, row := range t.rows {
		for i, c := range row {
			width[i] = max(width[i], len(c))
		}
	}
	line := func(cells []string) {
		var b strings.Builder
		for i, c := range cells {
			if i > 0 {
				b.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[i]-len(c))
			if t.isLeft(i) {
				b.WriteString(c + pad)
			} else {
				b.WriteString(pad + c)
			}
		}
		w.WriteString(strings.TrimRight(b.String(), " ") + "\n")
	}
	w.WriteString(t.title + "\n\n")
	line(t.header)
	total := 0
	for _, n := range width {
		total += n
	}
	w.WriteString(strings.Repeat("-", total+2*(len(width)-1)) + "\n")
	for _, row := range t.rows {
		line(row)
	}
	if len(t.notes) > 0 {
		w.WriteString("\n")
		for _, n := range t.notes {
			w.WriteString("  " + n + "\n")
		}
	}
	w.WriteString("\n")
}

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", "\\|") }

func (t *table) markdown(w *strings.Builder) {
	w.WriteString("## " + t.title + "\n\n")
	w.WriteString("|")
	for _, h := range t.header {
		w.WriteString(" " + mdEscape(h) + " |")
	}
	w.WriteString("\n|")
	for i := range t.header {
		if t.isLeft(i) {
			w.WriteString("---|")
		} else {
			w.WriteString("---:|")
		}
	}
	w.WriteString("\n")
	for _, row := range t.rows {
		w.WriteString("|")
		for _, c := range row {
			w.WriteString(" " + mdEscape(c) + " |")
		}
		w.WriteString("\n")
	}
	if len(t.notes) > 0 {
		w.WriteString("\n")
		for _, n := range t.notes {
			w.WriteString("- " + n + "\n")
		}
	}
	w.WriteString("\n")
}

// distinct lists the distinct values of f over the runs, in run order.
func (r *Report) distinct(f func(*RunReport) string) []string {
	var out []string
	seen := map[string]bool{}
	for i := range r.Runs {
		v := f(&r.Runs[i])
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// header is the lines above the tables.
func (r *Report) header() []string {
	arms := make([]string, len(r.Arms))
	for i, a := range r.Arms {
		arms[i] = a.Arm
	}
	rates := r.rates()
	rs := make([]string, len(rates))
	for i, v := range rates {
		rs[i] = fmtRate(v)
	}
	rateText := "rates " + strings.Join(rs, ", ") + " req/s"
	if len(rates) == 1 && rates[0] == 0 {
		rateText = "no rate (a serve journal: its clients' own traffic)"
	}
	lines := []string{
		fmt.Sprintf("%s, %s (%s); %s", plural(len(r.Runs), "run", "runs"), plural(len(arms), "arm", "arms"),
			strings.Join(arms, ", "), rateText),
	}
	traces := r.distinct(func(x *RunReport) string {
		if x.Trace == "" {
			return "none"
		}
		return x.Trace
	})
	fleets := r.distinct(func(x *RunReport) string {
		gpus := "GPU count unknown"
		if x.GPUs > 0 {
			gpus = strconv.Itoa(x.GPUs) + " GPUs"
		}
		return fmt.Sprintf("%s (%d instances, %s)", x.Fleet, x.Instances, gpus)
	})
	lines = append(lines, "trace "+strings.Join(traces, ", ")+"; fleet "+strings.Join(fleets, ", "))
	slos := r.distinct(sloText)
	src := "from run metadata"
	switch r.SLOOverride {
	case "ttft,tpot":
		src = "set on the command line"
	case "ttft":
		src = "TTFT set on the command line, TPOT from run metadata"
	case "tpot":
		src = "TPOT set on the command line, TTFT from run metadata"
	}
	if len(slos) == 1 {
		lines = append(lines, "SLO "+slos[0]+" ("+src+"); TTFT counts from the scheduled send time")
	} else if len(slos) > 1 {
		lines = append(lines, "SLOs differ between runs ("+src+"): see the slo column; TTFT counts from the scheduled send time")
	}
	for i := range r.Runs {
		if x := &r.Runs[i]; x.Partial != "" {
			lines = append(lines, fmt.Sprintf("PARTIAL: run %s is not whole (%s): requests that had not ended count as not completed", x.Run, x.Partial))
		}
		if x := &r.Runs[i]; x.Degraded {
			lines = append(lines, fmt.Sprintf("DEGRADED: run %s's load generator fell behind its schedule (p99 lag %.3f s, over 0.5 s): it did not offer %s req/s as planned, and TTFT counts the lag", x.Run, x.LoadLagP99, fmtRate(x.Rate)))
		}
	}
	return lines
}

func sloText(x *RunReport) string {
	return "TTFT <= " + fmtDur(x.TTFTSLO) + ", TPOT <= " + fmtDur(x.TPOTSLO)
}

// rates lists the distinct rates, ascending.
func (r *Report) rates() []float64 {
	var out []float64
	for _, a := range r.Arms {
		out = append(out, a.Rates...)
	}
	return sortedUnique(out)
}

func sortedUnique(xs []float64) []float64 {
	out := append([]float64(nil), xs...)
	for i := 1; i < len(out); i++ { // insertion sort: a handful of rates
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	u := out[:0]
	for i, v := range out {
		if i == 0 || v != out[i-1] {
			u = append(u, v)
		}
	}
	return u
}

// tables builds the sections of the text and markdown outputs.
func (r *Report) tables() []*table {
	multiSLO := len(r.distinct(sloText)) > 1
	out := &table{title: "Outcomes", left: []int{0},
		header: []string{"arm", "rate", "offered", "completed", "qualified", "at cap", "missed", "ttft/tpot/short/cancel", "not completed"},
		notes: []string{
			"rate: mean arrival rate, req/s. completed: finished, naturally, at the output cap or cancelled by the client (live runs; counted under missed). qualified: passed every SLO check (share of offered = attainment).",
			"The offered requests fall into four groups: qualified + at cap (finished at the output cap) + missed (finished, but failed TTFT, TPOT, too short or cancelled) + not completed (refused, expired or failed) = offered.",
		}}
	if r.Partial {
		out.notes = append(out.notes, "In a partial run, not completed also counts the requests still open when it stopped: neither refused, expired nor failed.")
	}
	if multiSLO {
		out.header = append(out.header, "slo")
	}
	lat := &table{title: "Latency of completed requests", left: []int{0},
		header: []string{"arm", "rate", "TTFT p50 s", "p95 s", "p99 s", "TPOT p50 ms", "p95 ms", "p99 ms", "queue wait p95 s"},
		notes: []string{
			"TTFT: first token minus the scheduled send time. TPOT: a request's mean gap between output tokens after the first (requests with at least two tokens).",
			"Queue wait: admission minus arrival, over admitted requests. Percentiles are nearest-rank.",
		}}
	ends := &table{title: "Refusals, expiries and failures by cause", left: []int{0, 2, 3, 4},
		header: []string{"arm", "rate", "refused", "expired", "failed"}}
	good := &table{title: "Goodput", left: []int{0},
		header: []string{"arm", "rate", "qualified", "span s", "AIPerf/vLLM goodput req/s", "per GPU req/s"},
		notes: []string{
			"AIPerf/vLLM goodput: SLO-qualified requests per second at one rate = qualified / span, the time from the run's first scheduled send to its last end.",
			"Per GPU: that goodput divided by the fleet's GPUs (RunMeta.GPUs; \"GPU count unknown\" when 0).",
		}}
	adapt := &table{title: "Role moves and adaptation lag", left: []int{0, 7},
		header: []string{"arm", "rate", "moves", "thrash", "oracle changes", "lag mean s", "never reached", "note"},
		notes: []string{
			fmt.Sprintf("moves: role moves after the opening roles. thrash: changes of the prefill pool reversed within %gs (a fault's cover and its return aside).", r.ThrashWindow),
			"Lag: for each change of the oracle's split (the oracle run at the same rate), the time until the arm's prefill pool is first within one engine of the oracle's new pool, censored at the oracle's next change; the mean counts censored changes at their censored length, and never reached counts them.",
		}}
	qual := &table{title: "Answer quality (token F1 against the reference answer)", left: []int{0, 2},
		header: []string{"arm", "rate", "class", "with reference", "scored", "completed F1", "all-offer F1", "SLO-delivered F1"},
		notes: []string{
			"F1: SQuAD token overlap (lower case, punctuation and a/an/the removed, white-space tokens, multiset overlap). Scored: completed requests with a reference and a recorded response.",
			"completed F1 = mean F1 over scored requests; all-offer F1 = sum of their F1 / requests offered with a reference; SLO-delivered F1 = sum of the F1 of qualified requests / requests offered with a reference.",
		}}
	for i := range r.Runs {
		x := &r.Runs[i]
		rate := fmtRate(x.Rate)
		g := x.Groups
		row := []string{x.Arm, rate, strconv.Itoa(x.Offered), fmtCountPct(x.Completed, x.Offered), fmtCountPct(x.Qualified, x.Offered),
			strconv.Itoa(g.AtCap), strconv.Itoa(g.Missed), fmt.Sprintf("%d/%d/%d/%d", g.MissTTFT, g.MissTPOT, g.MissShort, g.MissCancl),
			strconv.Itoa(g.NotDone)}
		if multiSLO {
			row = append(row, sloText(x))
		}
		out.add(row...)
		lat.add(x.Arm, rate, fmtSec(x.TTFT, x.TTFT.P50), fmtSec(x.TTFT, x.TTFT.P95), fmtSec(x.TTFT, x.TTFT.P99),
			fmtMs(x.TPOT, x.TPOT.P50), fmtMs(x.TPOT, x.TPOT.P95), fmtMs(x.TPOT, x.TPOT.P99), fmtSec(x.QueueWait, x.QueueWait.P95))
		ends.add(x.Arm, rate, fmtCauses(x.Refused, x.Refusals), fmtCauses(x.Expired, x.Expiries), fmtCauses(x.Failed, x.Failures))
		perGPU := "GPU count unknown"
		if x.Goodput.PerGPU != nil {
			perGPU = fmtFixed(*x.Goodput.PerGPU, 4)
		}
		good.add(x.Arm, rate, strconv.Itoa(x.Qualified), fmtFixed(x.Goodput.SpanS, 1), fmtFixed(x.Goodput.RPS, 3), perGPU)
		l := x.Lag
		switch l.Status {
		case LagMeasured:
			adapt.add(x.Arm, rate, strconv.Itoa(x.Moves), strconv.Itoa(x.Thrash), strconv.Itoa(l.Changes),
				fmtFixed(l.Mean, 1), strconv.Itoa(l.Missed), "vs "+l.OracleRun)
		default:
			note := map[string]string{LagOracle: "the target", LagNoSplit: "no split: engines are mixed", LagNoOracle: "no oracle run at this rate",
				LagNoChange: l.OracleRun + " keeps one split"}[l.Status]
			adapt.add(x.Arm, rate, strconv.Itoa(x.Moves), strconv.Itoa(x.Thrash), "-", "-", "-", note)
		}
		for _, q := range x.Quality {
			qual.add(x.Arm, rate, q.Class, strconv.Itoa(q.WithReference), strconv.Itoa(q.Scored),
				fmtPtr(q.CompletedF1, 3), fmtPtr(q.AllOfferF1, 3), fmtPtr(q.SLOF1, 3))
		}
	}
	ds := &table{title: "DistServe goodput", left: []int{0, 1},
		header: []string{"arm", "rates swept", "DistServe goodput req/s", "per GPU req/s"},
		notes:  []string{fmt.Sprintf("DistServe goodput: the highest swept rate such that it and every lower swept rate reach %g%% attainment (qualified / offered); - when the lowest rate fails; \">= X, grid top\" when it passes at the highest rate swept, so X is a floor.", 100*r.AttainmentTarget)}}
	for _, a := range r.Arms {
		rs := make([]string, len(a.Rates))
		for i, v := range a.Rates {
			rs[i] = fmtRate(v)
		}
		perGPU := "GPU count unknown"
		if a.GPUs > 0 {
			perGPU = fmtPtr(a.DistServePerGPU, 4)
		}
		good := "-"
		if a.DistServe != nil {
			good = fmtRate(*a.DistServe) // a rate: as the rates swept print
			if a.DistServeGridTop {
				good = ">= " + good + ", grid top" // it still passes there: a floor
			}
		}
		ds.add(a.Arm, strings.Join(rs, " "), good, perGPU)
		if len(a.PartialRates) > 0 {
			ps := make([]string, len(a.PartialRates))
			for i, v := range a.PartialRates {
				ps[i] = fmtRate(v)
			}
			ds.notes = append(ds.notes, fmt.Sprintf("%s: the run at %s req/s is partial and counts as failing here, so this goodput is a floor.", a.Arm, strings.Join(ps, ", ")))
		}
	}
	if !r.hasOracle() {
		adapt.notes = append(adapt.notes, "No oracle run here: adaptation lag needs an `oracle` run at the same rate.")
	}
	ts := []*table{out, lat, ends, good, ds, adapt}
	if r.HasReferences {
		ts = append(ts, qual)
	}
	return ts
}

func (r *Report) hasOracle() bool {
	for _, a := range r.Arms {
		if a.Arm == OracleArm {
			return true
		}
	}
	return false
}

func (r *Report) writeTables(w io.Writer, md bool) error {
	var b strings.Builder
	if md {
		b.WriteString("# narwhal-report\n\n")
		for _, l := range r.header() {
			b.WriteString(l + "  \n")
		}
		b.WriteString("\n")
	} else {
		for i, l := range r.header() {
			if i == 0 {
				l = "narwhal-report: " + l
			}
			b.WriteString(l + "\n")
		}
		b.WriteString("\n")
	}
	if len(r.Runs) == 0 {
		b.WriteString("no runs\n")
	}
	for _, t := range r.tables() {
		if r.Partial {
			t.title += " [partial]"
		}
		if md {
			t.markdown(&b)
		} else {
			t.text(&b)
		}
	}
	_, err := io.WriteString(w, strings.TrimRight(b.String(), "\n")+"\n")
	return err
}

// csvHeader lists the CSV columns; docs/report.md defines each.
var csvHeader = []string{
	"run", "arm", "rate", "trace", "fleet", "instances", "gpus", "ttft_slo_s", "tpot_slo_s",
	"offered", "completed", "qualified", "completed_share", "attainment",
	"group_qualified", "group_at_cap", "group_missed", "miss_ttft", "miss_tpot", "miss_too_short", "miss_cancelled", "group_not_completed",
	"ttft_n", "ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "tpot_n", "tpot_p50_s", "tpot_p95_s", "tpot_p99_s",
	"queue_wait_n", "queue_wait_p50_s", "queue_wait_p95_s", "queue_wait_p99_s",
	"refused", "expired", "failed", "refusals", "expiries", "failures",
	"span_s", "aiperf_goodput_rps", "aiperf_goodput_per_gpu", "distserve_goodput_rps", "distserve_goodput_per_gpu",
	"moves", "thrash", "lag_status", "lag_oracle_run", "lag_changes", "lag_mean_s", "lag_missed",
	"f1_with_reference", "f1_scored", "f1_completed", "f1_all_offer", "f1_slo_delivered",
	"partial",
}

func (r *Report) writeCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return err
	}
	num := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	ptr := func(v *float64) string {
		if v == nil {
			return ""
		}
		return num(*v)
	}
	qs := func(q Quantiles) []string {
		if q.N == 0 {
			return []string{"0", "", "", ""}
		}
		return []string{strconv.Itoa(q.N), num(q.P50), num(q.P95), num(q.P99)}
	}
	causes := func(cs []CauseCount) string {
		parts := make([]string, len(cs))
		for i, c := range cs {
			parts[i] = c.Cause + "=" + strconv.Itoa(c.N)
		}
		return strings.Join(parts, ";")
	}
	it := strconv.Itoa
	for i := range r.Runs {
		x := &r.Runs[i]
		g := x.Groups
		row := []string{x.Run, x.Arm, num(x.Rate), x.Trace, x.Fleet, it(x.Instances), it(x.GPUs), num(x.TTFTSLO), num(x.TPOTSLO),
			it(x.Offered), it(x.Completed), it(x.Qualified), num(x.CompletedShare), num(x.Attainment),
			it(g.Qualified), it(g.AtCap), it(g.Missed), it(g.MissTTFT), it(g.MissTPOT), it(g.MissShort), it(g.MissCancl), it(g.NotDone)}
		row = append(row, qs(x.TTFT)...)
		row = append(row, qs(x.TPOT)...)
		row = append(row, qs(x.QueueWait)...)
		row = append(row, it(x.Refused), it(x.Expired), it(x.Failed), causes(x.Refusals), causes(x.Expiries), causes(x.Failures),
			num(x.Goodput.SpanS), num(x.Goodput.RPS), ptr(x.Goodput.PerGPU), ptr(x.Goodput.DistServe), ptr(x.Goodput.DSPerGPU),
			it(x.Moves), it(x.Thrash), x.Lag.Status, x.Lag.OracleRun)
		if x.Lag.Status == LagMeasured {
			row = append(row, it(x.Lag.Changes), num(x.Lag.Mean), it(x.Lag.Missed))
		} else {
			row = append(row, "", "", "")
		}
		if n := len(x.Quality); n > 0 {
			q := x.Quality[n-1] // the "(all)" row
			row = append(row, it(q.WithReference), it(q.Scored), ptr(q.CompletedF1), ptr(q.AllOfferF1), ptr(q.SLOF1))
		} else {
			row = append(row, "", "", "", "", "")
		}
		row = append(row, x.Partial)
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
