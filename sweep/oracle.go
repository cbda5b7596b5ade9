package sweep

import (
	"math"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/report"
	"github.com/narwhal-bench/narwhal-bench/sim"
)

// moveLog keeps a run's role-move records.
type moveLog struct{ moves []event.Record }

func (m *moveLog) Record(r *event.Record) {
	if r.Kind == event.KindRoleMove {
		m.moves = append(m.moves, *r)
	}
}

// oracle chooses, in hindsight, a split for each phase of a workload,
// greedily in phase order with the backlog carried over: for phase k it
// replays every request that arrives before the phase ends, with the splits
// already chosen for earlier phases and each candidate p = 1..n-1 for phase
// k, and keeps the p that qualifies the most of those requests; ties go to
// the split nearest the previous phase's (fewest moves), then to the lower
// mean worst SLO ratio of phase k's own requests, then to the smaller
// prefill pool. Moves happen exactly at phase starts and cost
// nothing. It is the yardstick for the controllers' regret: what choosing
// one split per phase with knowledge of the whole trace achieves.
func oracle(cfg sim.Config, reqs []sim.Request, bounds []event.Time, slo event.SLO) ([]report.PhaseTarget, error) {
	n := len(cfg.Profiles)
	var out []report.PhaseTarget
	var steps []core.ScheduleStep
	prev := n / 2
	lo := 0
	var fold event.Fold
	for k := 0; k+1 < len(bounds); k++ {
		start, end := bounds[k], bounds[k+1]
		hi := lo
		for hi < len(reqs) && reqs[hi].At < end {
			hi++
		}
		best := prev
		if hi > lo {
			bestOK, bestDist, bestRatio := -1, 0, math.Inf(1)
			for p := 1; p < n; p++ {
				fold.Reset()
				sched := append(append([]core.ScheduleStep(nil), steps...), core.ScheduleStep{At: start, Prefill: p})
				s, err := sim.New(cfg, &core.Scheduled{Arm: "oracle", Steps: sched}, reqs[:hi], &fold)
				if err != nil {
					return nil, err
				}
				if _, err := s.Run(); err != nil {
					return nil, err
				}
				rows := fold.Rows()
				ok := report.Summarize(rows, slo).Qualified
				ratio := meanWorstRatio(rows[lo:hi], slo)
				dist := p - prev
				if dist < 0 {
					dist = -dist
				}
				if ok > bestOK || (ok == bestOK && (dist < bestDist || (dist == bestDist && ratio < bestRatio))) {
					best, bestOK, bestDist, bestRatio = p, ok, dist, ratio
				}
			}
		}
		lo = hi
		prev = best
		steps = append(steps, core.ScheduleStep{At: start, Prefill: best})
		out = append(out, report.PhaseTarget{Start: start, End: end, Prefill: best})
	}
	return out, nil
}

// meanWorstRatio is the mean over requests of max(TTFT/SLO, TPOT/SLO),
// counting a request that never finished as 10.
func meanWorstRatio(rows []event.Row, slo event.SLO) float64 {
	if len(rows) == 0 {
		return 0
	}
	var sum float64
	for i := range rows {
		r := &rows[i]
		if r.Terminal != event.KindFinish {
			sum += 10
			continue
		}
		w := float64(r.TTFT()) / float64(slo.TTFT)
		if tp := r.TPOT(); tp != event.Never {
			w = math.Max(w, float64(tp)/float64(slo.TPOT))
		}
		sum += w
	}
	return sum / float64(len(rows))
}
