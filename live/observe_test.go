package live

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/live/stub"
)

// A static split never ticks, yet the core places on a view of the
// engines at most core.DefaultObserveEvery old: an arrival a second after
// the last observation refreshes every engine's decode context, so a long
// answer streaming on the decode engine counts its generated tokens
// there. Observed only at ticks, the context stayed at the prompt plus
// one token for the whole run (issue 10, twenty-seventh round).
func TestStaticArmObservesWithoutTicks(t *testing.T) {
	scale := 1.0
	r := startRig(t, rigOpts{arm: "static:1P1D", stub: stub.Options{TimeScale: &scale}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.url+"/v1/completions",
		strings.NewReader(`{"model":"stub","prompt":"long answer","max_tokens":5000,"min_tokens":5000,"stream":true}`))
	resp, err := http.DefaultClient.Do(q)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// Read the stream until 300 tokens have come.
	sc := bufio.NewScanner(resp.Body)
	got := 0
	for got < 300 && sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: {") {
			got++
		}
	}
	if got < 300 {
		t.Fatalf("the stream ended after %d tokens (%v): expected 5000", got, sc.Err())
	}
	// Keep reading in the background so the stream is not held back.
	go func() {
		for sc.Scan() {
		}
	}()
	time.Sleep(time.Duration(core.DefaultObserveEvery) + 100*time.Millisecond)
	b, err := http.Post(r.url+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"stub","prompt":"short","max_tokens":2,"min_tokens":2}`))
	if err != nil {
		t.Fatal(err)
	}
	b.Body.Close()
	st, ok := r.router.State()
	if !ok {
		t.Fatal("no /state: the router is not running")
	}
	if st.Counts.InFlight != 1 {
		t.Fatalf("%d requests in flight: expected the long answer alone", st.Counts.InFlight)
	}
	if d := st.Engines[1].DecodeTokens; d < 300 {
		t.Errorf("the decode engine's context in the core's view: %d tokens; expected at least the 300 the long answer had streamed", d)
	}
}
