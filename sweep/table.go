package sweep

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/narwhal-bench/narwhal-bench/score"
)

// cordonNote is the tables' line on maintenance windows ("" for none).
func cordonNote(cordons string) string {
	if cordons == "" {
		return ""
	}
	return fmt.Sprintf("maintenance windows (--cordon, every run): %s\n", cordons)
}

// refineNote is the tables' line on refined sustained rates ("" when the
// grid alone gave them).
func refineNote(refine int) string {
	if refine == 0 {
		return ""
	}
	return fmt.Sprintf("sustained and crossing refined: %d bisections within the grid step above each arm's last passing rate (to a step over %d; those runs, off the grid, are in --json's refined)\n", refine, 1<<refine)
}

// WriteTable prints the sweep as a terminal table: one row per arm, the
// attainment (share of offered requests that met both SLOs) per rate, and
// the sustained rate; then the best static split and every other arm's
// sustained rate against it.
func WriteTable(w io.Writer, r *Result) error {
	var b strings.Builder
	fmt.Fprintf(&b, "trace: %s (base rate %.3g req/s, seed %d) | fleet: %s, %d instances | SLO ttft<=%gs tpot<=%gs\n",
		r.Trace, r.BaseRate, r.Seed, r.Fleet, r.Instances, r.SLO.TTFT, r.SLO.TPOT)
	fmt.Fprintf(&b, "cells: share of offered requests that met both SLOs; sustained: highest rate such that it and every lower rate reach 90%%\n")
	fmt.Fprintf(&b, "(crossing: where attainment crosses 90%%, interpolated; \">= X, grid top\": passes at the top swept rate, so X is a floor)\n")
	b.WriteString(cordonNote(r.Cordons) + refineNote(r.Refine) + "\n")
	width := len("arm")
	for _, a := range r.Arms {
		width = max(width, len(a))
	}
	// Columns keep at least one space between them, however long a rate
	// or a sustained rate reads (">= 126.67, grid top").
	head := fmt.Sprintf("%-*s", width+2, "arm")
	cols := make([]int, len(r.Rates))
	for i, rate := range r.Rates {
		cols[i] = max(7, len(fmtRate(rate))+1)
		head += fmt.Sprintf("%*s", cols[i], fmtRate(rate))
	}
	sustained, crossing := func(a string) string { return fmtSustainedTop(r.Sustained[a], r.SustainedGridTop[a]) },
		func(a string) string { return fmtCrossing(r.SustainedCrossing[a]) }
	if r.Incomplete != "" {
		sustained, crossing = func(string) string { return "-" }, func(string) string { return "-" }
	}
	sw := len("sustained")
	for _, a := range r.Arms {
		sw = max(sw, len(sustained(a)))
	}
	sw = max(19, sw+1)
	head += fmt.Sprintf("%*s%10s", sw, "sustained", "crossing")
	b.WriteString(head + "\n" + strings.Repeat("-", len(head)) + "\n")
	for ai, a := range r.Arms {
		fmt.Fprintf(&b, "%-*s", width+2, a)
		for ri := range r.Rates {
			fmt.Fprintf(&b, "%*s%%", cols[ri]-1, fmtPercent(r.Runs[ai*len(r.Rates)+ri].Attainment))
		}
		fmt.Fprintf(&b, "%*s%10s\n", sw, sustained(a), crossing(a))
	}
	if r.Incomplete != "" {
		fmt.Fprintf(&b, "\nINCOMPLETE: %s: no sustained rate is given\n", r.Incomplete)
		_, err := io.WriteString(w, b.String())
		return err
	}
	best, bestArm := 0.0, ""
	for _, a := range r.Arms {
		if s := r.Sustained[a]; strings.HasPrefix(a, "static:") && !strings.Contains(a, "/") && s != nil && *s > best {
			best, bestArm = *s, a
		}
	}
	b.WriteString("\n")
	statics := false
	for _, a := range r.Arms {
		statics = statics || (strings.HasPrefix(a, "static:") && !strings.Contains(a, "/"))
	}
	switch {
	case !statics:
		// Nothing to compare with: no static split ran.
	case bestArm == "":
		b.WriteString("no static split reaches 90% attainment at any swept rate\n")
	default:
		top := ""
		if r.SustainedGridTop[bestArm] {
			top = " (at least: the grid's top)"
		}
		fmt.Fprintf(&b, "best static split: %s sustains %s req/s%s\n", bestArm, fmtRate(best), top)
		for _, a := range r.Arms {
			if strings.HasPrefix(a, "static:") && !strings.Contains(a, "/") {
				continue
			}
			if s := r.Sustained[a]; s != nil {
				top := ""
				if r.SustainedGridTop[a] {
					top = " (at least: the grid's top)"
				}
				fmt.Fprintf(&b, "%s sustains %s req/s%s: %.2fx the best static split\n", a, fmtRate(*s), top, *s/best)
			} else {
				fmt.Fprintf(&b, "%s sustains no swept rate\n", a)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// FormatRate prints a rate as sim's and live's tables do: two decimals,
// or three significant digits below 1 req/s (0.165, 0.0125), so that a
// slow trace's grid columns stay apart; trailing zeros go.
func FormatRate(r float64) string { return fmtRate(r) }

func fmtRate(r float64) string {
	dec := 2
	if r > 0 && r < 1 {
		dec = 2 - int(math.Floor(math.Log10(r)))
	}
	s := strconv.FormatFloat(r, 'f', dec, 64)
	s = strings.TrimRight(s, "0")
	if strings.HasSuffix(s, ".") {
		s += "0"
	}
	return s
}

func fmtSustainedTop(s *float64, top bool) string {
	if s != nil && top {
		return ">= " + fmtRate(*s) + ", grid top"
	}
	return fmtSustained(s)
}

func fmtCrossing(c *float64) string {
	if c == nil {
		return "-"
	}
	return fmtRate(*c)
}

func fmtSustained(s *float64) string {
	if s == nil {
		return "none"
	}
	return fmtRate(*s) + " req/s"
}

// fmtPercent is an attainment as a whole percentage, rounded, except that
// a cell under the target never rounds up to it: 89.7% prints 89, not 90,
// so no failing cell reads as passing beside the sustained column.
func fmtPercent(att float64) string {
	v := math.Round(100 * att)
	if att < score.AttainmentTarget && v >= 100*score.AttainmentTarget {
		v = math.Floor(100 * att)
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}
