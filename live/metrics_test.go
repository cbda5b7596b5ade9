package live

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/narwhal-bench/narwhal-bench/live/stub"
)

// family is the router's metric family name, gathered now.
func family(t *testing.T, r *rig, name string) *dto.MetricFamily {
	t.Helper()
	fams, err := r.router.Metrics().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f
		}
	}
	t.Fatalf("no metric family %s", name)
	return nil
}

// The latency histograms count what a client sees: one TTFT per request,
// even when a failed decode leg re-places it and its prompt is prefilled
// again; none, and no TPOT, for a non-streamed answer one engine served
// whole (its first token is not seen apart from its last).
func TestMetricsObservations(t *testing.T) {
	r := startRig(t, rigOpts{n: 1, arm: "aggregated", stub: stub.Options{TimeScale: zero()}})
	for _, stream := range []bool{false, false, true} {
		resp := post(t, r, "/v1/completions", fmt.Sprintf(`{"model":"stub","prompt":"whole or streamed","max_tokens":4,"stream":%v}`, stream), nil)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if n := metricValue(t, r, "narwhal_ttft_seconds_count"); n != 1 {
		t.Errorf("TTFT observations %v: expected 1, the streamed request's", n)
	}
	if n := metricValue(t, r, "narwhal_tpot_seconds_count"); n != 1 {
		t.Errorf("TPOT observations %v: expected 1, the streamed request's", n)
	}
	if n := metricValue(t, r, "narwhal_request_duration_seconds_count"); n != 3 {
		t.Errorf("end-to-end observations %v: expected 3", n)
	}

	// A split whose decode engine answers 503: each request is prefilled,
	// re-placed once (prefilled again) and then fails.
	r = startRig(t, rigOpts{n: 2, arm: "static:1P1D", stub: stub.Options{TimeScale: zero()}})
	r.stubs.Servers()[1].SetFaults(stub.Faults{Refuse: true})
	for i := 0; i < 3; i++ {
		resp := post(t, r, "/v1/completions", fmt.Sprintf(`{"model":"stub","prompt":"re-placed %d","max_tokens":4,"stream":true}`, i), nil)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	var retried float64
	for _, m := range family(t, r, "narwhal_leg_retries_total").GetMetric() {
		retried += m.GetCounter().GetValue()
	}
	if retried != 3 {
		t.Fatalf("%v leg retries: expected each of the 3 requests re-placed once", retried)
	}
	if n := metricValue(t, r, "narwhal_ttft_seconds_count"); n != 3 {
		t.Errorf("TTFT observations %v for 3 re-placed requests: expected one each", n)
	}
}

// The series a counter may take exist from the start at zero, so a
// dashboard's increase() counts the first engine failure or role move;
// the TTFT and admission-wait histograms have edges far under the SLO,
// and one exactly at it.
func TestMetricsSeriesAndBuckets(t *testing.T) {
	r := startRig(t, rigOpts{n: 2, arm: "static:1P1D", stub: stub.Options{TimeScale: zero()}})
	if n := len(family(t, r, "narwhal_engine_failures_total").GetMetric()); n != 2*4 {
		t.Errorf("%d engine-failure series: expected 2 engines x 4 kinds", n)
	}
	if n := len(family(t, r, "narwhal_role_moves_total").GetMetric()); n != 4*5 {
		t.Errorf("%d role-move series: expected 4 roles x 5 causes", n)
	}
	slo := r.router.cfg.Fleet.CoreSLO().TTFT.Seconds()
	for _, name := range []string{"narwhal_ttft_seconds", "narwhal_admission_wait_seconds"} {
		var edges []float64
		for _, b := range family(t, r, name).GetMetric()[0].GetHistogram().GetBucket() {
			edges = append(edges, b.GetUpperBound())
		}
		if len(edges) == 0 || edges[0] > 0.002 || edges[0] >= 0.025*slo {
			t.Errorf("%s edges %v: expected a first edge of a few milliseconds or less, under 2.5%% of the %gs SLO", name, edges, slo)
		}
		atSLO := false
		for i, e := range edges {
			atSLO = atSLO || e == slo
			if i > 0 && e <= edges[i-1] {
				t.Errorf("%s edges %v: not increasing", name, edges)
			}
		}
		if !atSLO {
			t.Errorf("%s edges %v: none at the SLO %g", name, edges, slo)
		}
	}
}

// The scheduled-send header (a load generator's) is taken for any past
// time (a generator far behind its schedule sends late: journaled as the
// misses they are) but not for one more than a second ahead of the
// router's clock, which would hide latency.
func TestScheduledHeaderBounded(t *testing.T) {
	r := startRig(t, rigOpts{n: 2, arm: "static:1P1D", stub: stub.Options{TimeScale: zero()},
		configure: func(c *Config) { c.RequestTimeout = 50 * time.Millisecond }})
	time.Sleep(100 * time.Millisecond) // time 0 is now past the request timeout
	send := func(ns int64) int {
		resp := post(t, r, "/v1/completions", `{"model":"stub","prompt":"when was I sent","max_tokens":3}`,
			map[string]string{HeaderScheduled: strconv.FormatInt(ns, 10)})
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusBadRequest && !strings.Contains(string(b), HeaderScheduled) {
			t.Errorf("400 not naming the header: %s", b)
		}
		return resp.StatusCode
	}
	now := int64(r.router.now())
	for _, at := range []int64{0, now - int64(10*time.Millisecond)} {
		// Taken: answered, or timed out by the short request timeout (a
		// 504 on a slow machine), never refused as bad input.
		if c := send(at); c == http.StatusBadRequest {
			t.Errorf("scheduled at %d ns (now %d): %d, expected it taken", at, now, c)
		}
	}
	for _, at := range []int64{now + int64(time.Hour), -1} {
		if c := send(at); c != http.StatusBadRequest {
			t.Errorf("scheduled at %d ns (now %d): %d, expected 400", at, now, c)
		}
	}
	r.stop()
	if rows := checkJournal(t, r.jr.records()); len(rows) != 2 {
		t.Errorf("%d requests journaled: expected the two taken (a refused header ends before the core)", len(rows))
	}
}

// GET /state gives each engine's resident decode context as the relays
// count it, also under an arm that never ticks (a static split), whose
// core sees the engines only at placements.
func TestStateDecodeTokensCurrent(t *testing.T) {
	scale := 1.0
	r := startRig(t, rigOpts{n: 2, arm: "static:1P1D", stub: stub.Options{TimeScale: &scale}})
	resp := post(t, r, "/v1/completions", `{"model":"stub","prompt":"count my context","max_tokens":1000,"min_tokens":1000,"stream":true}`, nil)
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for n := 0; n < 200; {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("after %d events: %v", n, err)
		}
		if strings.HasPrefix(line, "data: {") {
			n++
		}
	}
	st, _ := r.router.State()
	if got := st.Engines[1].DecodeTokens; got < 200 {
		t.Errorf("/state decode_tokens on the decode engine %d after 200 tokens streamed: expected at least 200", got)
	}
}

// The owner's time in each core tick is observed (the adaptive arm ticks
// every 2 s, its rehearsal included), so an operator sees how long
// placements wait behind the controller; a static split that never ticks
// observes none.
func TestCoreTickObserved(t *testing.T) {
	r := startRig(t, rigOpts{n: 2, arm: "adaptive", stub: stub.Options{TimeScale: zero()}})
	deadline := time.Now().Add(15 * time.Second)
	for metricValue(t, r, "narwhal_core_tick_seconds_count") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no core tick observed in 15 s of an adaptive router (it ticks every 2 s)")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if sum := metricValue(t, r, "narwhal_core_tick_seconds_sum"); sum <= 0 {
		t.Errorf("tick seconds sum %v: want the ticks' time", sum)
	}
	s := startRig(t, rigOpts{n: 2, arm: "static:1P1D", stub: stub.Options{TimeScale: zero()}})
	resp := post(t, s, "/v1/completions", `{"model":"stub","prompt":"one","max_tokens":2}`, nil)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if n := metricValue(t, s, "narwhal_core_tick_seconds_count"); n != 0 {
		t.Errorf("static split: %v ticks observed, want none", n)
	}
}
