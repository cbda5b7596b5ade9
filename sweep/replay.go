package sweep

import (
	"fmt"
	"path/filepath"
	"sort"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/fleet"
	"github.com/narwhal-bench/narwhal-bench/score"
	"github.com/narwhal-bench/narwhal-bench/sim"
)

// ReplaySource is one journaled run's offered requests, ready to re-drive
// through the simulator (narwhal-bench sim --replay): the same sizes, the
// same send times, the same scheduled times.
type ReplaySource struct {
	Dir  string
	Name string // the run directory's name (ARM@RATE)
	Meta event.RunMeta
	// Reqs are the journal's arrivals in arrival order: At is when the
	// request reached the system (the live router's arrival, which is the
	// actual send plus loopback), InputTokens and OutputTokens its prompt
	// and asked answer length (the arrival's Want). A request the run
	// journaled as cut at its cap (finish cause length) gets OutputCap =
	// Want and one more natural token, so the simulator cuts it too.
	Reqs []sim.Request
	// Scheduled is each request's scheduled send time (the arrival's Ref),
	// parallel to Reqs: the replay journals it as the arrival's Ref, so
	// TTFT counts from the schedule in both runs.
	Scheduled []event.Time
	// PrefixGroups says some arrival carries the prefix group the live
	// router priced it with (a run with --prefix-cache): the replay then
	// keeps prefix caches as sim --prefix-cache does.
	PrefixGroups bool
}

// LoadReplay reads the arrivals of the run journaled in dir, whose
// metadata is meta and whose records replay hands to its callback in
// journal order (journal.Reader's Meta and Replay: the caller opens the
// journal, so that the simulator's packages never link the journal's
// storage; docs/decisions/0008-lean-sim-binary.md).
func LoadReplay(dir string, meta event.RunMeta, replay func(func(*event.Record) error) error) (*ReplaySource, error) {
	src := &ReplaySource{Dir: dir, Name: filepath.Base(dir), Meta: meta}
	type arr struct {
		at, ref       event.Time
		class         string
		input, want   int64
		group, prefix int64
		length        bool
	}
	var arrs []arr
	idx := map[event.RequestID]int{}
	err := replay(func(rec *event.Record) error {
		switch rec.Kind {
		case event.KindArrival:
			idx[rec.Req] = len(arrs)
			arrs = append(arrs, arr{at: rec.At, ref: rec.Ref, class: rec.Class, input: rec.Tokens, want: rec.Want,
				group: rec.PrefixGroup, prefix: rec.PrefixTokens})
		case event.KindFinish:
			if k, ok := idx[rec.Req]; ok && rec.Cause == event.CauseLength {
				arrs[k].length = true
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(arrs) == 0 {
		return nil, fmt.Errorf("replay %s: no arrivals to replay", dir)
	}
	sort.SliceStable(arrs, func(i, j int) bool { return arrs[i].at < arrs[j].at })
	for i, a := range arrs {
		if a.input < 1 || a.want < 1 {
			return nil, fmt.Errorf("replay %s: arrival %d: %d prompt tokens, %d wanted: expected both >= 1", dir, i+1, a.input, a.want)
		}
		if a.group < 0 || a.prefix < 0 || a.prefix > a.input {
			return nil, fmt.Errorf("replay %s: arrival %d: prefix group %d of %d tokens, in a prompt of %d: expected a group >= 0 and at most the prompt", dir, i+1, a.group, a.prefix, a.input)
		}
		q := sim.Request{At: a.at, Class: a.class, InputTokens: int(a.input), OutputTokens: int(a.want),
			PrefixGroup: a.group, PrefixTokens: int(a.prefix)}
		if a.group != 0 {
			src.PrefixGroups = true
		}
		if a.length {
			q.OutputTokens, q.OutputCap = int(a.want)+1, int(a.want)
		}
		src.Reqs = append(src.Reqs, q)
		src.Scheduled = append(src.Scheduled, a.ref)
	}
	return src, nil
}

// PrefixCache reports whether the replay keeps prefix caches: the source
// run's engines did and its journal holds the prefix groups.
func (src *ReplaySource) PrefixCache() bool { return src.Meta.PrefixCache && src.PrefixGroups }

// ReplayConfig is a replay's fleet and arm (normally the source run's).
type ReplayConfig struct {
	Fleet *fleet.Spec
	Arm   string
	// SLO overrides the source's objectives when non-zero.
	SLO     event.SLO
	Version string
	// Journal, when set, opens the replay's journal (named as the source
	// run, so narwhal-report --compare pairs them).
	Journal func(name string, meta event.RunMeta) (Sink, error)
}

// Replay re-drives src through the simulator on cfg's fleet and arm and
// scores it as a sweep cell.
func Replay(src *ReplaySource, cfg ReplayConfig) (run Run, err error) {
	n := cfg.Fleet.Size()
	ctrl, err := core.NewController(cfg.Arm, n)
	if err != nil {
		return Run{}, fmt.Errorf("replay %s: %w", src.Name, err)
	}
	slo := cfg.Fleet.CoreSLO()
	if src.Meta.TTFTSLO > 0 {
		slo.TTFT = event.Seconds(src.Meta.TTFTSLO)
	}
	if src.Meta.TPOTSLO > 0 {
		slo.TPOT = event.Seconds(src.Meta.TPOTSLO)
	}
	if cfg.SLO.TTFT > 0 {
		slo.TTFT = cfg.SLO.TTFT
	}
	if cfg.SLO.TPOT > 0 {
		slo.TPOT = cfg.SLO.TPOT
	}
	simCfg := SimConfig(cfg.Fleet, slo, src.PrefixCache())
	AttachRehearser(ctrl, simCfg)
	m := src.Meta
	meta := event.RunMeta{Schema: event.SchemaVersion, Version: cfg.Version, Driver: "sim", Arm: cfg.Arm, Rate: m.Rate,
		Seed: m.Seed, Trace: m.Trace, TraceHash: m.TraceHash, Fleet: cfg.Fleet.Name, Instances: n,
		GPUs: n * cfg.Fleet.GPUsPerInstance, TTFTSLO: slo.TTFT.Seconds(), TPOTSLO: slo.TPOT.Seconds(),
		Replay: src.Dir, Planned: m.Planned, Sent: len(src.Reqs), Partial: m.Partial, PrefixCache: src.PrefixCache()}
	if m.Cordons != "" {
		// The live run's maintenance windows, played again.
		ws, canon, err := ParseCordons(m.Cordons, cfg.Fleet.Names())
		if err != nil {
			return Run{}, fmt.Errorf("replay %s: its cordons: %w", src.Name, err)
		}
		simCfg.Cordons, meta.Cordons = ws, canon
	}
	meta.ConfigHash = configHash(simCfg, meta)
	var fold event.Fold
	moves := &MoveLog{}
	fix := &refFix{sched: src.Scheduled}
	recs := event.Tee{&fold, moves}
	if cfg.Journal != nil {
		sink, err := cfg.Journal(src.Name, meta)
		if err != nil {
			return Run{}, fmt.Errorf("replay %s: %w", src.Name, err)
		}
		defer func() {
			if cerr := sink.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("replay %s: closing its journal: %w", src.Name, cerr)
			}
		}()
		recs = append(recs, sink)
	}
	fix.next = recs
	reqs := append([]sim.Request(nil), src.Reqs...)
	s, err := sim.New(simCfg, ctrl, reqs, fix)
	if err != nil {
		return Run{}, fmt.Errorf("replay %s: %w", src.Name, err)
	}
	st, err := s.Run()
	if err != nil {
		return Run{}, fmt.Errorf("replay %s: %w", src.Name, err)
	}
	if err := fold.Err(); err != nil {
		return Run{}, fmt.Errorf("replay %s: journal inconsistent: %w", src.Name, err)
	}
	sum := score.Summarize(fold.Rows(), slo)
	splits := score.Splits(moves.moves)
	return Run{Arm: cfg.Arm, Rate: m.Rate, Offered: sum.Offered, Completed: sum.Completed, SLOOK: sum.Qualified,
		Attainment: sum.Attainment(), Refused: sum.Refused, Expired: sum.Expired, Moves: st.Moves, Preemptions: sum.Preemptions, Spilled: sum.Spilled,
		MissTTFT: sum.Misses[event.CheckTTFT], MissTPOT: sum.Misses[event.CheckTPOT],
		Thrash: score.Thrash(splits, score.DefaultThrashWindow), SimSeconds: st.End.Seconds()}, nil
}

// SimConfig is the simulator's configuration for a fleet, as a sweep
// builds it (batching, KV model, drain limit; the prefix cache when
// cache is set).
func SimConfig(fl *fleet.Spec, slo event.SLO, cache bool) sim.Config {
	c := sim.Config{Profiles: fl.Profiles(), Pinned: fl.Pins(), SLO: slo, KV: fl.KVModel(), Batch: sim.DefaultBatch}
	if b := fl.Batch; b != nil {
		c.Batch = *b
	}
	if cache {
		c.Cache = sim.PrefixCache{Enabled: true, PrefixCache: fl.PrefixCacheSize()}
	}
	c.DrainLimit = fl.Drain()
	return c
}

// refFix journals each arrival with its original scheduled time as Ref
// (the simulator sends at At and would journal At).
type refFix struct {
	sched []event.Time
	next  event.Recorder
}

// Record implements event.Recorder.
func (f *refFix) Record(r *event.Record) {
	if r.Kind == event.KindArrival && r.Req >= 1 && int(r.Req) <= len(f.sched) {
		r.Ref = f.sched[r.Req-1]
	}
	f.next.Record(r)
}
