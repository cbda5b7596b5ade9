package live

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/fleet"
	"github.com/narwhal-bench/narwhal-bench/live/api"
	"github.com/narwhal-bench/narwhal-bench/live/stub"
)

func zero() *float64 { z := 0.0; return &z }

func client(r *rig) openai.Client {
	return openai.NewClient(option.WithBaseURL(r.url+"/v1"), option.WithAPIKey("test"), option.WithMaxRetries(0))
}

// The official OpenAI Go client talks to the router, completions and chat,
// streamed and not, on a disaggregated split (two legs with a KV handoff)
// and on an aggregated fleet (one ordinary request); the journal folds to
// one finished row per request.
func TestOpenAIClient(t *testing.T) {
	for _, arm := range []string{"static:1P1D", "aggregated"} {
		t.Run(arm, func(t *testing.T) {
			r := startRig(t, rigOpts{arm: arm, stub: stub.Options{TimeScale: zero()}})
			c := client(r)
			ctx := context.Background()
			want := 8
			exact := option.WithJSONSet("min_tokens", want)

			comp, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: "stub",
				Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("the quick brown fox jumps over the lazy dog")},
				MaxTokens: openai.Int(int64(want))}, exact)
			if err != nil {
				t.Fatal(err)
			}
			if comp.Usage.CompletionTokens != int64(want) || len(comp.Choices) != 1 || comp.Choices[0].Text == "" {
				t.Fatalf("completion: %+v", comp)
			}

			chat, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "stub",
				Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello there")},
				MaxTokens: openai.Int(int64(want))}, exact)
			if err != nil {
				t.Fatal(err)
			}
			if chat.Choices[0].Message.Content == "" || chat.Usage.CompletionTokens != int64(want) {
				t.Fatalf("chat: %+v", chat)
			}

			s := c.Completions.NewStreaming(ctx, openai.CompletionNewParams{Model: "stub",
				Prompt:        openai.CompletionNewParamsPromptUnion{OfString: openai.String("stream me")},
				MaxTokens:     openai.Int(int64(want)),
				StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}}, exact)
			var text strings.Builder
			var usage int64
			for s.Next() {
				ch := s.Current()
				for _, x := range ch.Choices {
					text.WriteString(x.Text)
				}
				if ch.Usage.CompletionTokens > 0 {
					usage = ch.Usage.CompletionTokens
				}
			}
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			if text.Len() == 0 || usage != int64(want) {
				t.Fatalf("streamed completion: text %q usage %d", text.String(), usage)
			}

			cs := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "stub",
				Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("stream a chat")},
				MaxTokens: openai.Int(int64(want))}, exact)
			var acc openai.ChatCompletionAccumulator
			for cs.Next() {
				acc.AddChunk(cs.Current())
			}
			if err := cs.Err(); err != nil {
				t.Fatal(err)
			}
			if len(acc.Choices) != 1 || acc.Choices[0].Message.Content == "" {
				t.Fatalf("streamed chat: %+v", acc.ChatCompletion)
			}

			r.stop()
			rows := checkJournal(t, r.jr.records())
			if len(rows) != 4 {
				t.Fatalf("%d rows: expected 4", len(rows))
			}
			for _, row := range rows {
				if row.Terminal != event.KindFinish || row.Cause != event.CauseStop || row.OutputTokens != int64(want) {
					t.Errorf("row %+v: expected a natural finish with %d tokens", row, want)
				}
				if arm == "static:1P1D" && (!row.Crossed || row.PrefillInst != 0 || row.DecodeInst != 1) {
					t.Errorf("row %d: prefill %d decode %d crossed %v: expected 0 -> 1 over a KV handoff", row.Req, row.PrefillInst, row.DecodeInst, row.Crossed)
				}
				if arm == "aggregated" && row.Crossed {
					t.Errorf("row %d crossed engines on an aggregated fleet", row.Req)
				}
			}
		})
	}
}

// The same X-Request-Id on both legs: the client's when it sends one, and
// it comes back in the response header.
func TestRequestID(t *testing.T) {
	r := startRig(t, rigOpts{stub: stub.Options{TimeScale: zero()}})
	resp := post(t, r, "/v1/completions", `{"model":"stub","prompt":"hi","max_tokens":3}`, map[string]string{"X-Request-Id": "abc-123"})
	if resp.StatusCode != 200 || resp.Header.Get("X-Request-Id") != "abc-123" {
		t.Fatalf("status %d, X-Request-Id %q", resp.StatusCode, resp.Header.Get("X-Request-Id"))
	}
	var body struct{ ID string }
	json.NewDecoder(resp.Body).Decode(&body)
	if !strings.Contains(body.ID, "abc-123") {
		t.Fatalf("response id %q: expected the decode engine to derive it from X-Request-Id", body.ID)
	}
	resp = post(t, r, "/v1/completions", `{"model":"stub","prompt":"hi","max_tokens":3}`, nil)
	if resp.Header.Get("X-Request-Id") == "" {
		t.Fatal("no X-Request-Id generated")
	}
}

func post(t testing.TB, r *rig, path, body string, hdr map[string]string) *http.Response {
	t.Helper()
	q, _ := http.NewRequest(http.MethodPost, r.url+path, strings.NewReader(body))
	q.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		q.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(q)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// Bad requests get 4xx with an OpenAI error body, never a 500, and are not
// journaled as requests.
func TestBadRequests(t *testing.T) {
	r := startRig(t, rigOpts{configure: func(c *Config) { c.MaxBodyBytes = 1 << 12; c.MaxOutputTokens = 1000 }})
	for _, tc := range []struct {
		name, path, body string
		status           int
		param            string
	}{
		{"malformed JSON", "/v1/completions", `{"model":"stub","prompt":`, 400, ""},
		{"wrong type", "/v1/completions", `{"model":"stub","prompt":"x","max_tokens":"ten"}`, 400, "max_tokens"},
		{"no prompt", "/v1/completions", `{"model":"stub"}`, 400, "prompt"},
		{"no messages", "/v1/chat/completions", `{"model":"stub","prompt":"x"}`, 400, "messages"},
		{"n>1", "/v1/completions", `{"model":"stub","prompt":"x","n":2}`, 400, "n"},
		{"unknown model", "/v1/completions", `{"model":"gpt-9","prompt":"x"}`, 404, ""},
		{"too many tokens", "/v1/completions", `{"model":"stub","prompt":"x","max_tokens":5000}`, 400, "max_tokens"},
		{"body too large", "/v1/completions", `{"model":"stub","prompt":"` + strings.Repeat("a", 5000) + `"}`, 413, ""},
		{"unknown route", "/v1/embeddings", `{}`, 404, ""},
	} {
		resp := post(t, r, tc.path, tc.body, nil)
		var e struct {
			Error struct {
				Message string  `json:"message"`
				Type    string  `json:"type"`
				Param   *string `json:"param"`
			} `json:"error"`
		}
		b, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" {
			t.Errorf("%s: body %q: expected an OpenAI error body", tc.name, b)
		}
		if resp.StatusCode != tc.status {
			t.Errorf("%s: status %d, expected %d (%s)", tc.name, resp.StatusCode, tc.status, b)
		}
		if tc.param != "" && (e.Error.Param == nil || *e.Error.Param != tc.param) {
			t.Errorf("%s: param %v, expected %q (%s)", tc.name, e.Error.Param, tc.param, b)
		}
	}
	r.stop()
	if rows := checkJournal(t, r.jr.records()); len(rows) != 0 {
		t.Fatalf("bad requests journaled as %d requests", len(rows))
	}
}

// Hot swap under load: a schedule moves engines between prefill and
// decode every 150 ms while 200 requests stream through 4 engines. Every
// request ends exactly once, finished; no leg lands on an engine in the
// wrong role at that instant (checkJournal); the moves are journaled.
func TestHotSwapUnderLoad(t *testing.T) {
	var steps []core.ScheduleStep
	for i, p := range []int{1, 3, 2, 1, 3, 2, 1, 3} {
		steps = append(steps, core.ScheduleStep{At: event.Time(i+1) * 150 * event.Millisecond, Prefill: p})
	}
	ctrl := &core.Scheduled{Arm: "swap-test", Steps: steps}
	scale := 0.2
	r := startRig(t, rigOpts{n: 4, ctrl: ctrl, stub: stub.Options{TimeScale: &scale}})
	c := client(r)
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	sem := make(chan struct{}, 32)
	for i := 0; i < 200; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			s := c.Completions.NewStreaming(context.Background(), openai.CompletionNewParams{Model: "stub",
				Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String(strings.Repeat("word ", 50+i%200))},
				MaxTokens: openai.Int(int64(4 + i%12))}, option.WithJSONSet("min_tokens", 4+i%12))
			n := 0
			for s.Next() {
				n++
			}
			if err := s.Err(); err != nil {
				errs <- fmt.Errorf("request %d: %w", i, err)
			}
		}(i)
		time.Sleep(8 * time.Millisecond) // 200 sends over at least 1.6 s: every step falls inside the load
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Read /state once the schedule's last step is past.
	var st State
	for {
		st, _ = r.router.State()
		if st.NowSeconds > 1.3 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.stop()
	rows := checkJournal(t, r.jr.records())
	if len(rows) != 200 {
		t.Fatalf("%d rows: expected 200", len(rows))
	}
	if o := outcomes(rows); o["finish/stop"] != 200 {
		t.Fatalf("outcomes %v: expected 200 natural finishes", o)
	}
	moves := 0
	for _, rec := range r.jr.records() {
		if rec.Kind == event.KindRoleMove && !rec.Opening() {
			moves++
		}
	}
	if moves < 6 || st.Moves != moves {
		t.Fatalf("%d moves journaled, %d in /state: expected the schedule's moves (at least 6)", moves, st.Moves)
	}
}

// Admission: beyond MaxInFlight a request is refused at once with 429,
// Retry-After and an OpenAI error body; the refusal is journaled with its
// cause.
func TestRefusal(t *testing.T) {
	scale := 1.0
	r := startRig(t, rigOpts{stub: stub.Options{TimeScale: &scale}, configure: func(c *Config) { c.MaxInFlight = 1 }})
	done := make(chan struct{})
	go func() {
		defer close(done)
		// About 40 decode steps of 2 ms: long enough to hold the slot.
		resp := post(t, r, "/v1/completions", `{"model":"stub","prompt":"slow","max_tokens":60,"min_tokens":60,"stream":true}`, nil)
		io.Copy(io.Discard, resp.Body)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, _ := r.router.State()
		if st.Counts.InFlight == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	resp := post(t, r, "/v1/completions", `{"model":"stub","prompt":"refused","max_tokens":3}`, nil)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d, Retry-After %q: expected 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	<-done
	r.stop()
	o := outcomes(checkJournal(t, r.jr.records()))
	if o["refuse/overload"] != 1 || o["finish/stop"] != 1 {
		t.Fatalf("outcomes %v: expected one refusal (overload) and one finish", o)
	}
}

// A client that goes away mid-stream cancels both legs upstream; the
// request is journaled as cancelled, and the decode engine frees it.
func TestClientDisconnect(t *testing.T) {
	scale := 1.0
	r := startRig(t, rigOpts{stub: stub.Options{TimeScale: &scale}})
	ctx, cancel := context.WithCancel(context.Background())
	q, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.url+"/v1/completions",
		strings.NewReader(`{"model":"stub","prompt":"long answer","max_tokens":2000,"min_tokens":2000,"stream":true}`))
	resp, err := http.DefaultClient.Do(q)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	if _, err := resp.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		g := r.stubs.Servers()[1].Gauges()
		st, _ := r.router.State()
		if (g.Running == 0 && g.Waiting == 0 && st.Counts.InFlight == 0) || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if g := r.stubs.Servers()[1].Gauges(); g.Running != 0 {
		t.Fatalf("the decode engine still runs %d streams after the client left", g.Running)
	}
	r.stop()
	o := outcomes(checkJournal(t, r.jr.records()))
	if o["finish/cancel"] != 1 {
		t.Fatalf("outcomes %v: expected one cancelled request", o)
	}
}

// A decode stream that breaks after some tokens ends the client's stream
// with an error event (never a silent truncation), journaled as a failure
// with its cause.
func TestStreamBrokenMidway(t *testing.T) {
	r := startRig(t, rigOpts{stub: stub.Options{TimeScale: zero()}})
	r.stubs.Servers()[1].SetFaults(stub.Faults{BreakAfter: 3})
	c := client(r)
	s := c.Completions.NewStreaming(context.Background(), openai.CompletionNewParams{Model: "stub",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("break me")}, MaxTokens: openai.Int(20)})
	n := 0
	for s.Next() {
		n++
	}
	if s.Err() == nil {
		t.Fatalf("the client saw %d chunks and no error: a broken stream must not look whole", n)
	}
	r.stop()
	rows := checkJournal(t, r.jr.records())
	if len(rows) != 1 || rows[0].Terminal != event.KindFail || rows[0].Cause != event.CauseBadGateway || rows[0].OutputTokens != 3 {
		t.Fatalf("row %+v: expected a bad_gateway failure after 3 tokens", rows)
	}
}

// A missing KV handoff is never silent: with the fail policy the request
// fails 502 (cause no_handoff); with recompute it succeeds, the decode
// engine recomputing, and the miss is journaled and counted.
func TestMissingHandoff(t *testing.T) {
	for _, policy := range []HandoffPolicy{HandoffFail, HandoffRecompute} {
		t.Run(string(policy), func(t *testing.T) {
			r := startRig(t, rigOpts{stub: stub.Options{TimeScale: zero()}, configure: func(c *Config) { c.Handoff = policy }})
			r.stubs.Servers()[0].SetFaults(stub.Faults{NoHandoff: true})
			resp := post(t, r, "/v1/completions", `{"model":"stub","prompt":"no kv","max_tokens":4}`, nil)
			io.Copy(io.Discard, resp.Body)
			st, _ := r.router.State()
			r.stop()
			recs := r.jr.records()
			rows := checkJournal(t, recs)
			if st.Counts.NoHandoff != 1 {
				t.Errorf("no_handoff count %d, expected 1", st.Counts.NoHandoff)
			}
			switch policy {
			case HandoffFail:
				if resp.StatusCode != http.StatusBadGateway || rows[0].Cause != event.CauseNoHandoff {
					t.Fatalf("status %d, row %+v: expected 502 and a no_handoff failure", resp.StatusCode, rows[0])
				}
			case HandoffRecompute:
				kv := 0
				for _, rec := range recs {
					if rec.Kind == event.KindKVStart && rec.Cause == event.CauseNoHandoff {
						kv++
					}
				}
				if resp.StatusCode != 200 || rows[0].Terminal != event.KindFinish || kv != 1 {
					t.Fatalf("status %d, row %+v, %d no-handoff records: expected a finish with the miss journaled", resp.StatusCode, rows[0], kv)
				}
			}
		})
	}
}

// An engine that crashes: each request whose leg it drops is re-placed
// once on another engine (a retry decision in the journal), so every
// client gets its answer; after three failures its breaker opens, it is
// marked down (a health record) and gets no more placements.
func TestEngineCrash(t *testing.T) {
	r := startRig(t, rigOpts{n: 3, arm: "aggregated", stub: stub.Options{TimeScale: zero()}})
	r.stubs.Servers()[0].SetFaults(stub.Faults{CrashAfter: 1})
	codes := map[int]int{}
	for i := 0; i < 30; i++ {
		resp := post(t, r, "/v1/completions", `{"model":"stub","prompt":"x","max_tokens":3}`, nil)
		io.Copy(io.Discard, resp.Body)
		codes[resp.StatusCode]++
	}
	st, _ := r.router.State()
	r.stop()
	recs := r.jr.records()
	rows := checkJournal(t, recs)
	down, retries := 0, 0
	for _, rec := range recs {
		if rec.Kind == event.KindHealth && rec.Cause == event.CauseEngineDown && rec.Inst == 0 {
			down++
		}
		if rec.Kind == event.KindDecision && strings.Contains(rec.Text, `"retry"`) {
			retries++
		}
	}
	o := outcomes(rows)
	if down != 1 || !st.Engines[0].Down {
		t.Fatalf("engine 0: %d down records, /state down %v: expected it ejected once", down, st.Engines[0].Down)
	}
	// Three failures open the breaker; a request placed while the owner
	// has not yet heard of it may fail (and be re-placed) too.
	if codes[200] != 30 || o["finish/length"] != 30 || retries < 1 || retries > 6 {
		t.Fatalf("codes %v, outcomes %v, %d retries: expected every request answered, 3 (or a few more) of them re-placed", codes, o, retries)
	}
}

// The queue admission gate in the router: a prompt whose own prefill
// breaks the TTFT budget gets 429 (cause prompt, no Retry-After); under a
// burst, requests wait in the admission queue (journaled, with a queue
// wait) and those whose deadline passes get 503 with Retry-After
// (expired, queue_timeout); the rest finish.
func TestAdmissionQueue(t *testing.T) {
	scale := 1.0
	r := startRig(t, rigOpts{stub: stub.Options{TimeScale: &scale}, configure: func(c *Config) {
		c.Fleet.SLO.TTFT = "200ms" // budget: 0.2 s of priced prefill
		c.Admission = core.Admission{Mode: core.AdmitQueue, Deadline: 150 * event.Millisecond}
	}})
	long := strings.Repeat("abcd", 30000) // 30,000 tokens: 0.3 s of prefill alone
	resp := post(t, r, "/v1/completions", `{"model":"stub","prompt":"`+long+`","max_tokens":2}`, nil)
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "" {
		t.Fatalf("status %d, Retry-After %q: expected 429 without Retry-After for a prompt no queue drains", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	mid := strings.Repeat("abcd", 6000) // 6,000 tokens: 0.06 s each
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for i := 0; i < 30; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := post(t, r, "/v1/completions", `{"model":"stub","prompt":"`+mid+`","max_tokens":2,"min_tokens":2}`, nil)
			io.Copy(io.Discard, resp.Body)
			mu.Lock()
			codes[resp.StatusCode]++
			mu.Unlock()
			if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
				t.Error("503 without Retry-After")
			}
		}()
	}
	wg.Wait()
	if st, _ := r.router.State(); st.Counts.Queued != 0 || st.Counts.InFlight != 0 {
		t.Errorf("after the burst /state counts %+v: expected nothing queued or in flight", st.Counts)
	}
	r.stop()
	recs := r.jr.records()
	rows := checkJournal(t, recs)
	queued := 0
	for _, rec := range recs {
		if rec.Kind == event.KindQueue {
			queued++
		}
	}
	waited := 0
	for _, row := range rows {
		if row.Admit != event.Never && row.Admit > row.Arrival {
			waited++
		}
	}
	o := outcomes(rows)
	if o["refuse/prompt"] != 1 || o["expire/queue_timeout"] != codes[503] || codes[503] == 0 || codes[200] == 0 ||
		o["finish/stop"] != codes[200] || queued == 0 || waited == 0 {
		t.Fatalf("codes %v, outcomes %v, %d queue records, %d requests admitted after waiting", codes, o, queued, waited)
	}
}

// Timeouts: a decode engine that stalls before its first token fails the
// request with 504 (cause timeout) once the first-token timeout passes; a
// stream that outlives the request's own deadline ends with an error
// event, journaled as a timeout.
func TestTimeouts(t *testing.T) {
	r := startRig(t, rigOpts{stub: stub.Options{TimeScale: zero()}, configure: func(c *Config) {
		c.FirstTokenTimeout = 200 * time.Millisecond
	}})
	r.stubs.Servers()[1].SetFaults(stub.Faults{Stall: true})
	resp := post(t, r, "/v1/completions", `{"model":"stub","prompt":"stall","max_tokens":4,"stream":true}`, nil)
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("status %d: expected 504 when the decode engine never answers", resp.StatusCode)
	}
	r.stop()
	rows := checkJournal(t, r.jr.records())
	if len(rows) != 1 || rows[0].Terminal != event.KindFail || rows[0].Cause != event.CauseTimeout {
		t.Fatalf("rows %+v: expected one timeout failure", rows)
	}

	scale := 1.0
	r = startRig(t, rigOpts{stub: stub.Options{TimeScale: &scale}, configure: func(c *Config) {
		c.RequestTimeout = 300 * time.Millisecond
	}})
	c := client(r)
	s := c.Completions.NewStreaming(context.Background(), openai.CompletionNewParams{Model: "stub",
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("a long answer")},
		MaxTokens: openai.Int(1000)}, option.WithJSONSet("min_tokens", 1000))
	for s.Next() {
	}
	if s.Err() == nil {
		t.Fatal("a stream cut by the request deadline looked whole to the client")
	}
	r.stop()
	rows = checkJournal(t, r.jr.records())
	if len(rows) != 1 || rows[0].Terminal != event.KindFail || rows[0].Cause != event.CauseTimeout || rows[0].OutputTokens == 0 {
		t.Fatalf("rows %+v: expected a timeout failure after some tokens", rows)
	}
}

// GET /v1/models names the configured model as the engines describe it
// (its max_model_len among the rest, as vLLM lists it), or relays the
// engines' list when the router accepts any model; with every engine
// down it still names the configured model.
func TestModels(t *testing.T) {
	for _, model := range []string{"stub", ""} {
		r := startRig(t, rigOpts{stub: stub.Options{TimeScale: zero()}, configure: func(c *Config) { c.Model = model }})
		resp, err := http.Get(r.url + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		var list struct {
			Data []struct {
				ID          string
				MaxModelLen int `json:"max_model_len"`
			} `json:"data"`
		}
		json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		if resp.StatusCode != 200 || len(list.Data) != 1 || list.Data[0].ID != "stub" || list.Data[0].MaxModelLen != 32768 {
			t.Fatalf("model %q: status %d, list %+v: expected stub with the engines' max_model_len", model, resp.StatusCode, list)
		}
		// A body that names no model is served, as vLLM serves it.
		resp = post(t, r, "/v1/completions", `{"prompt":"no model named","max_tokens":2}`, nil)
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("model %q: a body without a model got %d (%s), expected 200", model, resp.StatusCode, b)
		}
		if model == "" {
			continue
		}
		for _, s := range r.stubs.Servers() {
			s.Kill()
		}
		resp, err = http.Get(r.url + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(b, []byte(`"id":"stub"`)) || !bytes.Contains(b, []byte(`"max_model_len":32768`)) {
			t.Errorf("every engine down: %d %s: expected the configured model, with the context last learnt", resp.StatusCode, b)
		}
	}
}

// A non-streamed answer that takes longer than the first-token timeout is
// served whole: vLLM sends its headers with its last token, so only the
// request's deadline bounds it (on a decode leg and on one ordinary
// request alike).
func TestNonStreamedOutlastsFirstTokenTimeout(t *testing.T) {
	scale := 1.0
	for _, arm := range []string{"static:1P1D", "aggregated"} {
		r := startRig(t, rigOpts{arm: arm, stub: stub.Options{TimeScale: &scale}, configure: func(c *Config) {
			c.FirstTokenTimeout = 50 * time.Millisecond
		}})
		start := time.Now()
		resp := post(t, r, "/v1/completions", `{"model":"stub","prompt":"a long answer","max_tokens":100,"min_tokens":100}`, nil)
		var body struct {
			Usage struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		err := json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		took := time.Since(start)
		if resp.StatusCode != http.StatusOK || err != nil || body.Usage.CompletionTokens != 100 {
			t.Fatalf("%s: status %d, err %v, %d tokens: expected the whole 100-token answer", arm, resp.StatusCode, err, body.Usage.CompletionTokens)
		}
		r.stop()
		rows := checkJournal(t, r.jr.records())
		if len(rows) != 1 || rows[0].Terminal != event.KindFinish || rows[0].OutputTokens != 100 {
			t.Fatalf("%s: rows %+v: expected one finished 100-token request", arm, rows)
		}
		if took < 50*time.Millisecond {
			t.Logf("%s: the answer took %v, under the first-token timeout: the test did not exercise it", arm, took)
		}
	}
}

// With Tokenize, the prompt's length is the count an engine's /tokenize
// gives (its tokenizer, not the estimate): the journal's prompt tokens
// say so. The engine that answered is asked again (sticky); one that fails
// leaves that request on the estimate and sends the next to the next
// engine up.
func TestTokenize(t *testing.T) {
	var asked [2]atomic.Int64
	failing := [2]bool{true, false} // e0's /tokenize answers 500
	r := startRig(t, rigOpts{stub: stub.Options{TimeScale: zero()}, configure: func(c *Config) {
		c.Tokenize = true
		for i := range c.URLs {
			interpose(t, c, i, func(w http.ResponseWriter, q *http.Request, b []byte, engine http.Handler) {
				if q.URL.Path != "/tokenize" {
					engine.ServeHTTP(w, q)
					return
				}
				asked[i].Add(1)
				var body map[string]any
				json.Unmarshal(b, &body)
				if failing[i] || body["prompt"] == nil || body["model"] != "stub" {
					http.Error(w, "no", http.StatusInternalServerError)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprint(w, `{"count":777,"max_model_len":32768,"tokens":[]}`)
			})
		}
	}})
	prompt := "eight bytes of text, about ten tokens by the estimate"
	for range 3 {
		resp := post(t, r, "/v1/completions", `{"model":"stub","prompt":"`+prompt+`","max_tokens":2}`, nil)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	r.stop()
	rows := checkJournal(t, r.jr.records())
	est := int64(math.Round(float64(len(prompt)) / api.CharsPerToken))
	var got []int64
	for _, row := range rows {
		got = append(got, row.InputTokens)
	}
	if len(got) != 3 || got[0] != est || got[1] != 777 || got[2] != 777 {
		t.Fatalf("prompt tokens %v: expected the estimate %d (e0 failed), then 777 twice (e1, sticky)", got, est)
	}
	if asked[0].Load() != 1 || asked[1].Load() != 2 {
		t.Fatalf("/tokenize asked e0 %d, e1 %d times: expected 1 and 2", asked[0].Load(), asked[1].Load())
	}
}

// A decode stream that reports an error event before any token (vLLM's
// way, once its stream has begun, of failing a request: a KV pull, say)
// is a failed leg, not the client's answer: the client has no status
// yet, so the request is re-placed with a fresh prefill and finishes,
// and the client sees one whole stream.
func TestErrorEventBeforeFirstTokenIsRetried(t *testing.T) {
	var failed atomic.Int64
	r := startRig(t, rigOpts{stub: stub.Options{TimeScale: zero()}, configure: func(c *Config) {
		interpose(t, c, 1, func(w http.ResponseWriter, q *http.Request, body []byte, engine http.Handler) { // the decode engine of 1P1D
			if bytes.Contains(body, []byte("do_remote_prefill")) && failed.Add(1) == 1 {
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(http.StatusOK)
				fmt.Fprint(w, "data: {\"error\":{\"object\":\"error\",\"message\":\"KV load failed\",\"type\":\"InternalServerError\",\"code\":500}}\n\n")
				return
			}
			engine.ServeHTTP(w, q)
		})
	}})
	resp := post(t, r, "/v1/chat/completions", `{"model":"stub","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"min_tokens":5,"stream":true}`, nil)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || bytes.Contains(b, []byte(`"error"`)) || !bytes.Contains(b, []byte("[DONE]")) {
		t.Fatalf("status %d, body %s: expected one whole stream after the retry", resp.StatusCode, b)
	}
	if i, j := bytes.Index(b, []byte(`"role":"assistant"`)), bytes.Index(b, []byte(`"content":" `)); i < 0 || j < 0 || i > j {
		t.Fatalf("body %s: expected the role chunk before the first token", b)
	}
	r.stop()
	recs := r.jr.records()
	retries := 0
	for _, rec := range recs {
		if rec.Kind == event.KindDecision && strings.Contains(rec.Text, `"retry"`) {
			retries++
		}
	}
	rows := checkJournal(t, recs)
	if retries != 1 || len(rows) != 1 || rows[0].Terminal != event.KindFinish || rows[0].OutputTokens != 5 {
		t.Fatalf("retries %d, rows %+v: expected one retry and one finished 5-token request", retries, rows)
	}
}

// A streamed decode leg always asks the engine for usage, and the journal
// takes the engine's count: a chunk may carry several tokens (vLLM's
// detokenizer and stream_interval do this), so counting chunks would
// undercount. The usage chunk reaches the client only when it asked.
func TestStreamUsageCorrectsTheCount(t *testing.T) {
	var asked atomic.Int64
	r := startRig(t, rigOpts{stub: stub.Options{TimeScale: zero()}, configure: func(c *Config) {
		interpose(t, c, 1, func(w http.ResponseWriter, q *http.Request, body []byte, engine http.Handler) { // the decode engine of 1P1D
			if !bytes.Contains(body, []byte("do_remote_prefill")) {
				engine.ServeHTTP(w, q)
				return
			}
			// Three tokens in two chunks, then usage when asked for.
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			fmt.Fprint(w, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n")
			fmt.Fprint(w, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" one two\"},\"finish_reason\":null}]}\n\n")
			fmt.Fprint(w, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" three\"},\"finish_reason\":\"length\"}]}\n\n")
			var b struct {
				StreamOptions *struct {
					IncludeUsage bool `json:"include_usage"`
				} `json:"stream_options"`
			}
			if json.Unmarshal(body, &b) == nil && b.StreamOptions != nil && b.StreamOptions.IncludeUsage {
				asked.Add(1)
				fmt.Fprint(w, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":3,\"total_tokens\":4}}\n\n")
			}
			fmt.Fprint(w, "data: [DONE]\n\n")
		})
	}})
	for _, opts := range []string{``, `,"stream_options":{"include_usage":true}`} {
		resp := post(t, r, "/v1/chat/completions", `{"model":"stub","messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stream":true`+opts+`}`, nil)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(b, []byte("[DONE]")) {
			t.Fatalf("%q: status %d, body %s", opts, resp.StatusCode, b)
		}
		if got, want := bytes.Count(b, []byte(`"usage":{`)), min(len(opts), 1); got != want {
			t.Errorf("%q: %d usage chunks reached the client, expected %d:\n%s", opts, got, want, b)
		}
	}
	r.stop()
	rows := checkJournal(t, r.jr.records())
	if asked.Load() != 2 || len(rows) != 2 || rows[0].OutputTokens != 3 || rows[1].OutputTokens != 3 {
		t.Fatalf("usage asked %d times, rows %+v: expected usage asked on both decode legs and 3 tokens each", asked.Load(), rows)
	}
}

// Two instances naming one engine url are refused: the router would
// count one engine twice (its load, its roles, its breaker).
func TestNewRefusesDuplicateURLs(t *testing.T) {
	spec, err := fleet.Load("demo")
	if err != nil {
		t.Fatal(err)
	}
	ctrl, _ := core.NewController("static:4P4D", spec.Size())
	urls := make([]string, spec.Size())
	for i := range urls {
		urls[i] = fmt.Sprintf("http://127.0.0.1:%d", 18100+i)
	}
	urls[5] = urls[2] + "/"
	if _, err := New(Config{Fleet: spec, URLs: urls, Controller: ctrl}); err == nil || !strings.Contains(err.Error(), "is also e2's: expected one engine per url") {
		t.Fatalf("duplicate url: %v", err)
	}
}

// An engine's 4xx reaches the client with the engine's status and
// message, whichever of vLLM's error shapes it came in (flat before
// 0.10.1, nested with an integer code after).
func TestEngineErrorShapes(t *testing.T) {
	const msg = "This model's maximum context length is 100 tokens."
	for _, body := range []string{
		`{"object":"error","message":"` + msg + `","type":"BadRequestError","param":null,"code":400}`,
		`{"error":{"message":"` + msg + `","type":"BadRequestError","param":null,"code":400}}`,
	} {
		r := startRig(t, rigOpts{stub: stub.Options{TimeScale: zero()}, configure: func(c *Config) {
			interpose(t, c, 0, func(w http.ResponseWriter, _ *http.Request, _ []byte, _ http.Handler) { // the prefill engine of 1P1D
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				fmt.Fprint(w, body)
			})
		}})
		resp := post(t, r, "/v1/completions", `{"model":"stub","prompt":"hi","max_tokens":5}`, nil)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		e := api.ParseError(resp.StatusCode, b)
		if resp.StatusCode != 400 || e == nil || e.Message != msg {
			t.Errorf("engine body %s: client got %d %s", body, resp.StatusCode, b)
		}
		r.stop()
	}
}

// A chat request that sets no limit is served as vLLM serves it (its
// min_tokens is not held to 16), and journaled with the rest of the
// context as its want when an engine's /tokenize said the context length,
// else with want 0 (unknown).
func TestChatWithoutLimit(t *testing.T) {
	for _, tokenize := range []bool{true, false} {
		r := startRig(t, rigOpts{stub: stub.Options{TimeScale: zero(), MaxModelLen: 40}, configure: func(c *Config) { c.Tokenize = tokenize }})
		resp := post(t, r, "/v1/chat/completions", `{"model":"stub","messages":[{"role":"user","content":"abcdefgh"}],"min_tokens":30}`, nil)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("tokenize %v: status %d %s", tokenize, resp.StatusCode, b)
		}
		r.stop()
		rows := checkJournal(t, r.jr.records())
		want := int64(0)
		if tokenize {
			want = 38
		}
		if len(rows) != 1 || rows[0].OutputTokens != 38 || rows[0].WantOutput != want || rows[0].Cause != event.CauseLength {
			t.Fatalf("tokenize %v: rows %+v: expected 38 tokens, want %d, cause length", tokenize, rows, want)
		}
	}
}

// vLLM before late 2025 returns no handoff when the prefill's one token
// was an end of sequence (finish "stop"): under the fail policy that is
// not a failure; the decode leg runs without a handoff and the miss is
// journaled. A missing handoff after a "length" stop still fails.
func TestNoHandoffAfterEOS(t *testing.T) {
	for _, finish := range []string{"stop", "length"} {
		r := startRig(t, rigOpts{stub: stub.Options{TimeScale: zero()}, configure: func(c *Config) {
			interpose(t, c, 0, func(w http.ResponseWriter, q *http.Request, _ []byte, engine http.Handler) { // the prefill engine of 1P1D
				rec := httptest.NewRecorder()
				engine.ServeHTTP(rec, q)
				var body map[string]any
				if json.Unmarshal(rec.Body.Bytes(), &body) == nil && body["kv_transfer_params"] != nil {
					body["kv_transfer_params"] = nil
					body["choices"].([]any)[0].(map[string]any)["finish_reason"] = finish
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(rec.Code)
				json.NewEncoder(w).Encode(body)
			})
		}})
		resp := post(t, r, "/v1/completions", `{"model":"stub","prompt":"hi","max_tokens":5,"stream":true}`, nil)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		r.stop()
		rows := checkJournal(t, r.jr.records())
		if finish == "stop" && (resp.StatusCode != 200 || len(rows) != 1 || rows[0].Terminal != event.KindFinish || rows[0].OutputTokens != 5) {
			t.Errorf("EOS and no handoff: status %d, rows %+v: expected a finished 5-token answer", resp.StatusCode, rows)
		}
		if finish == "length" && (resp.StatusCode != 502 || len(rows) != 1 || rows[0].Cause != event.CauseNoHandoff) {
			t.Errorf("no handoff after length: status %d, rows %+v: expected 502, no_handoff", resp.StatusCode, rows)
		}
	}
}

// A router whose high-availability lease lapsed (the fence shut) says so:
// /ready answers 503 and every request 503, both with code standby, so
// that load balancers and clients move to the router that leads.
func TestFencedRouterSaysStandby(t *testing.T) {
	var fenced atomic.Bool
	r := startRig(t, rigOpts{stub: stub.Options{TimeScale: zero()}, configure: func(c *Config) {
		c.Fence = func() bool { return !fenced.Load() }
	}})
	code := func(path, body string) (int, string) {
		var resp *http.Response
		if body == "" {
			var err error
			if resp, err = http.Get(r.url + path); err != nil {
				t.Fatal(err)
			}
		} else {
			resp = post(t, r, path, body, nil)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		e := api.ParseError(resp.StatusCode, b)
		if e == nil {
			return resp.StatusCode, ""
		}
		return resp.StatusCode, e.Code
	}
	const req = `{"model":"stub","prompt":"hi","max_tokens":3}`
	if s, _ := code("/ready", ""); s != 200 {
		t.Fatalf("/ready while leading: %d", s)
	}
	if s, _ := code("/v1/completions", req); s != 200 {
		t.Fatalf("a request while leading: %d", s)
	}
	fenced.Store(true)
	for _, c := range []struct{ path, body string }{{"/ready", ""}, {"/v1/completions", req}} {
		if s, c2 := code(c.path, c.body); s != 503 || c2 != "standby" {
			t.Errorf("%s once fenced: %d, code %q: want 503, standby", c.path, s, c2)
		}
	}
}

// A streamed request one engine serves whole (aggregated serving, or an
// answer of one token) waits for its first token through the engine's
// queue and the whole prefill: the prefill timeout bounds that wait, not
// the first-token timeout, which bounds a decode leg whose prompt is
// already prefilled. A stalled engine still fails it, at the prefill
// timeout, with 504.
func TestStreamedSingleWaitsForPrefill(t *testing.T) {
	for _, c := range []struct {
		arm, body string
		recompute bool // the prefill returns no handoff: the decode engine prefills again
	}{
		{"aggregated", `{"model":"stub","prompt":"queued behind a long prefill","max_tokens":4,"stream":true}`, false},
		{"static:1P1D", `{"model":"stub","prompt":"one token","max_tokens":1,"stream":true}`, false},
		{"static:1P1D", `{"model":"stub","prompt":"recomputed","max_tokens":4,"stream":true}`, true},
	} {
		var faults stub.Faults
		if c.recompute {
			faults.NoHandoff = true
		}
		r := startRig(t, rigOpts{arm: c.arm, stub: stub.Options{TimeScale: zero(), Faults: faults}, configure: func(cfg *Config) {
			if c.recompute {
				cfg.Handoff = HandoffRecompute
			}
			cfg.FirstTokenTimeout = 50 * time.Millisecond
			cfg.PrefillTimeout = 5 * time.Second
			for i := range cfg.URLs {
				interpose(t, cfg, i, func(w http.ResponseWriter, q *http.Request, b []byte, engine http.Handler) {
					if strings.HasPrefix(q.URL.Path, "/v1/") {
						time.Sleep(300 * time.Millisecond) // the engine's queue and prefill
					}
					engine.ServeHTTP(w, q)
				})
			}
		}})
		resp := post(t, r, "/v1/completions", c.body, nil)
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "[DONE]") {
			t.Fatalf("%s: status %d, %s: expected the whole stream after a prefill longer than the first-token timeout", c.arm, resp.StatusCode, b)
		}
		r.stop()
		if rows := checkJournal(t, r.jr.records()); len(rows) != 1 || rows[0].Terminal != event.KindFinish {
			t.Fatalf("%s: rows %+v: expected one finished request", c.arm, rows)
		}
	}

	r := startRig(t, rigOpts{arm: "aggregated", stub: stub.Options{TimeScale: zero()}, configure: func(c *Config) {
		c.FirstTokenTimeout = 50 * time.Millisecond
		c.PrefillTimeout = 300 * time.Millisecond
	}})
	for _, s := range r.stubs.Servers() {
		s.SetFaults(stub.Faults{Stall: true})
	}
	resp := post(t, r, "/v1/completions", `{"model":"stub","prompt":"stall","max_tokens":4,"stream":true}`, nil)
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("status %d: expected 504 when the only engine never answers", resp.StatusCode)
	}
	r.stop()
	if rows := checkJournal(t, r.jr.records()); len(rows) != 1 || rows[0].Terminal != event.KindFail || rows[0].Cause != event.CauseTimeout {
		t.Fatalf("rows %+v: expected one timeout failure", rows)
	}
}

// The router stopping with requests in flight (serve's drain deadline
// passed) ends each once in the journal, fail unavailable, and tells its
// client: a stream ends with an error event saying the router stopped
// (never a silent cut), an answer not yet begun gets 503.
func TestStopWithRequestsInFlight(t *testing.T) {
	scale := 1.0
	r := startRig(t, rigOpts{stub: stub.Options{TimeScale: &scale}})
	streamed, err := http.Post(r.url+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"stub","prompt":"long answer","max_tokens":2000,"min_tokens":2000,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := streamed.Body.Read(make([]byte, 64)); err != nil {
		t.Fatal(err) // the stream has begun
	}
	whole := make(chan *http.Response, 1)
	go func() {
		resp, err := http.Post(r.url+"/v1/completions", "application/json",
			strings.NewReader(`{"model":"stub","prompt":"long answer, whole","max_tokens":2000,"min_tokens":2000}`))
		if err != nil {
			t.Error(err)
		}
		whole <- resp
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if st, _ := r.router.State(); st.Counts.InFlight == 2 || time.Now().After(deadline) {
			break
		}
	}
	r.cancel() // the owner stops, as serve's does after its drain deadline
	rest, _ := io.ReadAll(streamed.Body)
	streamed.Body.Close()
	if !strings.HasSuffix(string(rest), `"param":null,"type":"service_unavailable_error"}}`+"\n\ndata: [DONE]\n\n") ||
		!strings.Contains(string(rest), "the router stopped before this request's end") {
		t.Fatalf("the stream's end: %q: expected an error event saying the router stopped, then [DONE] (as vLLM ends a stream it failed)", rest[max(0, len(rest)-300):])
	}
	resp := <-whole
	if resp == nil {
		t.FailNow()
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "router stopped") || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("the answer not yet begun: %d %s: expected 503 with Retry-After", resp.StatusCode, b)
	}
	if err := <-r.ran; err != nil {
		t.Fatal(err)
	}
	r.cancel = nil
	r.srv.Close()
	r.stubs.Close()
	if o := outcomes(checkJournal(t, r.jr.records())); o["fail/unavailable"] != 2 || len(o) != 1 {
		t.Fatalf("outcomes %v: expected both requests fail unavailable", o)
	}
}

// An output limit that cannot fit the engines' context is refused at once
// with 400, as vLLM refuses it, not after a whole prefill when the decode
// engine answers 400 (the router reads max_model_len from the engines'
// /v1/models). With an estimated prompt only a limit that fills the
// context alone is refused; a prompt of token ids counts exactly.
func TestOverflowRefusedBeforePrefill(t *testing.T) {
	r := startRig(t, rigOpts{stub: stub.Options{TimeScale: zero(), MaxModelLen: 4096}})
	for deadline := time.Now().Add(5 * time.Second); r.router.contextLen() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the router never read the engines' max_model_len")
		}
	}
	if got := r.router.contextLen(); got != 4096 {
		t.Fatalf("context %d, expected the stubs' 4096", got)
	}
	ids := strings.TrimSuffix(strings.Repeat("7,", 100), ",")
	long := strings.TrimSuffix(strings.Repeat("7,", 4090), ",")
	tooLong := strings.TrimSuffix(strings.Repeat("7,", 5000), ",")
	for _, c := range []struct{ body, param, want string }{
		{`{"model":"stub","messages":[{"role":"user","content":"hi"}],"max_tokens":10,"max_completion_tokens":5000}`, "max_completion_tokens", "under 4096"},
		// No limit on completions: vLLM's 16 tokens, past the context here.
		{`{"model":"stub","prompt":[` + long + `]}`, "max_tokens", "16 (unset: vLLM's default): expected at most 6: the model's context is 4096 tokens and the prompt has 4090"},
		{`{"model":"stub","prompt":[` + tooLong + `],"max_tokens":1}`, "prompt", "prompt: 5000 tokens: expected fewer than the model's context, 4096 tokens"},
		{`{"model":"stub","prompt":"hello","max_tokens":4096}`, "max_tokens", "under 4096"},
		{`{"model":"stub","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":5000}`, "max_completion_tokens", "under 4096"},
		{`{"model":"stub","prompt":[` + ids + `],"max_tokens":4000}`, "max_tokens", "at most 3996: the model's context is 4096 tokens and the prompt has 100"},
	} {
		path := "/v1/completions"
		if strings.Contains(c.body, "messages") {
			path = "/v1/chat/completions"
		}
		code, body := statusJSON(t, post(t, r, path, c.body, nil), nil)
		e, _ := body["error"].(map[string]any)
		if code != 400 || e == nil || e["param"] != c.param || !strings.Contains(fmt.Sprint(e["message"]), c.want) {
			t.Errorf("%s: %d %v: expected 400 on %s with %q", c.body, code, body, c.param, c.want)
		}
	}
	if code, body := statusJSON(t, post(t, r, "/v1/completions", `{"model":"stub","prompt":[`+ids+`],"max_tokens":3996}`, nil), nil); code != 200 {
		t.Fatalf("a request that fits: %d %v", code, body)
	}
	r.stop()
	if rows := checkJournal(t, r.jr.records()); len(rows) != 1 || rows[0].Terminal != event.KindFinish {
		t.Fatalf("rows %+v: expected only the request that fits, finished (a refused body is never a request)", rows)
	}
}

// A completions route asked with another method is a 405 naming POST (as
// vLLM answers), not a 404 that says the route does not exist.
func TestWrongMethod(t *testing.T) {
	r := startRig(t, rigOpts{stub: stub.Options{TimeScale: zero()}})
	for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
		resp, err := http.Get(r.url + path)
		code, body := statusJSON(t, resp, err)
		if code != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" || body["error"] == nil {
			t.Errorf("GET %s: %d %v, Allow %q: expected 405 with Allow: POST", path, code, body, resp.Header.Get("Allow"))
		}
	}
	resp, err := http.Get(r.url + "/v1/nothing")
	if code, _ := statusJSON(t, resp, err); code != http.StatusNotFound {
		t.Errorf("GET /v1/nothing: %d, expected 404", code)
	}
}

// An engine's answer over the router's bound (a long prompt's logprobs,
// echoed, run to tens of MiB) fails that request with 502
// answer_too_large, streamed or not, before or after its first token, and
// never silently truncated; it is no fault of the engine: no retry, and
// however many such answers, the engine is not ejected.
func TestAnswerTooLarge(t *testing.T) {
	defer func(n int) { maxLegBody = n }(maxLegBody)
	maxLegBody = 64 << 10
	huge := strings.Repeat("x", 100<<10)
	chunk := func(text string) string {
		return `data: {"id":"cmpl-1","object":"text_completion","model":"stub","choices":[{"index":0,"text":"` + text + `","finish_reason":null}]}` + "\n\n"
	}
	r := startRig(t, rigOpts{stub: stub.Options{TimeScale: zero()}, configure: func(c *Config) {
		interpose(t, c, 1, func(w http.ResponseWriter, q *http.Request, body []byte, engine http.Handler) { // the decode engine of 1P1D
			switch {
			case bytes.Contains(body, []byte(`"whole"`)):
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"id":"cmpl-1","object":"text_completion","model":"stub","choices":[{"index":0,"text":"`+huge+`","finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`)
			case bytes.Contains(body, []byte(`"first"`)):
				api.SetSSEHeaders(w.Header())
				io.WriteString(w, chunk(huge))
			default: // "later": a token, then the big event
				api.SetSSEHeaders(w.Header())
				io.WriteString(w, chunk("a"))
				w.(http.Flusher).Flush()
				io.WriteString(w, chunk(huge))
			}
		})
	}})
	for _, c := range []struct{ prompt, stream string }{{"whole", "false"}, {"first", "true"}, {"first", "true"}, {"whole", "false"}, {"later", "true"}} {
		resp := post(t, r, "/v1/completions", `{"model":"stub","prompt":"`+c.prompt+`","max_tokens":2,"stream":`+c.stream+`}`, nil)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if c.prompt == "later" {
			if resp.StatusCode != 200 || !bytes.Contains(b, []byte(`"error"`)) || !bytes.Contains(b, []byte("over the router's bound")) {
				t.Errorf("%s: %d %.300s: expected the stream ended with an error event naming the bound", c.prompt, resp.StatusCode, b)
			}
			continue
		}
		e := api.ParseError(resp.StatusCode, b)
		if resp.StatusCode != 502 || e == nil || e.Code != "answer_too_large" || !strings.Contains(e.Message, "0.0625 MiB") {
			t.Errorf("%s (stream %s): %d %.300s: expected 502 answer_too_large naming the bound", c.prompt, c.stream, resp.StatusCode, b)
		}
	}
	st, _ := r.router.State()
	if st.Engines[1].Down {
		t.Errorf("e1 %+v: ejected for answers too large to relay", st.Engines[1])
	}
	r.stop()
	rows := checkJournal(t, r.jr.records())
	for _, row := range rows {
		if row.Terminal != event.KindFail || row.Cause != event.CauseBadGateway {
			t.Errorf("row %+v: expected a failure, cause bad_gateway", row)
		}
	}
	if len(rows) != 5 {
		t.Errorf("%d rows, expected 5 (no retry)", len(rows))
	}
}

// An engine's own error passes through as the engine wrote it: vLLM's
// type and integer code (its HTTP status) stay, not re-coded as null.
func TestEngineErrorPassesThrough(t *testing.T) {
	r := startRig(t, rigOpts{stub: stub.Options{TimeScale: zero()}, configure: func(c *Config) {
		interpose(t, c, 1, func(w http.ResponseWriter, q *http.Request, _ []byte, engine http.Handler) { // the decode engine of 1P1D
			if q.Method != http.MethodPost {
				engine.ServeHTTP(w, q)
				return
			}
			api.WriteVLLMError(w, api.BadRequest("the engine's own complaint"))
		})
	}})
	resp := post(t, r, "/v1/completions", `{"model":"stub","prompt":"hello there","max_tokens":5}`, nil)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var body struct {
		Error struct {
			Type string          `json:"type"`
			Code json.RawMessage `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &body); err != nil || resp.StatusCode != 400 || body.Error.Type != "BadRequestError" || string(body.Error.Code) != "400" {
		t.Errorf("%d %s (%v): expected the stub's 400 as it wrote it, type BadRequestError, code 400", resp.StatusCode, b, err)
	}
	r.stop()

	// A chat prompt that fills the context, no limit set: the client hears
	// of its messages, not of the prefill leg's one token.
	r = startRig(t, rigOpts{stub: stub.Options{TimeScale: zero(), MaxModelLen: 200}})
	resp = post(t, r, "/v1/chat/completions", `{"model":"stub","messages":[{"role":"user","content":"`+strings.Repeat("x", 800)+`"}]}`, nil)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !bytes.Contains(b, []byte(`"param":"messages"`)) {
		t.Errorf("a chat prompt filling the context: %d %s: expected 400 on messages", resp.StatusCode, b)
	}
	r.stop()
}

// Browsers calling the OpenAI routes from another origin get vLLM's CORS
// answers: a preflight is a 200 naming the method and headers asked for,
// every answer from an allowed origin carries Access-Control-Allow-Origin
// (the origin itself, with Vary, when the list names origins); a preflight
// from an origin not listed is a 400; the operator's routes take no part;
// without origins nothing changes. In front of a tenant gate (as serve
// puts it), a preflight needs no key and a refusal for a missing key
// still carries the header, so the page can read it.
func TestCORS(t *testing.T) {
	do := func(r *rig, method, path, origin string, hdr map[string]string, body string) *http.Response {
		q, err := http.NewRequest(method, r.url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if origin != "" {
			q.Header.Set("Origin", origin)
		}
		for k, v := range hdr {
			q.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(q)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	preflight := map[string]string{"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type"}
	chat := `{"model":"stub","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`
	for _, origins := range [][]string{{"*"}, {"http://ui.example:3000"}, nil} {
		r := startRig(t, rigOpts{stub: stub.Options{TimeScale: zero()}, wrap: func(h http.Handler) http.Handler { return CORS(origins, h) }})
		resp := do(r, http.MethodOptions, "/v1/chat/completions", "http://ui.example:3000", preflight, "")
		acao := resp.Header.Get("Access-Control-Allow-Origin")
		switch {
		case origins == nil:
			if resp.StatusCode != 405 || acao != "" {
				t.Errorf("no origins: preflight %d %q: expected 405 and no CORS header", resp.StatusCode, acao)
			}
		case origins[0] == "*":
			if resp.StatusCode != 200 || acao != "*" || resp.Header.Get("Access-Control-Allow-Headers") != "authorization, content-type" || !strings.Contains(resp.Header.Get("Access-Control-Allow-Methods"), "POST") {
				t.Errorf("*: preflight %d %v", resp.StatusCode, resp.Header)
			}
		default:
			if resp.StatusCode != 200 || acao != "http://ui.example:3000" || resp.Header.Get("Vary") != "Origin" {
				t.Errorf("listed origin: preflight %d %v", resp.StatusCode, resp.Header)
			}
			if resp := do(r, http.MethodOptions, "/v1/chat/completions", "http://evil.example", preflight, ""); resp.StatusCode != 400 || resp.Header.Get("Access-Control-Allow-Origin") != "" {
				t.Errorf("an origin not listed: preflight %d %v: expected 400", resp.StatusCode, resp.Header)
			}
		}
		resp = do(r, http.MethodPost, "/v1/chat/completions", "http://ui.example:3000", map[string]string{"Content-Type": "application/json"}, chat)
		if got := resp.Header.Get("Access-Control-Allow-Origin"); resp.StatusCode != 200 || (origins == nil) != (got == "") {
			t.Errorf("origins %v: POST %d, Access-Control-Allow-Origin %q", origins, resp.StatusCode, got)
		}
		if resp := do(r, http.MethodGet, "/state", "http://ui.example:3000", nil, ""); resp.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("origins %v: /state carries a CORS header", origins)
		}
		r.stop()
	}

	t.Setenv("K_UI", "ui-key")
	tf, keys, err := LoadTenants(writeTenants(t, "required: true\ntenants:\n- {name: ui, key_env: K_UI, weight: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	g := NewGate(tf, keys, 10)
	r := startRig(t, rigOpts{stub: stub.Options{TimeScale: zero()}, wrap: func(h http.Handler) http.Handler { return CORS([]string{"*"}, g.Wrap(h)) }})
	if resp := do(r, http.MethodOptions, "/v1/chat/completions", "http://ui.example", preflight, ""); resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("tenants: a preflight (no key) %d %v: expected 200 with the CORS header", resp.StatusCode, resp.Header)
	}
	if resp := do(r, http.MethodPost, "/v1/chat/completions", "http://ui.example", map[string]string{"Content-Type": "application/json"}, chat); resp.StatusCode != 401 || resp.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("tenants: a POST without its key %d %v: expected 401 the page can read", resp.StatusCode, resp.Header)
	}
	if resp := do(r, http.MethodPost, "/v1/chat/completions", "http://ui.example", map[string]string{"Content-Type": "application/json", "Authorization": "Bearer ui-key"}, chat); resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("tenants: a POST with its key %d %v", resp.StatusCode, resp.Header)
	}
	r.stop()
}

// A request that asks for its prompt's logprobs (vLLM's prompt_logprobs,
// or a completions echo with logprobs) runs whole on the engine that
// prefills it: a decode engine fed the KV computes no prompt logprobs
// (vLLM's answers an error or empty values). Its decode is journaled on
// that engine with cause whole, every invariant holding; other requests
// still take two legs.
func TestPromptLogprobsRunWhole(t *testing.T) {
	var decodeCalls atomic.Int64
	r := startRig(t, rigOpts{stub: stub.Options{TimeScale: zero()}, configure: func(c *Config) {
		interpose(t, c, 1, func(w http.ResponseWriter, q *http.Request, _ []byte, engine http.Handler) { // the decode engine of 1P1D
			if q.Method == http.MethodPost && strings.HasSuffix(q.URL.Path, "completions") {
				decodeCalls.Add(1)
			}
			engine.ServeHTTP(w, q)
		})
	}})
	whole := []struct{ path, body string }{
		{"/v1/completions", `{"model":"stub","prompt":"score this","max_tokens":4,"echo":true,"logprobs":1}`},
		{"/v1/completions", `{"model":"stub","prompt":"score this","max_tokens":4,"echo":true,"logprobs":0,"stream":true}`},
		{"/v1/completions", `{"model":"stub","prompt":"score this","max_tokens":4,"prompt_logprobs":1}`},
		{"/v1/chat/completions", `{"model":"stub","messages":[{"role":"user","content":"score this"}],"max_tokens":4,"prompt_logprobs":0,"stream":true}`},
		{"/v1/chat/completions", `{"model":"stub","messages":[{"role":"user","content":"score this"}],"max_tokens":4,"echo":true}`},
	}
	for _, c := range whole {
		resp := post(t, r, c.path, c.body, nil)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", c.body, resp.StatusCode, b)
		}
		// The engine that ran it whole computed the prompt: its values
		// reach the client.
		if strings.Contains(c.body, `"prompt_logprobs":1`) && !bytes.Contains(b, []byte(`"prompt_logprobs":[null,{`)) {
			t.Errorf("%s: %s: expected the prompt's logprobs", c.body, b)
		}
		if strings.Contains(c.body, `"echo":true,"logprobs":1`) && !bytes.Contains(b, []byte(`"token_logprobs":[null,`)) {
			t.Errorf("%s: %s: expected the echoed prompt's logprobs", c.body, b)
		}
	}
	if n := decodeCalls.Load(); n != 0 {
		t.Errorf("%d calls reached the decode engine: expected every prompt-logprobs request whole on the prefill engine", n)
	}
	// echo without logprobs, and logprobs without echo, need no prompt
	// logprobs: two legs as ever.
	for _, body := range []string{`{"model":"stub","prompt":"plain","max_tokens":4,"echo":true}`, `{"model":"stub","prompt":"plain","max_tokens":4,"logprobs":1,"prompt_logprobs":null}`} {
		resp := post(t, r, "/v1/completions", body, nil)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if n := decodeCalls.Load(); n != 2 {
		t.Errorf("%d calls reached the decode engine: expected the two plain requests there", n)
	}
	r.stop()
	recs := r.jr.records()
	wholeStarts := 0
	for _, rec := range recs {
		if rec.Kind == event.KindDecodeStart && rec.Cause == event.CauseWhole {
			wholeStarts++
			if rec.Inst != 0 || rec.Peer != 0 {
				t.Errorf("%+v: expected the decode on the prefill engine e0", rec)
			}
		}
	}
	if wholeStarts != len(whole) {
		t.Errorf("%d decodes journaled whole, expected %d", wholeStarts, len(whole))
	}
	checkJournal(t, recs)
}

// Echo through the router, as vLLM serves it: with max_tokens 0 the
// prompt alone, a one-token run on one engine (no decode leg); with
// tokens, two legs and the decode engine's answer, the prompt first.
// Fields typed as vLLM's lax parsing takes them ("3", "true") are served,
// not refused.
func TestEchoThroughRouter(t *testing.T) {
	var decodeCalls atomic.Int64
	r := startRig(t, rigOpts{stub: stub.Options{TimeScale: zero()}, configure: func(c *Config) {
		interpose(t, c, 1, func(w http.ResponseWriter, q *http.Request, _ []byte, engine http.Handler) {
			if q.Method == http.MethodPost && strings.HasSuffix(q.URL.Path, "completions") {
				decodeCalls.Add(1)
			}
			engine.ServeHTTP(w, q)
		})
	}})
	const prompt = "repeat after me"
	text := func(body string) string {
		t.Helper()
		resp := post(t, r, "/v1/completions", body, nil)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", body, resp.StatusCode, b)
		}
		if strings.Contains(body, `"stream":"true"`) {
			var out strings.Builder
			rd := api.NewSSEReader(bytes.NewReader(b))
			for {
				p, done, err := rd.ReadEvent()
				if err != nil || done {
					break
				}
				var c api.Response
				if json.Unmarshal(p, &c) == nil && len(c.Choices) > 0 && c.Choices[0].Text != nil {
					out.WriteString(*c.Choices[0].Text)
				}
			}
			return out.String()
		}
		var c api.Response
		if err := json.Unmarshal(b, &c); err != nil || len(c.Choices) == 0 || c.Choices[0].Text == nil {
			t.Fatalf("%s: %s", body, b)
		}
		return *c.Choices[0].Text
	}
	if got := text(`{"model":"stub","prompt":"` + prompt + `","max_tokens":0,"echo":true}`); got != prompt {
		t.Errorf("echo with max_tokens 0: %q, expected the prompt alone", got)
	}
	if n := decodeCalls.Load(); n != 0 {
		t.Errorf("echo alone reached the decode engine %d times: expected one engine, one token", n)
	}
	if got := text(`{"model":"stub","prompt":"` + prompt + `","max_tokens":"3","echo":"true","stream":"true"}`); !strings.HasPrefix(got, prompt) || len(got) == len(prompt) {
		t.Errorf("echo with 3 tokens, streamed: %q, expected the prompt and then the answer", got)
	}
	if n := decodeCalls.Load(); n != 1 {
		t.Errorf("%d calls reached the decode engine: expected the echo with tokens there", n)
	}
	r.stop()
	recs := r.jr.records()
	outs := map[int]int{}
	for _, rec := range recs {
		if rec.Kind == event.KindFinish {
			outs[int(rec.Tokens)]++
		}
	}
	if outs[1] != 1 || outs[3] != 1 {
		t.Errorf("journaled ends by output tokens %v: expected one of 1 (echo alone) and one of 3", outs)
	}
	checkJournal(t, recs)
}

// GET /v1/models asks each engine for at most the probe timeout: an engine
// that accepts and never answers costs the route that long, and the next
// engine's answer is relayed.
func TestModelsHungEngine(t *testing.T) {
	r := startRig(t, rigOpts{stub: stub.Options{TimeScale: zero()}, configure: func(c *Config) {
		c.Model = "stub"
		c.ProbeTimeout = 200 * time.Millisecond
		interpose(t, c, 0, func(w http.ResponseWriter, q *http.Request, _ []byte, engine http.Handler) {
			if q.URL.Path == "/v1/models" {
				<-q.Context().Done() // hangs until the router gives up
				return
			}
			engine.ServeHTTP(w, q)
		})
	}})
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(r.url + "/v1/models")
	if err != nil {
		t.Fatalf("GET /v1/models with e0 hung: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Contains(b, []byte(`"max_model_len":32768`)) {
		t.Errorf("%d %s: expected e1's entry", resp.StatusCode, b)
	}
	r.stop()
}

// vLLM's own routes answer through the router as an engine answers them:
// GET /version and POST /tokenize from the first engine that answers
// (one failing with a 5xx is passed over), GET and POST /ping as /health.
func TestEngineRoutesPassThrough(t *testing.T) {
	r := startRig(t, rigOpts{stub: stub.Options{TimeScale: zero()}, configure: func(c *Config) {
		interpose(t, c, 0, func(w http.ResponseWriter, q *http.Request, _ []byte, engine http.Handler) {
			if q.URL.Path == "/version" {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			engine.ServeHTTP(w, q)
		})
	}})
	get := func(method, path, body string) (int, string) {
		q, _ := http.NewRequest(method, r.url+path, strings.NewReader(body))
		q.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(q)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	if code, b := get(http.MethodGet, "/version", ""); code != 200 || !strings.Contains(b, `"version":"narwhal-stub"`) {
		t.Errorf("GET /version: %d %s: expected e1's answer, e0 failing", code, b)
	}
	if code, b := get(http.MethodPost, "/tokenize", `{"model":"stub","prompt":"a few words here"}`); code != 200 || !strings.Contains(b, `"count":`) {
		t.Errorf("POST /tokenize: %d %s", code, b)
	}
	if code, b := get(http.MethodPost, "/detokenize", `{"model":"stub","tokens":[0,1,33]}`); code != 200 || b != `{"prompt":" the engine engine"}`+"\n" {
		t.Errorf("POST /detokenize: %d %q", code, b)
	}
	if code, b := get(http.MethodPost, "/detokenize", `{"tokens":[1,50000]}`); code != 400 || !strings.Contains(b, `"param":"tokens[1]"`) {
		t.Errorf("POST /detokenize, an id past the vocabulary: %d %s", code, b)
	}
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		if code, _ := get(m, "/ping", ""); code != 200 {
			t.Errorf("%s /ping: %d", m, code)
		}
	}
	r.stop()
}
