package sim

import (
	"fmt"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
)

// burstTrace is bursts of k long prompts at the same instant, every gap,
// over a trickle of short chats.
func burstTrace(bursts, k, prompt int, gap event.Time) []Request {
	var reqs []Request
	for b := range bursts {
		at := event.Time(b) * gap
		for range k {
			reqs = append(reqs, Request{At: at, InputTokens: prompt, OutputTokens: 64})
		}
		for j := range 4 {
			reqs = append(reqs, Request{At: at + event.Time(j+1)*gap/5, InputTokens: 200, OutputTokens: 200})
		}
	}
	return reqs
}

// Bursts of document prompts on the adaptive arm: prompts spill to idle
// decode engines (every spilled admit on a decode engine, every invariant held,
// the journal's rows and the count agreeing), and the run that spills
// qualifies more of them than the same arm with spill off.
func TestBurstSpillInSimulation(t *testing.T) {
	cfg := refConfig(4)
	reqs := burstTrace(30, 16, 8000, 30*event.Second)
	c, st := runChecker(t, cfg, "adaptive", reqs)
	rows := c.Fold.Rows()
	n := 0
	for _, r := range rows {
		if r.Spilled {
			n++
		}
	}
	if c.Spilled == 0 || n != c.Spilled {
		t.Fatalf("%d spilled admits, %d spilled rows: expected some, and the same", c.Spilled, n)
	}
	off := core.DefaultAdaptive
	off.Spill = core.SpillConfig{}
	co, so := runCheckerWith(t, cfg, &core.Adaptive{Cfg: off}, reqs)
	if co.Spilled != 0 {
		t.Fatalf("%d spilled with spill off", co.Spilled)
	}
	q := func(rows []event.Row) (k int) {
		for i := range rows {
			if event.Qualify(&rows[i], cfg.SLO) == event.CheckOK {
				k++
			}
		}
		return k
	}
	on, without := q(rows), q(co.Fold.Rows())
	t.Logf("spilled %d of %d; qualified %d with spill, %d without (finished %d, %d)", n, len(reqs), on, without, st.Finished, so.Finished)
	if on <= without {
		t.Fatalf("qualified %d with spill, %d without: expected more with", on, without)
	}
}

// BenchmarkSpillFleet prices burst spill at fleet scale past saturation,
// where Algorithm 1 finds no prefill engine in time for many prompts and
// each of them looks for an idle decode engine: the adaptive arm on 8 and
// 4,096 reference instances offered 6 requests/s per instance (100,000
// requests), with spill on and off, in CPU (and wall) time per simulated
// request, and the share of prompts spilled.
func BenchmarkSpillFleet(b *testing.B) {
	off := core.DefaultAdaptive
	off.Spill = core.SpillConfig{}
	for _, n := range []int{8, 4096} {
		for _, spill := range []bool{true, false} {
			b.Run(fmt.Sprintf("n=%d/spill=%v", n, spill), func(b *testing.B) {
				reqs := randomTrace(7, 100000, 6*float64(n))
				cfg := refConfig(n)
				b.ResetTimer()
				cpu := cpuTime()
				spilled := 0
				for i := 0; i < b.N; i++ {
					cfgA := core.DefaultAdaptive
					if !spill {
						cfgA = off
					}
					count := spillCounter(0)
					s, err := New(cfg, &core.Adaptive{Cfg: cfgA}, reqs, &count)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := s.Run(); err != nil {
						b.Fatal(err)
					}
					spilled = int(count)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(len(reqs)*b.N), "ns/request")
				if cpu > 0 {
					b.ReportMetric(float64(cpuTime()-cpu)/float64(len(reqs)*b.N), "cpu-ns/request")
				}
				b.ReportMetric(float64(spilled)/float64(len(reqs)), "spilled/request")
			})
		}
	}
}

// spillCounter counts spilled admits.
type spillCounter int

func (c *spillCounter) Record(r *event.Record) {
	if r.Kind == event.KindAdmit && r.Cause == event.CauseSpilled {
		*c++
	}
}
