package sim

import (
	"cmp"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/fleet"
	"github.com/narwhal-bench/narwhal-bench/timing"
)

// The rehearser replays the last window of arrivals: too few arrivals
// give nothing, older arrivals fall out, repeats multiply what is
// replayed, a replay from a time takes only the arrivals since, and a
// split short of decode engines qualifies fewer of a decode-heavy window
// than one with many (issue 10, twenty-second round).
func TestRehearserReplaysTheWindow(t *testing.T) {
	cfg := refConfig(4)
	h := NewRehearser(cfg, core.RehearsalConfig{Window: 60 * event.Second, Tiles: 1})
	arrive := func(id int, at event.Time, in int) {
		h.Arrived(at, core.Request{ID: event.RequestID(id), InputTokens: in})
	}
	for i := range 9 {
		arrive(i+1, event.Time(i)*event.Second, 100)
	}
	if _, c, n := h.Qualified(9*event.Second, 0, 2, []int{1, 3}, none); c != nil || n != 0 {
		t.Fatalf("9 arrivals: %v of %d, want nothing", c, n)
	}
	// 40 light requests 2 s apart; at 80 s the window holds those from 20 s.
	h = NewRehearser(cfg, core.RehearsalConfig{Window: 60 * event.Second, Tiles: 1})
	for i := range 40 {
		arrive(i+1, event.Time(2*i)*event.Second, 100)
	}
	for i := range 20 {
		h.Finished(core.Request{ID: event.RequestID(i + 1), OutputTokens: 10})
	}
	h.Finished(core.Request{ID: 999, OutputTokens: 10}) // unknown: ignored
	cur, c, n := h.Qualified(80*event.Second, 0, 2, []int{1, 3}, none)
	if n != 30 || len(c) != 2 {
		t.Fatalf("replayed %d (counts %v), want 30 arrivals of the last 60 s", n, c)
	}
	for i, v := range append(c, cur) {
		if v != n {
			t.Errorf("light load, split %d: %d of %d qualify, want all", i, v, n)
		}
	}
	h2 := NewRehearser(cfg, core.RehearsalConfig{Window: 60 * event.Second, Tiles: 2})
	for i := range 40 {
		h2.Arrived(event.Time(2*i)*event.Second, core.Request{ID: event.RequestID(i + 1), InputTokens: 100})
	}
	if _, _, n := h2.Qualified(80*event.Second, 0, 2, nil, none); n != 60 {
		t.Errorf("two repeats: replayed %d, want 60", n)
	}
	// From a time within the window: only the arrivals since (50 s to
	// 78 s, 15 of them, twice), and the window's older ones are kept.
	if _, _, n := h2.Qualified(80*event.Second, 50*event.Second, 2, nil, none); n != 30 {
		t.Errorf("two repeats from 50 s: replayed %d, want 30", n)
	}
	if _, _, n := h2.Qualified(80*event.Second, 0, 2, nil, none); n != 60 {
		t.Errorf("two repeats after a replay from 50 s: replayed %d, want 60", n)
	}
	// A burst of long answers: one decode engine cannot keep 40 streams
	// within the TPOT SLO, three can.
	h = NewRehearser(cfg, core.RehearsalConfig{Window: 60 * event.Second, Tiles: 1})
	for i := range 40 {
		arrive(i+1, event.Time(i)*event.Millisecond, 200)
		h.Finished(core.Request{ID: event.RequestID(i + 1), OutputTokens: 2000})
	}
	cur, c, n = h.Qualified(event.Second, 0, 3, []int{1}, none)
	if n != 40 || c[0] <= cur || cur >= n {
		t.Errorf("decode-heavy burst: 1P3D %d, 3P1D %d of %d: want 1P3D ahead and 3P1D missing some", c[0], cur, n)
	}
	// Asked to gain more than 3P1D's misses, 1P3D's replay stops early
	// with a count below the bar.
	_, c, _ = h.Qualified(event.Second, 0, 3, []int{1}, func(int) int { return n - cur + 1 })
	if c[0] >= n+1 {
		t.Errorf("a gain out of reach: count %d, want below %d", c[0], n+1)
	}
	// A window the fleet delivered (fewer misses than MinGain) is not
	// replayed.
	h = NewRehearser(cfg, core.RehearsalConfig{Window: 60 * event.Second, Tiles: 1, MinGain: 3})
	for i := range 20 {
		arrive(i+1, event.Time(i)*event.Second, 100)
		r := core.Request{ID: event.RequestID(i + 1), OutputTokens: 10, TTFT: event.Second, TPOT: 10 * event.Millisecond}
		if i < 2 {
			r.TTFT = 20 * event.Second // missed
		}
		h.Finished(r)
	}
	if _, c, _ := h.Qualified(20*event.Second, 0, 2, []int{1}, none); c != nil {
		t.Errorf("2 misses with MinGain 3: replayed (%v)", c)
	}
	h.Finished(core.Request{ID: 3, OutputTokens: 10, TTFT: 20 * event.Second})
	if _, c, _ := h.Qualified(20*event.Second, 0, 2, []int{1}, none); c == nil {
		t.Error("3 misses with MinGain 3: not replayed")
	}
}

// none asks for no gain.
func none(int) int { return 0 }

// favourFewer is a rehearser that always finds one prefill engine fewer
// better.
type favourFewer struct{ calls int }

func (f *favourFewer) Arrived(event.Time, core.Request) {}
func (f *favourFewer) Finished(core.Request)            {}
func (f *favourFewer) Qualified(_ event.Time, _ event.Time, current int, others []int, _ func(int) int) (int, []int, int) {
	f.calls++
	c := make([]int, len(others))
	for i, q := range others {
		if q < current {
			c[i] = 100
		}
	}
	return 0, c, 100
}

// decisionLog keeps the controller decisions' times and texts.
type decisionLog struct {
	at  []event.Time
	why []string
	p   []int
}

func (d *decisionLog) Record(r *event.Record) {
	if r.Kind != event.KindDecision {
		return
	}
	var v core.AdaptiveDecision
	if json.Unmarshal([]byte(r.Text), &v) == nil && strings.HasPrefix(v.Why, "rehearsal:") {
		d.at = append(d.at, r.At)
		d.why = append(d.why, v.Choice)
	}
}

// The adaptive controller takes the rehearsal's neighbour at most once per
// Dwell after any move, never with the rehearsal off, and every invariant
// holds on the runs (issue 10, twenty-second round).
func TestAdaptiveFollowsTheRehearsal(t *testing.T) {
	cfg := refConfig(6)
	reqs := randomTrace(7, 600, 1)
	for _, on := range []bool{true, false} {
		a := &core.Adaptive{Cfg: core.DefaultAdaptive}
		if !on {
			a.Cfg.Rehearsal.Step = 0
		}
		f := &favourFewer{}
		a.Rehearser = f
		var d decisionLog
		runCheckerWith(t, cfg, a, reqs, &d)
		if !on {
			if f.calls != 0 || len(d.at) != 0 {
				t.Errorf("rehearsal off: %d replays, %d moves", f.calls, len(d.at))
			}
			continue
		}
		if len(d.at) == 0 {
			t.Fatal("no move on the rehearsal's word")
		}
		for i, ch := range d.why {
			if !strings.HasPrefix(ch, "move ") {
				t.Errorf("rehearsal decision %d: choice %q, want a move", i, ch)
			}
			if i > 0 && d.at[i]-d.at[i-1] < core.DefaultRehearsal.Dwell {
				t.Errorf("rehearsal moves at %v and %v: closer than the dwell %v", d.at[i-1], d.at[i], core.DefaultRehearsal.Dwell)
			}
		}
	}
}

// BenchmarkRehearsal is one rehearsal on eval8: 120 s of arrivals at 4
// req/s (half of them prompts of up to 9,000 tokens), replayed twice over
// on the current split and its two neighbours, as the live router runs
// it on its owner goroutine.
func BenchmarkRehearsal(b *testing.B) {
	fl, err := fleet.Load("eval8")
	if err != nil {
		b.Fatal(err)
	}
	cfg := Config{Profiles: fl.Profiles(), SLO: fl.CoreSLO(), KV: fl.KVModel(), Batch: DefaultBatch}
	if fl.Batch != nil {
		cfg.Batch = *fl.Batch
	}
	h := NewRehearser(cfg, core.DefaultRehearsal)
	reqs := randomTrace(11, 480, 4)
	for i, r := range reqs {
		h.Arrived(r.At, core.Request{ID: event.RequestID(i + 1), InputTokens: r.InputTokens})
		if i%4 != 0 {
			h.Finished(core.Request{ID: event.RequestID(i + 1), OutputTokens: r.OutputTokens, TTFT: 10 * event.Second})
		}
	}
	now := reqs[len(reqs)-1].At + event.Second
	b.ResetTimer()
	for range b.N {
		if _, c, _ := h.Qualified(now, 0, 4, []int{3, 5}, func(int) int { return 0 }); c == nil {
			b.Fatal("nothing replayed")
		}
	}
}

// BenchmarkRehearsal64 is one rehearsal of the widest kind on a 64-engine
// fleet of eval8's engines at 32 req/s (the rate eval8's benchmark runs at,
// per engine): 120 s of arrivals replayed twice over on 32P32D, its two
// neighbours, aggregated serving and hybrid 31P33M, one replay after
// another (serial) and at once (parallel, as the live router runs them on
// its owner goroutine, which places no request meanwhile), and the
// current split's replay alone (what a rehearsal at once costs the owner
// where every replay has a core of its own).
func BenchmarkRehearsal64(b *testing.B) {
	fl, err := fleet.Load("eval8")
	if err != nil {
		b.Fatal(err)
	}
	var ps []timing.Profile
	for range 8 {
		ps = append(ps, fl.Profiles()...)
	}
	cfg := Config{Profiles: ps, SLO: fl.CoreSLO(), KV: fl.KVModel(), Batch: DefaultBatch}
	if fl.Batch != nil {
		cfg.Batch = *fl.Batch
	}
	reqs := randomTrace(11, 3840, 32)
	for _, parallel := range []int{1, runtime.GOMAXPROCS(0), 0} {
		name, others := "serial", []int{31, 33, 0, -31}
		if parallel > 1 {
			name = fmt.Sprintf("parallel-%d", parallel)
		} else if parallel == 0 {
			name, others = "current-alone", nil
		}
		b.Run(name, func(b *testing.B) {
			h := NewRehearser(cfg, core.DefaultRehearsal)
			h.Parallel = parallel
			for i, r := range reqs {
				h.Arrived(r.At, core.Request{ID: event.RequestID(i + 1), InputTokens: r.InputTokens})
				if i%4 != 0 {
					h.Finished(core.Request{ID: event.RequestID(i + 1), OutputTokens: r.OutputTokens, TTFT: 10 * event.Second})
				}
			}
			now := reqs[len(reqs)-1].At + event.Second
			for b.Loop() {
				if _, c, _ := h.Qualified(now, 0, 32, others, func(int) int { return 0 }); c == nil {
					b.Fatal("nothing replayed")
				}
			}
		})
	}
}

// favourDecode is a rehearser whose replays qualify more the fewer prefill
// engines a split has: every rehearsal names the neighbour toward decode,
// and every guard's replay rates a move toward prefill worse.
type favourDecode struct{ calls, guards int }

func (f *favourDecode) Arrived(event.Time, core.Request) {}
func (f *favourDecode) Finished(core.Request)            {}
func (f *favourDecode) Qualified(_ event.Time, _ event.Time, current int, others []int, gain func(int) int) (int, []int, int) {
	f.calls++
	if gain(100) == 0 {
		f.guards++
	}
	c := make([]int, len(others))
	for i, q := range others {
		c[i] = 100 - 10*q
		if q <= 0 {
			c[i] = 0 // not aggregated or hybrid serving
		}
	}
	return 100 - 10*current, c, 100
}

// Within the rehearsal's window of a move it made, the scoring pass and
// the insurance do not undo the move when a replay rates the undoing worse
// (the guard), and they do once the window has passed, or before when the
// split the rehearsal chose misses an SLO as delivered and as projected
// (twenty-eighth round: the move then says the guard yields); every
// invariant holds on the run (issue 10, twenty-third round).
func TestGuardKeepsTheRehearsalsMove(t *testing.T) {
	cfg := refConfig(6)
	reqs := randomTrace(7, 900, 1.5)
	for i := range reqs {
		reqs[i].InputTokens *= 4 // prefill-heavy: the projection pulls toward prefill
	}
	a := &core.Adaptive{Cfg: core.DefaultAdaptive}
	f := &favourDecode{}
	a.Rehearser = f
	var d allMoves
	runCheckerWith(t, cfg, a, reqs, &d)
	if f.guards == 0 {
		t.Fatal("the guard never replayed: the trace does not exercise it")
	}
	if d.vetoes == 0 {
		t.Error("the guard never held a move")
	}
	undone := 0
	for i := 1; i < len(d.moves); i++ {
		prev, m := d.moves[i-1], d.moves[i]
		if !prev.rehearsal || m.rehearsal || m.to <= m.from || prev.to >= prev.from {
			continue
		}
		if m.at-prev.at < core.DefaultRehearsal.Window && !m.yields {
			t.Errorf("at %v the pass moved %dP -> %dP, %v after the rehearsal's %dP -> %dP, against the replay",
				m.at, m.from, m.to, m.at-prev.at, prev.from, prev.to)
		}
		undone++
	}
	if undone == 0 {
		t.Error("no rehearsal's move was ever undone once its window had passed: the guard holds for ever")
	}
}

type move struct {
	at        event.Time
	from, to  int
	rehearsal bool
	// yields: a move the guard let through because the split the
	// rehearsal chose misses an SLO as delivered and as projected.
	yields bool
}

// allMoves keeps the controller's moves, and counts the guard's holds.
type allMoves struct {
	moves  []move
	vetoes int
}

func (d *allMoves) Record(r *event.Record) {
	if r.Kind != event.KindDecision {
		return
	}
	var v core.AdaptiveDecision
	if json.Unmarshal([]byte(r.Text), &v) != nil {
		return
	}
	if strings.Contains(v.Why, "undoes the rehearsal's move") {
		d.vetoes++
	}
	to, ok := strings.CutPrefix(v.Choice, "move ")
	if !ok {
		return
	}
	var fp, fd, tp, td int
	if _, err := fmt.Sscanf(v.Split, "%dP%dD", &fp, &fd); err != nil {
		return
	}
	if _, err := fmt.Sscanf(to, "%dP%dD", &tp, &td); err != nil {
		return
	}
	d.moves = append(d.moves, move{at: r.At, from: fp, to: tp, rehearsal: strings.HasPrefix(v.Why, "rehearsal:"),
		yields: strings.Contains(v.Why, "the rehearsal's guard yields: ")})
}

// favourAggregated is a rehearser whose replays rate aggregated serving
// (0 prefill engines) best until `until`, and after it the split the
// fleet left (from) best, by lead of the 100 replayed requests (0: 50).
type favourAggregated struct {
	until event.Time
	from  int
	lead  int
	calls int
}

func (f *favourAggregated) Arrived(event.Time, core.Request) {}
func (f *favourAggregated) Finished(core.Request)            {}
func (f *favourAggregated) Qualified(now event.Time, _ event.Time, current int, others []int, _ func(int) int) (int, []int, int) {
	f.calls++
	score := func(q int) int {
		if now < f.until {
			if q == 0 {
				return 100
			}
			return 50
		}
		if q == f.from {
			return 50 + cmp.Or(f.lead, 50)
		}
		return 50
	}
	c := make([]int, len(others))
	for i, q := range others {
		c[i] = score(q)
	}
	return score(current), c, 100
}

// Leaving aggregated serving takes LeaveMargin: a split the replays rate
// 7 of 100 requests ahead clears the 5% Margin that takes the fleet into
// aggregated serving but not the 10% that takes it out (issue 10,
// twenty-sixth round: on chatdoc in batches of 8 the fleet left on a
// dense spell's window and came back within two minutes).
func TestLeavingAggregatedTakesLeaveMargin(t *testing.T) {
	cfg := refConfig(6)
	reqs := randomTrace(7, 900, 1.5)
	for _, leave := range []float64{0.10, 0.05} {
		a := &core.Adaptive{Cfg: core.DefaultAdaptive}
		a.Cfg.Rehearsal.LeaveMargin = leave
		a.Rehearser = &favourAggregated{until: 300 * event.Second, from: 3, lead: 7}
		d := &aggLog{prefillOn: map[event.RequestID]event.Instance{}}
		runCheckerWith(t, cfg, a, reqs, d)
		if len(d.enter) == 0 {
			t.Fatalf("leave margin %.2f: the fleet never aggregated", leave)
		}
		if left := len(d.leave) > 0; left != (leave < 0.07) {
			t.Errorf("leave margin %.2f, a split 7 of 100 ahead: left aggregated serving at %v", leave, d.leave)
		}
	}
}

// aggLog follows the fleet's roles and each request's two legs.
type aggLog struct {
	mixed      int // engines labelled aggregated now
	enter      []event.Time
	leave      []event.Time
	prefillOn  map[event.RequestID]event.Instance
	aggPrompts int
	crossed    []event.RequestID // prompts run while aggregated whose decode moved while aggregated
	split      int               // prefill engines when the fleet last left aggregated serving
}

func (d *aggLog) Record(r *event.Record) {
	switch r.Kind {
	case event.KindRoleMove:
		if r.Opening() {
			return
		}
		if r.To == event.RoleMixed {
			if d.mixed++; d.mixed == 1 {
				d.split = 0
				d.enter = append(d.enter, r.At)
			}
		} else if r.From == event.RoleMixed {
			if r.To == event.RolePrefill {
				d.split++
			}
			if d.mixed--; d.mixed == 0 {
				d.leave = append(d.leave, r.At)
			}
		}
	case event.KindPrefillStart:
		if d.mixed > 0 {
			d.prefillOn[r.Req] = r.Inst
			d.aggPrompts++
		}
	case event.KindDecodeStart:
		if on, ok := d.prefillOn[r.Req]; ok && d.mixed > 0 && r.Inst != on {
			d.crossed = append(d.crossed, r.Req)
		}
	}
}

// When the rehearsal rates aggregated serving best, every engine is
// relabelled to take both phases at once, each prompt then decodes where
// it ran (its KV never moves while the fleet is aggregated), and when a replay rates the split the
// fleet left best again, it goes back to that split; every invariant
// holds through both changes (issue 10, twenty-fifth round).
func TestAdaptiveAggregatesOnTheRehearsal(t *testing.T) {
	cfg := refConfig(6)
	reqs := randomTrace(7, 900, 1.5)
	a := &core.Adaptive{Cfg: core.DefaultAdaptive}
	f := &favourAggregated{until: 300 * event.Second, from: 3}
	a.Rehearser = f
	d := &aggLog{prefillOn: map[event.RequestID]event.Instance{}}
	runCheckerWith(t, cfg, a, reqs, d)
	if len(d.enter) == 0 {
		t.Fatal("the fleet never aggregated on the rehearsal's word")
	}
	if d.enter[0] >= f.until {
		t.Errorf("aggregated at %v, after the rehearsal stopped rating it best (%v)", d.enter[0], f.until)
	}
	if len(d.leave) == 0 || d.leave[0] < f.until {
		t.Fatalf("left aggregated serving at %v, want once after %v", d.leave, f.until)
	}
	if d.aggPrompts == 0 {
		t.Error("no prompt ran while the fleet was aggregated")
	}
	if len(d.crossed) > 0 {
		t.Errorf("%d prompts run while aggregated decoded elsewhere (first: request %d)", len(d.crossed), d.crossed[0])
	}
	if d.split != f.from {
		t.Errorf("left aggregated serving for %dP, want %dP", d.split, f.from)
	}
	if len(d.enter) != 1 {
		t.Errorf("aggregated %d times (%v), want once", len(d.enter), d.enter)
	}
}

// offersLog is a rehearser that rates every candidate alike (the fleet
// never moves on its word) and keeps when aggregated serving was among
// the candidates over the whole window (with), over the part of it
// since a time (part, with that time in from), or not at all (without).
type offersLog struct{ with, without, part, from []event.Time }

func (f *offersLog) Arrived(event.Time, core.Request) {}
func (f *offersLog) Finished(core.Request)            {}
func (f *offersLog) Qualified(now, from event.Time, _ int, others []int, _ func(int) int) (int, []int, int) {
	if slices.Contains(others, 0) && from > 0 {
		f.part, f.from = append(f.part, now), append(f.from, from)
	} else if slices.Contains(others, 0) {
		f.with = append(f.with, now)
	} else {
		f.without = append(f.without, now)
	}
	return 50, make([]int, len(others)), 100
}

// Aggregated serving is rehearsed only on one mix of prompts: over the
// whole window once no change of mix has been seen for the long window,
// and before that over the window's part since the change began, once
// that part is OneMix long (issue 10, twenty-fifth and twenty-sixth
// rounds; a window straddling the change from short to long prompts
// rated it best on chatdoc in batches of 4, where the long prompts'
// chunks then cost the streams their TPOT).
func TestAggregatedRehearsedOnOneMix(t *testing.T) {
	cfg := refConfig(6)
	const change = 400 * event.Second
	var reqs []Request
	for i := range 1000 {
		at := event.Time(i) * event.Second
		in := 200
		if at >= change {
			in = 4000
		}
		reqs = append(reqs, Request{At: at, InputTokens: in, OutputTokens: 100})
	}
	a := &core.Adaptive{Cfg: core.DefaultAdaptive}
	if a.Cfg.Rehearsal.OneMix <= 0 || a.Cfg.Rehearsal.OneMix >= a.Cfg.LongWindow {
		t.Fatalf("OneMix %v: the test wants it shorter than the long window %v", a.Cfg.Rehearsal.OneMix, a.Cfg.LongWindow)
	}
	f := &offersLog{}
	a.Rehearser = f
	runCheckerWith(t, cfg, a, reqs)
	for i, at := range f.part {
		if from := f.from[i]; from < change || at-from < a.Cfg.Rehearsal.OneMix {
			t.Errorf("aggregated serving rehearsed at %v on the part since %v: want a part after the change at %v and at least %v long",
				at, from, change, a.Cfg.Rehearsal.OneMix)
		}
	}
	if len(f.part) == 0 || f.part[0] >= change+a.Cfg.LongWindow {
		t.Errorf("aggregated serving rehearsed on the new mix alone at %v, want it within the long window of the change", f.part)
	}
	before, after := 0, 0
	for _, at := range f.with {
		switch {
		case at < change:
			before++
		case at < change+a.Cfg.Window:
			// the short window has yet to show the change
		case at < change+a.Cfg.LongWindow:
			t.Errorf("aggregated serving rehearsed at %v, within %v of the change of mix at %v", at, a.Cfg.LongWindow, change)
		default:
			after++
		}
	}
	if before == 0 || after == 0 {
		t.Errorf("aggregated serving rehearsed %d times before the change and %d after its long window, want both", before, after)
	}
	held := 0
	for _, at := range f.without {
		if at >= change+a.Cfg.Window && at < change+a.Cfg.LongWindow {
			held++
		}
	}
	if held == 0 {
		t.Error("no rehearsal within the long window of the change: the test does not exercise the rule")
	}
}

// favourHybrid is a rehearser whose replays rate hybrid serving (a
// negative count: that many prefill engines, the rest mixed) best until
// `until`, and after it the split the fleet left (from), by 50 of 100.
type favourHybrid struct {
	until   event.Time
	from    int
	offered []int // the hybrid candidates offered
}

func (f *favourHybrid) Arrived(event.Time, core.Request) {}
func (f *favourHybrid) Finished(core.Request)            {}
func (f *favourHybrid) Qualified(now event.Time, _ event.Time, current int, others []int, _ func(int) int) (int, []int, int) {
	score := func(q int) int {
		if now < f.until && q < 0 || now >= f.until && q == f.from {
			return 100
		}
		return 50
	}
	c := make([]int, len(others))
	for i, q := range others {
		c[i] = score(q)
		if q < 0 {
			f.offered = append(f.offered, q)
		}
	}
	return score(current), c, 100
}

// hybLog follows each engine's role and each request's two legs.
type hybLog struct {
	roles     map[event.Instance]event.Role
	enter     []event.Time // the fleet went hybrid: prefill and mixed engines both
	leave     []event.Time
	hybrid    bool
	prefill   int // prefill engines while hybrid
	prefillOn map[event.RequestID]event.Instance
	onMixed   int               // prompts run on a mixed engine
	crossed   []event.RequestID // of those, decoded elsewhere
	split     int               // prefill engines once it left
}

func (d *hybLog) Record(r *event.Record) {
	switch r.Kind {
	case event.KindRoleMove:
		d.roles[r.Inst] = r.To
		p, m := 0, 0
		for _, role := range d.roles {
			switch role {
			case event.RolePrefill:
				p++
			case event.RoleMixed:
				m++
			}
		}
		switch {
		case !d.hybrid && p > 0 && m > 0:
			d.hybrid, d.prefill = true, p
			d.enter = append(d.enter, r.At)
		case d.hybrid && m == 0:
			d.hybrid, d.split = false, p
			d.leave = append(d.leave, r.At)
		}
	case event.KindPrefillStart:
		if d.roles[r.Inst] == event.RoleMixed {
			d.prefillOn[r.Req] = r.Inst
			d.onMixed++
		}
	case event.KindDecodeStart:
		if on, ok := d.prefillOn[r.Req]; ok && r.Inst != on {
			d.crossed = append(d.crossed, r.Req)
		}
	}
}

// When the rehearsal rates hybrid serving best, the fleet keeps one
// prefill engine fewer than its split and relabels every other engine to
// take both phases; prompts overflow onto the mixed engines and decode
// where they ran; when a replay rates the split it left best again, it
// goes back. Every invariant holds through both changes (issue 10,
// twenty-ninth round).
func TestAdaptiveGoesHybridOnTheRehearsal(t *testing.T) {
	cfg := refConfig(6)
	reqs := randomTrace(7, 900, 3)
	for i := range reqs {
		reqs[i].InputTokens = 1000 // one mix of prompts: no change of mix takes the fleet back
	}
	a := &core.Adaptive{Cfg: core.DefaultAdaptive}
	f := &favourHybrid{until: 200 * event.Second, from: 3}
	a.Rehearser = f
	d := &hybLog{roles: map[event.Instance]event.Role{}, prefillOn: map[event.RequestID]event.Instance{}}
	var w hybridWhys
	runCheckerWith(t, cfg, a, reqs, d, &w)
	if len(w.enter) > 0 {
		t.Fatalf("the scoring pass went hybrid at %v: the test wants the rehearsal's move", w.enter)
	}
	if len(f.offered) == 0 || slices.ContainsFunc(f.offered, func(q int) bool { return q != -2 }) {
		t.Fatalf("hybrid candidates offered %v, want 2P4M from 3P3D", f.offered)
	}
	if len(d.enter) != 1 || d.enter[0] >= f.until {
		t.Fatalf("went hybrid at %v, want once before %v", d.enter, f.until)
	}
	if d.prefill != 2 {
		t.Errorf("hybrid with %d prefill engines, want 2", d.prefill)
	}
	if d.onMixed == 0 {
		t.Error("no prompt ran on a mixed engine")
	}
	if len(d.crossed) > 0 {
		t.Errorf("%d prompts run on a mixed engine decoded elsewhere (first: request %d)", len(d.crossed), d.crossed[0])
	}
	if len(d.leave) != 1 || d.leave[0] < f.until || d.split != f.from {
		t.Errorf("left hybrid serving at %v for %dP, want once after %v for %dP", d.leave, d.split, f.until, f.from)
	}
}

// replayVerdict is a rehearser that never replays in the rehearsal (the
// fleet delivers its window) and whose Replay, the check before the
// scoring pass's hybrid, rates the hybrid better or worse than the split.
type replayVerdict struct {
	better  bool
	replays int
}

func (f *replayVerdict) Arrived(event.Time, core.Request) {}
func (f *replayVerdict) Finished(core.Request)            {}
func (f *replayVerdict) Qualified(event.Time, event.Time, int, []int, func(int) int) (int, []int, int) {
	return 0, nil, 0
}
func (f *replayVerdict) Replay(_ event.Time, _ int, others []int) (int, []int, int) {
	f.replays++
	c := make([]int, len(others))
	for i := range c {
		c[i] = 40
		if f.better {
			c[i] = 100
		}
	}
	return 90, c, 100
}

// hybridWhys keeps the decisions that speak of hybrid serving.
type hybridWhys struct {
	enter, vetoes, back []event.Time
	enterSplit          []string
}

func (d *hybridWhys) Record(r *event.Record) {
	if r.Kind != event.KindDecision {
		return
	}
	var v core.AdaptiveDecision
	if json.Unmarshal([]byte(r.Text), &v) != nil {
		return
	}
	switch {
	case strings.HasPrefix(v.Why, "hybrid: a change of mix"):
		d.back = append(d.back, r.At)
	case strings.HasPrefix(v.Why, "hybrid: "):
		d.enter, d.enterSplit = append(d.enter, r.At), append(d.enterSplit, v.Split+" -> "+v.Choice)
	case strings.Contains(v.Why, "but a replay of the window qualifies fewer"):
		d.vetoes = append(d.vetoes, r.At)
	}
}

// The scoring pass takes the fleet to hybrid serving, one prefill engine
// fewer than its split and the rest mixed, when the split is bound by
// TPOT, the neighbour toward decode breaks TTFT and the hybrid projects
// lower by the margin, before any request missed; a replay of the window
// that rates the hybrid worse holds it; a change of mix takes the fleet
// back to its split (issue 10, twenty-ninth round), once it shows at three
// passes in a row: the first 900 requests, one random mix, hold clumps of
// long prompts that took it back at 34 s before the thirtieth round; from
// the 900th (320 s) every prompt is short.
func TestPassGoesHybridOnOneMix(t *testing.T) {
	cfg := refConfig(6)
	reqs := randomTrace(7, 1500, 3)
	change := reqs[900].At
	for i := 900; i < len(reqs); i++ {
		reqs[i].InputTokens = 50 + reqs[i].InputTokens%500
	}
	for _, better := range []bool{true, false} {
		a := &core.Adaptive{Cfg: core.DefaultAdaptive}
		f := &replayVerdict{better: better}
		a.Rehearser = f
		var d hybridWhys
		runCheckerWith(t, cfg, a, reqs, &d)
		if f.replays == 0 {
			t.Fatalf("better %v: the pass never proposed hybrid serving: the trace does not exercise the rule", better)
		}
		if !better {
			if len(d.enter) > 0 || len(d.vetoes) == 0 {
				t.Errorf("a replay rating the hybrid worse: went hybrid at %v, held at %v; want held, never entered", d.enter, d.vetoes)
			}
			if len(d.vetoes) != f.replays {
				t.Errorf("%d replays, %d holds", f.replays, len(d.vetoes))
			}
			continue
		}
		if len(d.enter) == 0 {
			t.Fatal("a replay rating the hybrid better: never went hybrid")
		}
		for _, s := range d.enterSplit {
			var p, q, m, dd int
			if _, err := fmt.Sscanf(s, "%dP%dD -> move %dP%dM", &p, &dd, &q, &m); err != nil || q != p-1 || q+m != 6 {
				t.Errorf("went hybrid %q: want (p-1)P with the rest mixed", s)
			}
		}
		if len(d.back) == 0 {
			t.Error("no change of mix took the fleet back from hybrid serving: the trace does not exercise it")
		}
		for _, at := range d.back {
			if at < change || at > change+30*event.Second {
				t.Errorf("back from hybrid serving at %v; want once, within 30 s of the change of mix at %v", at, change)
			}
		}
		if len(d.back) > 1 {
			t.Errorf("back from hybrid serving %d times (%v), want once", len(d.back), d.back)
		}
	}
}

// On arrivals in clumps of at least StraddleClump, aggregated serving is
// also rehearsed over a window that straddles a change of mix; spread
// arrivals keep the one-mix rule, and so do clumped ones with the rule
// off (issue 10, thirty-fifth round: on chatdoc in batches of 8 the
// fleet held a split through the first minutes of each document phase,
// where every engine prefilling absorbs clumps of long prompts that a
// prefill pool cannot).
func TestAggregatedRehearsedAcrossAChangeOnClumps(t *testing.T) {
	cfg := refConfig(6)
	const change = 400 * event.Second
	trace := func(clump int) []Request {
		var reqs []Request
		for i := range 1000 {
			at := event.Time(i/clump*clump) * event.Second // clump requests at once, every clump seconds (gap SCV clump-1)
			in := 200
			if at >= change {
				in = 4000
			}
			reqs = append(reqs, Request{At: at, InputTokens: in, OutputTokens: 100})
		}
		return reqs
	}
	for _, tc := range []struct {
		clump    int
		straddle float64
		want     bool
	}{{16, core.DefaultRehearsal.StraddleClump, true}, {1, core.DefaultRehearsal.StraddleClump, false}, {16, 0, false}} {
		a := &core.Adaptive{Cfg: core.DefaultAdaptive}
		a.Cfg.Rehearsal.StraddleClump = tc.straddle
		f := &offersLog{}
		a.Rehearser = f
		runCheckerWith(t, cfg, a, trace(tc.clump))
		across := 0
		for _, at := range f.with {
			if at >= change+a.Cfg.Window && at < change+a.Cfg.LongWindow {
				across++
			}
		}
		if got := across > 0; got != tc.want {
			t.Errorf("clumps of %d, StraddleClump %v: aggregated serving rehearsed %d times on a window straddling the change, want any: %v",
				tc.clump, tc.straddle, across, tc.want)
		}
	}
}

// countingRehearser counts the replays a rehearser was asked for that
// replayed something.
type countingRehearser struct {
	*Rehearser
	replays int
}

func (c *countingRehearser) Qualified(now, from event.Time, current int, others []int, gain func(int) int) (int, []int, int) {
	cur, counts, n := c.Rehearser.Qualified(now, from, current, others, gain)
	if counts != nil && len(others) > 0 {
		c.replays++
	}
	return cur, counts, n
}

// Replays run at once (Parallel, as the live router runs them) leave the
// run exactly as replays run one after another: every record the same,
// on a run in which the rehearsal replays and moves the fleet, including
// replays of aggregated and hybrid serving (issue 10, twenty-second
// round; the live router's owner goroutine waited for every replay in
// turn).
func TestParallelRehearsalMatchesSerial(t *testing.T) {
	cfg := refConfig(8)
	for _, c := range []struct {
		seed uint64
		rate float64
		move string
	}{{5, 5, "move aggregated"}, {11, 4, "move 2P6D"}} {
		reqs := randomTrace(c.seed, 3000, c.rate)
		run := func(parallel int) ([]event.Record, int, []string) {
			a := &core.Adaptive{Cfg: core.DefaultAdaptive}
			h := &countingRehearser{Rehearser: NewRehearser(cfg, a.Cfg.Rehearsal)}
			h.Parallel = parallel
			a.Rehearser = h
			var l recordLog
			var d decisionLog
			runCheckerWith(t, cfg, a, reqs, &l, &d)
			return l, h.replays, d.why
		}
		serial, replays, moves := run(1)
		if replays < 20 || !slices.Contains(moves, c.move) {
			t.Fatalf("seed %d at %v req/s, serial: %d replays, rehearsal moves %v: want 20 or more and %q",
				c.seed, c.rate, replays, moves, c.move)
		}
		for _, p := range []int{2, 3, 8} {
			got, r, _ := run(p)
			if r != replays {
				t.Errorf("seed %d, Parallel %d: %d replays, serial %d", c.seed, p, r, replays)
			}
			if !slices.Equal(got, serial) {
				t.Fatalf("seed %d, Parallel %d: the run's records part from the serial run's at record %d of %d/%d",
					c.seed, p, firstDiff(got, serial), len(got), len(serial))
			}
		}
	}
}
