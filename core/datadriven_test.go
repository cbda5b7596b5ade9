package core

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/timing"
)

// The scheduler-test fixture of the Narwhal reference: T(500) = 0.5025 s,
// MT = 4000 tokens at a 50 ms TPOT SLO.
var fixture = timing.Profile{A: 1e-8, B: 1e-3, C: 0, Slope: 1.25e-5, Intercept: 0}

// TestScripts drives the core with facts from testdata/*.txt and prints its
// decisions. Each script cites the Arrow clause it holds. Regenerate with
// go test ./core -run TestScripts -rewrite, then review the diff.
//
// Commands:
//
//	init controller=NAME n=N [profile=fixture|reference] [ttft=S] [tpot=S] [split=P] [cooldown=S] [offline=S] [pinned=(I,J)] [spill=off]
//	arrive t=S id=N in=TOKENS
//	prefill-done t=S id=N in=TOKENS inst=I [out=N]   (out=1: no decode leg)
//	finished t=S id=N in=TOKENS inst=I ctx=TOKENS [out=N] [ttft=S] [tpot=S]
//	observe t=S inst=I [iters=N secs=S] [tokens=N]
//	tick t=S
//	state
//	cost id=N in=TOKENS [prefill-inst=I]
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var c *Core
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "init" && c == nil {
				d.Fatalf(t, "init first")
			}
			var out string
			switch d.Cmd {
			case "init":
				c = initCore(t, d)
				out = drain(c)
			case "arrive":
				out = fact(c.Arrive(at(t, d), Request{ID: reqID(t, d), InputTokens: intArg(t, d, "in", 0)})) + drain(c)
			case "prefill-done":
				r := Request{ID: reqID(t, d), InputTokens: intArg(t, d, "in", 0),
					PrefillInst: event.Instance(intArg(t, d, "inst", 0))}
				if intArg(t, d, "out", 2) <= 1 {
					r.NoDecode, r.OutputTokens = true, 1
				}
				out = fact(c.PrefillDone(at(t, d), r)) + drain(c)
			case "finished":
				r := Request{ID: reqID(t, d), InputTokens: intArg(t, d, "in", 0),
					ContextTokens: int64(intArg(t, d, "ctx", 0)), OutputTokens: intArg(t, d, "out", 10),
					TTFT: event.Seconds(floatArg(t, d, "ttft", 0.1)), TPOT: event.Seconds(floatArg(t, d, "tpot", 0.01))}
				out = fact(c.Finished(at(t, d), event.Instance(intArg(t, d, "inst", 0)), r)) + drain(c)
			case "observe":
				out = fact(c.Observe(at(t, d), event.Instance(intArg(t, d, "inst", 0)), Observation{
					DecodeIters: int64(intArg(t, d, "iters", 0)), DecodeSeconds: floatArg(t, d, "secs", 0),
					DecodeTokens: int64(intArg(t, d, "tokens", 0))})) + drain(c)
			case "tick":
				out = fact(c.Tick(at(t, d))) + drain(c)
			case "state":
				out = state(c)
			case "cost":
				r := Request{ID: reqID(t, d), InputTokens: intArg(t, d, "in", 0), PrefillInst: event.NoInstance}
				var b strings.Builder
				for i := range c.v.Instances() {
					p, q := c.v.PrefillCost(event.Instance(i), r), c.v.DecodeCost(event.Instance(i), r)
					fmt.Fprintf(&b, "i%d prefill (%g, %.4f) decode (%g, %g)\n", i, p[0], p[1], q[0], q[1])
				}
				out = b.String()
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			return out
		})
	})
}

func initCore(t *testing.T, d *datadriven.TestData) *Core {
	n := intArg(t, d, "n", 4)
	prof := fixture
	if strArg(d, "profile", "fixture") == "reference" {
		prof = timing.Reference
	}
	ps := make([]timing.Profile, n)
	for i := range ps {
		ps[i] = prof
	}
	slo := event.SLO{TTFT: event.Seconds(floatArg(t, d, "ttft", 1.0)), TPOT: event.Seconds(floatArg(t, d, "tpot", 0.05))}
	var ctrl Controller
	switch name := strArg(d, "controller", "static"); name {
	case "arrow":
		cfg := DefaultArrow
		cfg.Cooldown = event.Seconds(floatArg(t, d, "cooldown", cfg.Cooldown.Seconds()))
		ctrl = &Arrow{Cfg: cfg}
	case "adaptive":
		cfg := DefaultAdaptive
		if strArg(d, "spill", "on") == "off" {
			cfg.Spill = SpillConfig{}
		}
		ctrl = &Adaptive{Cfg: cfg}
	case "scheduled":
		ctrl = &Scheduled{Arm: "scheduled", Steps: []ScheduleStep{{At: 0, Prefill: intArg(t, d, "split", n/2)}},
			NoSpill: strArg(d, "spill", "on") == "off"}
	case "planner":
		p := NewPlanner()
		p.Cfg.Interval = event.Seconds(floatArg(t, d, "interval", 15))
		p.Cfg.Window = event.Seconds(floatArg(t, d, "window", 30))
		p.Cfg.OfflineFor = event.Seconds(floatArg(t, d, "offline", 0))
		ctrl = p
	case "static":
		ctrl = &Static{Prefill: intArg(t, d, "split", n/2)}
	case "aggregated":
		ctrl = &Aggregated{}
	default:
		var err error
		if ctrl, err = NewController(name, n); err != nil {
			d.Fatalf(t, "%v", err)
		}
	}
	var pinned []bool
	if a, ok := d.Arg("pinned"); ok {
		pinned = make([]bool, n)
		for _, v := range a.Vals {
			var i int
			fmt.Sscan(v, &i)
			pinned[i] = true
		}
	}
	c, err := New(Config{Profiles: ps, SLO: slo, Pinned: pinned}, ctrl)
	if err != nil {
		d.Fatalf(t, "%v", err)
	}
	return c
}

// drain prints the decisions and records since the last fact.
// fact is the output line of a fact the core refused ("" when it took
// it): a script whose fact is refused says so in its golden output, never
// silently.
func fact(err error) string {
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	return ""
}

func drain(c *Core) string {
	var b strings.Builder
	rd := c.Ready()
	for _, d := range rd.Decisions {
		switch d.Kind {
		case PlacePrefill:
			fmt.Fprintf(&b, "prefill r%d -> i%d%s\n", d.Req, d.Inst, map[bool]string{true: " (spilled)"}[d.Cause == event.CauseSpilled])
		case PlaceDecode:
			fmt.Fprintf(&b, "decode r%d -> i%d%s\n", d.Req, d.Inst, map[bool]string{true: " (crossed)"}[d.Cause == event.CauseCrossed])
		case Refuse:
			fmt.Fprintf(&b, "refuse r%d (%s)\n", d.Req, d.Cause)
		case Move:
			fmt.Fprintf(&b, "move i%d %s -> %s (%s)\n", d.Inst, d.From, d.To, d.Cause)
		}
	}
	for _, r := range rd.Records {
		switch r.Kind {
		case event.KindRoleMove:
			if r.Opening() {
				fmt.Fprintf(&b, "record open i%d %s\n", r.Inst, r.To)
			} else {
				fmt.Fprintf(&b, "record move i%d %s -> %s: %s\n", r.Inst, r.From, r.To, r.Text)
			}
		case event.KindDecision:
			fmt.Fprintf(&b, "record decision %s\n", compactDecision(r.Text))
		}
	}
	if b.Len() == 0 {
		return "ok\n"
	}
	return b.String()
}

// compactDecision prints a decision's JSON with sorted keys on one line.
func compactDecision(text string) string {
	var m map[string]any
	if err := json.Unmarshal([]byte(text), &m); err != nil {
		return "INVALID JSON: " + text
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		v, _ := json.Marshal(m[k])
		parts = append(parts, k+"="+string(v))
	}
	return strings.Join(parts, " ")
}

func state(c *Core) string {
	var b strings.Builder
	fmt.Fprintf(&b, "prefill pool load %.4f, decode pool load %.4f\n", c.v.PoolLoad(event.RolePrefill), c.v.PoolLoad(event.RoleDecode))
	for i, in := range c.v.Instances() {
		fmt.Fprintf(&b, "i%d %-7s prefill %d (%d tok, %.4fs) decode %d (%d tok) load p=%.4f d=%.4f",
			i, in.Role, in.PrefillCount, in.PrefillTokens, in.PrefillWork, in.DecodeCount, in.DecodeTokens,
			c.v.PrefillLoad(event.Instance(i)), c.v.DecodeLoad(event.Instance(i)))
		if !in.Online(c.Now()) {
			fmt.Fprintf(&b, " offline until %v", in.OfflineUntil)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func at(t *testing.T, d *datadriven.TestData) event.Time {
	return event.Seconds(floatArg(t, d, "t", 0))
}

func reqID(t *testing.T, d *datadriven.TestData) event.RequestID {
	return event.RequestID(intArg(t, d, "id", 1))
}

func intArg(t *testing.T, d *datadriven.TestData, key string, def int) int {
	if !d.HasArg(key) {
		return def
	}
	var v int
	d.ScanArgs(t, key, &v)
	return v
}

func floatArg(t *testing.T, d *datadriven.TestData, key string, def float64) float64 {
	if !d.HasArg(key) {
		return def
	}
	var s string
	d.ScanArgs(t, key, &s)
	var v float64
	if _, err := fmt.Sscan(s, &v); err != nil {
		d.Fatalf(t, "%s=%s: %v", key, s, err)
	}
	return v
}

func strArg(d *datadriven.TestData, key, def string) string {
	if a, ok := d.Arg(key); ok && len(a.Vals) > 0 {
		return a.Vals[0]
	}
	return def
}
