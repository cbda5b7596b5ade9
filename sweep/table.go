package sweep

import (
	"fmt"
	"io"
	"strings"
)

// WriteTable prints the sweep as a terminal table: one row per arm, the
// attainment (share of offered requests that met both SLOs) per rate, and
// the sustained rate; then the best static split and every other arm's
// sustained rate against it.
func WriteTable(w io.Writer, r *Result) error {
	var b strings.Builder
	fmt.Fprintf(&b, "trace: %s (base rate %.3g req/s, seed %d) | fleet: %s, %d instances | SLO ttft<=%gs tpot<=%gs\n",
		r.Trace, r.BaseRate, r.Seed, r.Fleet, r.Instances, r.SLO.TTFT, r.SLO.TPOT)
	fmt.Fprintf(&b, "cells: share of offered requests that met both SLOs; sustained: highest rate with >= 90%%\n\n")
	width := len("arm")
	for _, a := range r.Arms {
		width = max(width, len(a))
	}
	head := fmt.Sprintf("%-*s", width+2, "arm")
	for _, rate := range r.Rates {
		head += fmt.Sprintf("%7s", fmtRate(rate))
	}
	head += fmt.Sprintf("%13s", "sustained")
	b.WriteString(head + "\n" + strings.Repeat("-", len(head)) + "\n")
	for ai, a := range r.Arms {
		fmt.Fprintf(&b, "%-*s", width+2, a)
		for ri := range r.Rates {
			fmt.Fprintf(&b, "%6.0f%%", 100*r.Runs[ai*len(r.Rates)+ri].Attainment)
		}
		fmt.Fprintf(&b, "%13s\n", fmtSustained(r.Sustained[a]))
	}
	best, bestArm := 0.0, ""
	for _, a := range r.Arms {
		if s := r.Sustained[a]; strings.HasPrefix(a, "static:") && s != nil && *s > best {
			best, bestArm = *s, a
		}
	}
	b.WriteString("\n")
	if bestArm == "" {
		b.WriteString("no static split reaches 90% attainment at any swept rate\n")
	} else {
		fmt.Fprintf(&b, "best static split: %s sustains %s req/s\n", bestArm, fmtRate(best))
		for _, a := range r.Arms {
			if strings.HasPrefix(a, "static:") {
				continue
			}
			if s := r.Sustained[a]; s != nil {
				fmt.Fprintf(&b, "%s sustains %s req/s: %.2fx the best static split\n", a, fmtRate(*s), *s/best)
			} else {
				fmt.Fprintf(&b, "%s sustains no swept rate\n", a)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func fmtRate(r float64) string {
	s := fmt.Sprintf("%.2f", r)
	s = strings.TrimRight(s, "0")
	if strings.HasSuffix(s, ".") {
		s += "0"
	}
	return s
}

func fmtSustained(s *float64) string {
	if s == nil {
		return "none"
	}
	return fmtRate(*s) + " req/s"
}
