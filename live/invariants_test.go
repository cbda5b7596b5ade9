package live

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/internal/simcheck"
	"github.com/narwhal-bench/narwhal-bench/live/api"
	"github.com/narwhal-bench/narwhal-bench/live/stub"
	"github.com/narwhal-bench/narwhal-bench/sweep"
)

// invEngines is the fleet size the every-arm test runs on.
const invEngines = 4

// invArms says, for each arm in core's own list (core.NewController's
// "expected one of"), how the every-arm test treats it on invEngines
// engines: the arm it builds (its k/m filled in), whether the test
// asserts that it moved at least once under the shifting load, and why
// not when it does not; or why the live router cannot run it at all. An
// arm core lists that is missing here fails the test until it is covered.
var invArms = map[string]struct {
	arm      string
	mustMove bool
	why      string // why no move is asserted (or why the arm is not run)
	notLive  bool
}{
	"static:kPmD":      {arm: "static:2P2D", why: "a fixed split never moves"},
	"static:kPmD/alg1": {arm: "static:2P2D/alg1", why: "Algorithm 1 flips inline only when no engine meets the SLO; the load is not built to force it"},
	"hybrid:kPmM":      {arm: "hybrid:1P3M", why: "a fixed hybrid split never moves"},
	"aggregated":       {arm: "aggregated", why: "every engine mixed, for good"},
	"adaptive":         {arm: "adaptive", mustMove: true},
	"arrow":            {arm: "arrow", mustMove: true},
	"planner":          {arm: "planner", mustMove: true},
	"coldswap":         {arm: "coldswap", mustMove: true},
	"dynamo":           {arm: "dynamo", mustMove: true},
	"ray":              {arm: "ray", mustMove: true},
	"dynamo:KEY=V":     {arm: "dynamo:start=0s/busy=0", mustMove: true},
	"ray:KEY=V":        {arm: "ray:start=0s/target=2", mustMove: true},
	"oracle":           {notLive: true, why: "its schedule is chosen in hindsight by a sweep (core.NewController refuses it; so do serve and live)"},
	"phase-oracle":     {notLive: true, why: "its schedule is chosen in hindsight by a sweep (core.NewController refuses it; so do serve and live)"},
}

// coreArms is core's own list of arm kinds.
func coreArms(t *testing.T) []string { return core.ArmKinds() }

// invTimeCompression divides every duration in a controller's exported
// configuration (steps, windows, dwells, cooldowns, start-up delays), so
// that an arm whose defaults act over seconds to minutes acts within the
// test's few seconds of load. Its rules are unchanged; only its clock
// constants shrink.
const invTimeCompression = 40

// compressTimes divides every exported event.Time reachable from v by f.
func compressTimes(v reflect.Value, f int64) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			compressTimes(v.Elem(), f)
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				compressTimes(v.Field(i), f)
			}
		}
	default:
		if v.Type() == reflect.TypeOf(event.Time(0)) && v.CanSet() {
			v.SetInt(v.Int() / f)
		}
	}
}

// invSent is one request the every-arm test's client sent, and what it
// saw.
type invSent struct {
	class  string
	sched  event.Time
	want   int
	stream bool
	status int
	// tokens are when each streamed token reached the client, in order;
	// usage the non-streamed answer's completion tokens; errEvent whether
	// a stream ended with an error event.
	tokens   []time.Time
	usage    int
	errEvent bool
	err      error
}

// Every arm the live router runs keeps every invariant on a load whose
// mix shifts (long prompts with short answers, then short prompts with
// long answers; streamed and not, alternately): the journal passes the
// simulator's checker (internal/simcheck) and checkJournal's live rules,
// the checker's Finish matches the journal against what the client
// offered (every request ends exactly once, its scheduled time and its
// output tokens) and the router's counts; at the client, each streamed
// token arrives no earlier than the one before, and every finished
// request's tokens (streamed, or the usage of a whole answer) number the
// journal's output tokens. The role-moving arms must have moved. The
// adaptive arm runs with its real rehearser (sweep.AttachLiveRehearser,
// replays at once), as serve and live attach it.
func TestInvariantsEveryArm(t *testing.T) {
	for _, name := range coreArms(t) {
		spec, ok := invArms[name]
		if !ok {
			t.Errorf("arm %s (core's list) is not covered by TestInvariantsEveryArm: add it to invArms", name)
			continue
		}
		if spec.notLive {
			if _, err := core.NewController(name, invEngines); err == nil {
				t.Errorf("arm %s: core builds it now; run it here", name)
			}
			t.Logf("arm %s not run live: %s", name, spec.why)
			continue
		}
		t.Run(spec.arm, func(t *testing.T) {
			// Every run must keep every invariant. Whether a moving arm
			// moves within a few seconds of wall-clock load depends on the
			// machine's timing too: it gets three runs to make a move.
			for try := 1; ; try++ {
				moves := runInvariantArm(t, spec.arm, spec.why)
				if !spec.mustMove || moves > 0 || t.Failed() {
					return
				}
				if try == 3 {
					t.Errorf("%s made no move in %d runs under a load whose mix shifts", spec.arm, try)
					return
				}
				t.Logf("%s made no move in run %d: running again", spec.arm, try)
			}
		})
	}
}

// runInvariantArm runs arm once on a fresh rig, checks every invariant
// and returns the moves it made.
func runInvariantArm(t *testing.T, arm string, why string) int {
	// Tight SLOs on the test profile: a queue of long prompts misses the
	// TTFT SLO, a crowd of long answers the TPOT one.
	fl := testFleetWith(t, invEngines, "{a: 0, b: 1.0e-5, c: 0.0005, slope: 1.0e-7, intercept: 0.002}", "{ttft: 100ms, tpot: 3ms}")
	ctrl, err := core.NewController(arm, invEngines)
	if err != nil {
		t.Fatal(err)
	}
	compressTimes(reflect.ValueOf(ctrl), invTimeCompression)
	sweep.AttachLiveRehearser(ctrl, sweep.SimConfig(fl, fl.CoreSLO(), false))
	one := 1.0
	r := startRigSpec(t, fl, rigOpts{ctrl: ctrl, stub: stub.Options{TimeScale: &one}})

	const perPhase, conc = 40, 16
	long, short := strings.Repeat("word ", 1500), "a short prompt"
	// A client of its own, whose idle connections close before the stop
	// (a dialled connection never used holds the server's Shutdown).
	tr := &http.Transport{MaxIdleConnsPerHost: conc}
	hc := &http.Client{Transport: tr}
	// Three phases (long prompts, long answers, long prompts): a mix that
	// shifts twice, so a moving arm has two chances to move.
	sent := make([]*invSent, 3*perPhase)
	var wg sync.WaitGroup
	sem := make(chan struct{}, conc)
	for i := range sent {
		s := &invSent{class: "inv-" + strconv.Itoa(i), stream: i%2 == 1}
		prompt := long
		s.want = 2
		if i/perPhase == 1 {
			prompt, s.want = short, 48
		}
		sent[i] = s
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			invSend(hc, r, s, prompt)
		}()
	}
	wg.Wait()
	t.Logf("load sent and answered by %v (router clock)", r.router.now())
	waitFor(t, "nothing in flight", func() bool { st, _ := r.router.State(); return st.Counts.InFlight == 0 })
	st, _ := r.router.State()
	tr.CloseIdleConnections()
	r.stop()
	recs := r.jr.records()
	c, rows := checkJournalWith(t, recs)

	byClass := map[string]*invSent{}
	for _, s := range sent {
		if s.err != nil {
			t.Errorf("%s: %v", s.class, s.err)
		}
		byClass[s.class] = s
	}
	offered := make([]simcheck.Offered, len(rows))
	for i, row := range rows {
		s := byClass[row.Class]
		if s == nil {
			t.Fatalf("request %d: class %q was not sent", row.Req, row.Class)
		}
		delete(byClass, row.Class)
		offered[i] = simcheck.Offered{At: s.sched, Output: s.want}
		switch {
		case row.Terminal == event.KindFinish && row.Cause != event.CauseCancel:
			got := s.usage
			if s.stream {
				// The stub sends one token a chunk: the chunks number
				// the usage the stream ends with.
				if len(s.tokens) != s.usage {
					t.Errorf("%s: %d token chunks, usage says %d", s.class, len(s.tokens), s.usage)
				}
				for k := 1; k < len(s.tokens); k++ {
					if s.tokens[k].Before(s.tokens[k-1]) {
						t.Errorf("%s: token %d reached the client before token %d", s.class, k+1, k)
					}
				}
			}
			if s.status != http.StatusOK || s.errEvent || int64(got) != row.OutputTokens {
				t.Errorf("%s (request %d): status %d, error event %v, %d tokens at the client; the journal says %s/%s with %d",
					s.class, row.Req, s.status, s.errEvent, got, row.Terminal, row.Cause, row.OutputTokens)
			}
		default:
			if s.status == http.StatusOK && !s.errEvent {
				t.Errorf("%s (request %d): the client saw a whole answer; the journal says %s/%s", s.class, row.Req, row.Terminal, row.Cause)
			}
		}
	}
	for class := range byClass {
		t.Errorf("%s: sent, never journaled", class)
	}
	c.Finish(offered, simcheck.Outcomes{Offered: st.Counts.Arrived, Finished: st.Counts.Finished + st.Counts.Cancelled,
		Refused: st.Counts.Refused, Failed: st.Counts.Failed, Expired: st.Counts.Expired})

	// Moves journaled before the /state snapshot match its count (a
	// controller still ticking may move after it, before the stop).
	moves, before := 0, event.Time(math.Round(st.NowSeconds*1e9))
	for at, n := range c.Moves {
		moves += n
		if at > before {
			n = 0
		}
		st.Moves -= n
	}
	if st.Moves != 0 {
		t.Errorf("%d moves journaled by the /state snapshot at %v, %d in /state", moves, before, st.Moves+moves)
	}
	t.Logf("%s: %d moves, outcomes %v", arm, moves, outcomes(rows))
	if moves == 0 && why != "" {
		t.Logf("no move asserted: %s", why)
	}
	return moves
}

// invSend sends one request of the every-arm test and notes what the
// client saw.
func invSend(hc *http.Client, r *rig, s *invSent, prompt string) {
	body := map[string]any{"model": "stub", "prompt": prompt, "max_tokens": s.want, "min_tokens": s.want, "stream": s.stream}
	if s.stream {
		body["stream_options"] = map[string]any{"include_usage": true}
	}
	b, _ := json.Marshal(body)
	q, _ := http.NewRequest(http.MethodPost, r.url+"/v1/completions", bytes.NewReader(b))
	q.Header.Set("Content-Type", "application/json")
	q.Header.Set(HeaderClass, s.class)
	s.sched = r.router.now()
	q.Header.Set(HeaderScheduled, strconv.FormatInt(int64(s.sched), 10))
	resp, err := hc.Do(q)
	if err != nil {
		s.err = err
		return
	}
	defer resp.Body.Close()
	s.status = resp.StatusCode
	var chunk struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
		Usage *struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
		Error json.RawMessage `json:"error"`
	}
	if !s.stream || resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusOK {
			if err := json.Unmarshal(raw, &chunk); err != nil || chunk.Usage == nil {
				s.err = fmt.Errorf("answer %q: %v", raw, err)
				return
			}
			s.usage = chunk.Usage.CompletionTokens
		}
		return
	}
	sr := api.NewSSEReader(resp.Body)
	for {
		p, done, err := sr.ReadEvent()
		if done || err == io.EOF {
			return
		}
		if err != nil {
			s.err = err
			return
		}
		chunk.Choices, chunk.Usage, chunk.Error = nil, nil, nil
		if err := json.Unmarshal(p, &chunk); err != nil {
			s.err = fmt.Errorf("event %q: %v", p, err)
			return
		}
		if len(chunk.Error) > 0 {
			s.errEvent = true
		}
		if len(chunk.Choices) > 0 {
			s.tokens = append(s.tokens, time.Now())
		}
		if chunk.Usage != nil {
			s.usage = chunk.Usage.CompletionTokens
		}
	}
}
