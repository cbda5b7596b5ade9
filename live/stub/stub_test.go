package stub

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/narwhal-bench/narwhal-bench/fleet"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-bench/narwhal-bench/engine"
	"github.com/narwhal-bench/narwhal-bench/live/api"
	"github.com/narwhal-bench/narwhal-bench/timing"
)

func scale(f float64) *float64 { return &f }

// startFleet starts n stub engines on loopback ports chosen by the OS.
func startFleet(t *testing.T, n int, opts Options) *Fleet {
	t.Helper()
	return startNamed(t, "e", n, opts)
}

// startNamed starts n engines with ids prefix0, prefix1, ...
func startNamed(t *testing.T, prefix string, n int, opts Options) *Fleet {
	t.Helper()
	if opts.TimeScale == nil {
		opts.TimeScale = scale(0.01)
	}
	opts.AllowFaults = true
	var insts []Instance
	for i := range n {
		insts = append(insts, Instance{ID: prefix + string(rune('0'+i)), Addr: "127.0.0.1:0",
			Engine: engine.Config{Profile: timing.Reference, Batch: engine.Batch{KVCapacityTokens: testKVTokens}}})
	}
	return startInstances(t, opts, insts)
}

// testKVTokens is the KV capacity of test engines that do not test it.
const testKVTokens = 100000

// startInstances starts insts with opts until the test ends.
func startInstances(t *testing.T, opts Options, insts []Instance) *Fleet {
	t.Helper()
	f, err := NewFleet(opts, insts)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

type result struct {
	status int
	header http.Header
	body   []byte
}

func post(t *testing.T, url, body string, hdr ...string) result {
	t.Helper()
	r, err := postRaw(t, url, body, hdr...)
	if err != nil {
		t.Fatalf("POST %s: reading: %v", url, err)
	}
	return r
}

// postRaw returns what arrived and the error that cut the body short.
func postRaw(t *testing.T, url, body string, hdr ...string) (result, error) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return result{resp.StatusCode, resp.Header, b}, err
}

func decodeResp(t *testing.T, b []byte) api.Response {
	t.Helper()
	var r api.Response
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return r
}

// events reads a stream's events until [DONE].
func events(t *testing.T, b []byte) []api.Response {
	t.Helper()
	r := api.NewSSEReader(bytes.NewReader(b))
	var out []api.Response
	for {
		p, done, err := r.ReadEvent()
		if err != nil {
			t.Fatalf("stream ended without [DONE] after %d events: %v", len(out), err)
		}
		if done {
			return out
		}
		out = append(out, decodeResp(t, p))
	}
}

func TestCompletions(t *testing.T) {
	s := startFleet(t, 1, Options{Seed: 3}).Servers()[0]
	u := s.URL()
	r := post(t, u+"/v1/completions", `{"model":"stub","prompt":"hello there, engine","max_tokens":7}`, "X-Request-Id", "abc")
	if r.status != 200 || r.header.Get("X-Request-Id") != "abc" {
		t.Fatalf("%d %s", r.status, r.body)
	}
	c := decodeResp(t, r.body)
	if c.ID != "cmpl-abc" || c.Object != "text_completion" || c.Model != "stub" || len(c.Choices) != 1 ||
		*c.Choices[0].FinishReason != "length" || len(strings.Fields(*c.Choices[0].Text)) != 7 {
		t.Errorf("response %s", r.body)
	}
	if *c.Usage != (api.Usage{PromptTokens: 5, CompletionTokens: 7, TotalTokens: 12}) {
		t.Errorf("usage %+v", c.Usage)
	}
	if !bytes.Contains(r.body, []byte(`"kv_transfer_params":null`)) {
		t.Errorf("no kv_transfer_params: null: %s", r.body)
	}
	// Same prompt, same seed: same text; streamed, the chunks add up to it.
	r2 := post(t, u+"/v1/completions", `{"prompt":"hello there, engine","max_tokens":7,"stream":true,"stream_options":{"include_usage":true}}`)
	evs := events(t, r2.body)
	if len(evs) != 8 || len(evs[7].Choices) != 0 || evs[7].Usage.CompletionTokens != 7 {
		t.Fatalf("%d events: %s", len(evs), r2.body)
	}
	var text strings.Builder
	for i, e := range evs[:7] {
		text.WriteString(*e.Choices[0].Text)
		if fr := e.Choices[0].FinishReason; (i == 6) != (fr != nil) || e.Usage != nil {
			t.Errorf("chunk %d: finish %v usage %v", i, fr, e.Usage)
		}
	}
	if text.String() != *c.Choices[0].Text {
		t.Errorf("streamed %q, whole %q", text.String(), *c.Choices[0].Text)
	}
	// With continuous_usage_stats, as vLLM: every chunk carries the usage
	// so far, then the usage chunk; chat's role chunk counts no token.
	evs = events(t, post(t, u+"/v1/completions", `{"prompt":"hello there, engine","max_tokens":7,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`).body)
	if len(evs) != 8 || evs[7].Usage == nil || evs[7].Usage.CompletionTokens != 7 {
		t.Fatalf("continuous usage: %d events", len(evs))
	}
	for i, e := range evs[:7] {
		if e.Usage == nil || *e.Usage != (api.Usage{PromptTokens: 5, CompletionTokens: i + 1, TotalTokens: 6 + i}) {
			t.Errorf("continuous usage, chunk %d: usage %+v, want 5 prompt and %d completion tokens", i, e.Usage, i+1)
		}
	}
	evs = events(t, post(t, u+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stream":true,"stream_options":{"continuous_usage_stats":true}}`).body)
	if len(evs) != 5 || evs[0].Usage == nil || evs[0].Usage.CompletionTokens != 0 || evs[3].Usage == nil || evs[3].Usage.CompletionTokens != 3 {
		t.Errorf("chat, continuous usage: %d events, %+v", len(evs), evs)
	}
	// Default limit 16; no usage chunk without include_usage.
	evs = events(t, post(t, u+"/v1/completions", `{"prompt":[1,2,3],"stream":true}`).body)
	if len(evs) != 16 {
		t.Errorf("default limit: %d chunks", len(evs))
	}
}

func TestChat(t *testing.T) {
	u := startFleet(t, 1, Options{}).Servers()[0].URL()
	body := `{"model":"stub","messages":[{"role":"user","content":"say something"}],"max_completion_tokens":4,"max_tokens":50}`
	r := post(t, u+"/v1/chat/completions", body, "X-Request-Id", "q")
	c := decodeResp(t, r.body)
	if r.status != 200 || c.Object != "chat.completion" || c.ID != "chatcmpl-q" || c.Choices[0].Message.Role != "assistant" ||
		len(strings.Fields(c.Choices[0].Message.Content)) != 4 || c.Usage.CompletionTokens != 4 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	body = strings.Replace(body, `"max_tokens":50`, `"stream":true,"stream_options":{"include_usage":true}`, 1)
	evs := events(t, post(t, u+"/v1/chat/completions", body).body)
	// role chunk, 4 content chunks, usage chunk
	if len(evs) != 6 || evs[0].Choices[0].Delta.Role != "assistant" || evs[0].Object != "chat.completion.chunk" ||
		*evs[4].Choices[0].FinishReason != "length" || evs[5].Usage.TotalTokens != c.Usage.TotalTokens {
		t.Fatalf("%d events %+v", len(evs), evs)
	}
	var text strings.Builder
	for _, e := range evs[1:5] {
		text.WriteString(*e.Choices[0].Delta.Content)
	}
	if text.String() != c.Choices[0].Message.Content {
		t.Errorf("streamed %q, whole %q", text.String(), c.Choices[0].Message.Content)
	}
}

// A chat request that sets no limit runs, as on vLLM, to the end of the
// context (max_model_len minus the prompt), not to 16 tokens; a
// completions request gets 16.
func TestChatDefaultLimit(t *testing.T) {
	u := startFleet(t, 1, Options{MaxModelLen: 40}).Servers()[0].URL()
	r := post(t, u+"/v1/chat/completions", `{"messages":[{"role":"user","content":"abcdefgh"}]}`) // 2 prompt tokens
	c := decodeResp(t, r.body)
	if r.status != 200 || c.Usage.CompletionTokens != 38 || *c.Choices[0].FinishReason != "length" {
		t.Fatalf("chat without max_tokens: %d %s: expected 38 tokens, finish length", r.status, r.body)
	}
	if r := post(t, u+"/v1/chat/completions", `{"messages":[{"role":"user","content":"abcdefgh"}],"min_tokens":30}`); r.status != 200 {
		t.Errorf("min_tokens 30 within the context: %d %s", r.status, r.body)
	}
	if r := post(t, u+"/v1/chat/completions", `{"messages":[{"role":"user","content":"abcdefgh"}],"min_tokens":39}`); r.status != 400 || !bytes.Contains(r.body, []byte("min_tokens")) {
		t.Errorf("min_tokens past the context: %d %s", r.status, r.body)
	}
	if r := post(t, u+"/v1/chat/completions", `{"messages":[{"role":"user","content":"`+strings.Repeat("x", 200)+`"}]}`); r.status != 400 || !bytes.Contains(r.body, []byte(`"param":"messages"`)) {
		t.Errorf("a prompt filling the context: %d %s", r.status, r.body)
	}
	// A prompt longer than the context is refused for the prompt, even
	// asking one token (as a router's prefill leg does), as vLLM checks
	// the prompt alone first.
	for _, body := range []string{`{"prompt":"` + strings.Repeat("x", 200) + `","max_tokens":1}`, `{"messages":[{"role":"user","content":"` + strings.Repeat("x", 200) + `"}],"max_tokens":1}`} {
		path, param := "/v1/completions", `"param":"prompt"`
		if strings.Contains(body, "messages") {
			path, param = "/v1/chat/completions", `"param":"messages"`
		}
		if r := post(t, u+path, body); r.status != 400 || !bytes.Contains(r.body, []byte(param)) || !bytes.Contains(r.body, []byte("shorter than max_model_len 40")) {
			t.Errorf("%s, a prompt past the context asking 1 token: %d %s: expected 400 naming the prompt", path, r.status, r.body)
		}
	}
	r = post(t, u+"/v1/completions", `{"prompt":"abcdefgh"}`)
	if c := decodeResp(t, r.body); r.status != 200 || c.Usage.CompletionTokens != 16 {
		t.Errorf("completions without max_tokens: %d %s: expected 16 tokens", r.status, r.body)
	}
}

func TestStopMinTokensEOS(t *testing.T) {
	u := startFleet(t, 1, Options{MeanOutput: 3}).Servers()[0].URL()
	gen := func(extra string) api.Response {
		r := post(t, u+"/v1/completions", `{"prompt":"p","max_tokens":40`+extra+`}`)
		if r.status != 200 {
			t.Fatalf("%s: %d %s", extra, r.status, r.body)
		}
		return decodeResp(t, r.body)
	}
	full := gen(`,"ignore_eos":true`)
	words := strings.Fields(*full.Choices[0].Text)
	if len(words) != 40 || *full.Choices[0].FinishReason != "length" {
		t.Fatalf("ignore_eos: %d words, %s", len(words), *full.Choices[0].FinishReason)
	}
	// Natural end of sequence (at most 6 tokens with MeanOutput 3).
	nat := gen(``)
	if *nat.Choices[0].FinishReason != "stop" || nat.Usage.CompletionTokens > 6 {
		t.Errorf("natural: %+v %s", nat.Usage, *nat.Choices[0].FinishReason)
	}
	// min_tokens holds it off.
	if m := gen(`,"min_tokens":20`); m.Usage.CompletionTokens < 20 {
		t.Errorf("min_tokens 20: %d tokens", m.Usage.CompletionTokens)
	}
	// A stop string: the text ends before it, on the token that made it.
	stopAt := 8 // the ninth word
	for i, w := range words[:stopAt] {
		if w == words[stopAt] {
			stopAt = i
			break
		}
	}
	st := gen(`,"ignore_eos":true,"stop":["` + words[stopAt] + `"]`)
	want := "" // the words before, and the space before the stop word
	for _, w := range words[:stopAt] {
		want += " " + w
	}
	want += " "
	if *st.Choices[0].FinishReason != "stop" || *st.Choices[0].Text != want || st.Usage.CompletionTokens != stopAt+1 {
		t.Errorf("stop %q: %q (%d tokens), want %q (%d)", words[stopAt], *st.Choices[0].Text, st.Usage.CompletionTokens, want, stopAt+1)
	}
	// vLLM's stop_reason names the stop string; an end of sequence leaves
	// it null.
	if sr := st.Choices[0].StopReason; sr == nil || *sr != words[stopAt] {
		t.Errorf("stop %q: stop_reason %v", words[stopAt], sr)
	}
	if sr := nat.Choices[0].StopReason; sr != nil {
		t.Errorf("natural end: stop_reason %q, want null", *sr)
	}
	// min_tokens past the stop: the stop string is not checked before it.
	st = gen(`,"ignore_eos":true,"min_tokens":30,"stop":["` + words[stopAt] + `"]`)
	if st.Usage.CompletionTokens < 30 {
		t.Errorf("min_tokens with stop: %d tokens", st.Usage.CompletionTokens)
	}
}

func TestErrorsAndRoutes(t *testing.T) {
	u := startFleet(t, 1, Options{MaxModelLen: 100}).Servers()[0].URL()
	for _, tc := range []struct {
		path, body string
		status     int
		param      string
	}{
		{"/v1/completions", `{"model":"gpt-4","prompt":"x"}`, 404, "model"},
		{"/v1/completions", `{"prompt":"x","max_tokens":"many"}`, 400, "max_tokens"},
		{"/v1/completions", `{"prompt":"x","n":3}`, 400, "n"},
		{"/v1/completions", `{"prompt":"x","max_tokens":200}`, 400, "max_tokens"},
		{"/v1/completions", `not json`, 400, "body"},
		{"/v1/chat/completions", `{"prompt":"x"}`, 400, "messages"},
		{"/tokenize", `{"model":"other","prompt":"x"}`, 404, "model"},
	} {
		r := post(t, u+tc.path, tc.body)
		e := api.ParseError(r.status, r.body)
		if r.status != tc.status || e == nil || e.Param != tc.param {
			t.Errorf("%s %s: %d %s", tc.path, tc.body, r.status, r.body)
		}
	}
	// vLLM's error shape: its exception name as type, the status as an
	// integer code.
	if r := post(t, u+"/v1/completions", `{"model":"gpt-4","prompt":"x"}`); !bytes.Contains(r.body, []byte(`"code":404`)) || !bytes.Contains(r.body, []byte(`"type":"NotFoundError"`)) {
		t.Errorf("404 body %s: expected vLLM's shape", r.body)
	}
	big := `{"prompt":"` + strings.Repeat("x", api.MaxBodyBytes) + `"}`
	if r := post(t, u+"/v1/completions", big); r.status != 413 {
		t.Errorf("huge body: %d", r.status)
	}
	r := post(t, u+"/tokenize", `{"model":"stub","prompt":"abcdefghijkl"}`)
	var tok struct {
		Count       int   `json:"count"`
		MaxModelLen int   `json:"max_model_len"`
		Tokens      []int `json:"tokens"`
	}
	if json.Unmarshal(r.body, &tok) != nil || tok.Count != 3 || len(tok.Tokens) != 3 || tok.MaxModelLen != 100 {
		t.Errorf("tokenize: %s", r.body)
	}
	r = post(t, u+"/tokenize", `{"messages":[{"role":"user","content":"abcd"}]}`)
	if json.Unmarshal(r.body, &tok) != nil || tok.Count != 1 {
		t.Errorf("tokenize chat: %s", r.body)
	}
	for path, want := range map[string]string{"/health": `"status":"ok"`, "/v1/models": `"id":"stub"`} {
		resp, err := http.Get(u + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(b, []byte(want)) {
			t.Errorf("%s: %d %s", path, resp.StatusCode, b)
		}
	}
}

func TestMetrics(t *testing.T) {
	u := startFleet(t, 1, Options{}).Servers()[0].URL()
	post(t, u+"/v1/completions", `{"prompt":"some prompt text","max_tokens":5}`)
	resp, err := http.Get(u + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, name := range []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:gpu_cache_usage_perc",
		"vllm:time_to_first_token_seconds_bucket", "vllm:time_per_output_token_seconds_count", "vllm:prompt_tokens_total",
		"vllm:generation_tokens_total", "vllm:num_preemptions_total", "process_start_time_seconds", `model_name="stub"`} {
		if !bytes.Contains(b, []byte(name)) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if !bytes.Contains(b, []byte(`vllm:generation_tokens_total{engine="0",model_name="stub"} 5`)) ||
		!bytes.Contains(b, []byte(`vllm:time_per_output_token_seconds_count{engine="0",model_name="stub"} 4`)) ||
		!bytes.Contains(b, []byte(`vllm:inter_token_latency_seconds_count{engine="0",model_name="stub"} 4`)) {
		t.Errorf("counts: %s", b)
	}
	// Per finished request, as vLLM: every finish reason's series exists
	// from the start; the one request ended at its limit.
	for _, line := range []string{
		`vllm:request_success_total{engine="0",finished_reason="length",model_name="stub"} 1`,
		`vllm:request_success_total{engine="0",finished_reason="stop",model_name="stub"} 0`,
		`vllm:request_success_total{engine="0",finished_reason="abort",model_name="stub"} 0`,
		`vllm:e2e_request_latency_seconds_count{engine="0",model_name="stub"} 1`,
		`vllm:request_time_per_output_token_seconds_count{engine="0",model_name="stub"} 1`,
		`vllm:request_generation_tokens_sum{engine="0",model_name="stub"} 5`,
		`vllm:request_prompt_tokens_sum{engine="0",model_name="stub"} 4`,
		`vllm:request_prompt_tokens_bucket{engine="0",model_name="stub",le="5"} 1`,
		`vllm:request_prompt_tokens_bucket{engine="0",model_name="stub",le="20000"} 1`,
	} {
		if !bytes.Contains(b, []byte(line+"\n")) {
			t.Errorf("/metrics lacks %s", line)
		}
	}
}

// waitFor polls cond (the engines are asynchronous); it never asserts a
// duration, it only gives up after a generous while.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("gave up waiting for %s", what)
}

func TestClientDisconnectCancels(t *testing.T) {
	s := startFleet(t, 1, Options{TimeScale: scale(0.2)}).Servers()[0]
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/v1/completions",
		strings.NewReader(`{"prompt":"long","max_tokens":5000,"stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	rd := api.NewSSEReader(resp.Body)
	if _, _, err := rd.ReadEvent(); err != nil {
		t.Fatal(err)
	}
	if g := s.Gauges(); g.Requests != 1 {
		t.Errorf("while streaming: %+v", g)
	}
	cancel()
	resp.Body.Close()
	waitFor(t, "the engine to drop the request", func() bool { g := s.Gauges(); return g.Requests == 0 && g.ContextTokens == 0 })
	// vLLM counts the request as aborted, and records no finished-request
	// stats for it.
	waitFor(t, "the abort counted", func() bool {
		return strings.Contains(scrape(t, s.URL()), `vllm:request_success_total{engine="0",finished_reason="abort",model_name="stub"} 1`+"\n")
	})
	page := scrape(t, s.URL())
	for _, name := range append(intervalNames, "vllm:e2e_request_latency_seconds") {
		if c, _ := hsum(t, page, name); c != 0 {
			t.Errorf("%s_count %d after an aborted request, want 0", name, c)
		}
	}
}

// FromFleet refuses ports past 65535 and two engines on one address,
// before any engine starts.
func TestFromFleetRefuses(t *testing.T) {
	spec, err := fleet.Parse([]byte(`name: two
instances:
  list:
    - {name: a, url: "http://127.0.0.1:18532", profile: {a: 0, b: 1.0e-5, c: 0.0005, slope: 1.0e-7, intercept: 0.002}}
    - {name: b, url: "http://127.0.0.1:18532", profile: {a: 0, b: 1.0e-5, c: 0.0005, slope: 1.0e-7, intercept: 0.002}}
slo: {ttft: 2s, tpot: 100ms}
`), "two.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := FromFleet(spec, 0, nil); err == nil || !strings.Contains(err.Error(), "address 127.0.0.1:18532 is also engine a's") {
		t.Errorf("duplicate address: %v", err)
	}
	if _, err := FromFleet(spec, 18000, nil); err != nil {
		t.Errorf("--base-port overrides the urls: %v", err)
	}
	for _, base := range []int{65535, -5} {
		if _, err := FromFleet(spec, base, nil); err == nil || !strings.Contains(err.Error(), "expected ports from 1 to 65535") {
			t.Errorf("base port %d: %v", base, err)
		}
	}
}

// Without AllowFaults, /stub/faults is a 404 in vLLM's shape that names
// the flag that turns it on.
func TestFaultsOffSaysHow(t *testing.T) {
	f := startInstances(t, Options{}, []Instance{{ID: "e0", Addr: "127.0.0.1:0",
		Engine: engine.Config{Profile: timing.Reference, Batch: engine.Batch{KVCapacityTokens: testKVTokens}}}})
	resp, err := http.Get(f.Servers()[0].URL() + "/stub/faults")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), "--allow-faults") {
		t.Fatalf("%d %s: expected a 404 naming --allow-faults", resp.StatusCode, b)
	}
}

// A stub closes a client connection idle for api.EngineKeepAlive, as
// vLLM's server does after 5 s; the router's and load generator's pools
// drop theirs sooner (api.IdleConnTimeout), so they never write onto a
// connection the engine is closing.
func TestIdleConnectionClosed(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the keep-alive")
	}
	if api.IdleConnTimeout >= api.EngineKeepAlive {
		t.Fatalf("the pools keep idle connections %v, the engines %v: a leg could be written onto a closing one", api.IdleConnTimeout, api.EngineKeepAlive)
	}
	f := startFleet(t, 1, Options{})
	c, err := net.Dial("tcp", strings.TrimPrefix(f.Servers()[0].URL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /health HTTP/1.1\r\nHost: stub\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/health: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	_ = c.SetReadDeadline(time.Now().Add(api.EngineKeepAlive + 5*time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection: read %v, expected the stub to close it (EOF)", err)
	}
}

// Echo, as vLLM's: completions show the prompt before the answer (in the
// first streamed chunk), and with max_tokens 0 the prompt alone, after
// running one token; chat shows the last message's content when it has
// the answer's role (assistant, or with add_generation_prompt false the
// last message's own), in its own chunk after the role's.
func TestEcho(t *testing.T) {
	u := startFleet(t, 1, Options{Seed: 5}).Servers()[0].URL()
	const prompt = "hello there, engine"
	plain := decodeResp(t, post(t, u+"/v1/completions", `{"prompt":"`+prompt+`","max_tokens":4}`).body)
	gen := *plain.Choices[0].Text
	r := post(t, u+"/v1/completions", `{"prompt":"`+prompt+`","max_tokens":4,"echo":true}`)
	if c := decodeResp(t, r.body); r.status != 200 || *c.Choices[0].Text != prompt+gen || c.Usage.CompletionTokens != 4 {
		t.Errorf("echo: %d %s: expected the prompt then %q", r.status, r.body, gen)
	}
	evs := events(t, post(t, u+"/v1/completions", `{"prompt":"`+prompt+`","max_tokens":4,"echo":"yes","stream":true}`).body)
	if len(evs) != 4 || !strings.HasPrefix(*evs[0].Choices[0].Text, prompt) || len(*evs[0].Choices[0].Text) == len(prompt) {
		t.Errorf("echo streamed: %d events, first %+v: expected the prompt and the first token together", len(evs), evs[0].Choices)
	}
	for _, stream := range []bool{false, true} {
		body := fmt.Sprintf(`{"prompt":"%s","max_tokens":0,"echo":true,"stream":%v,"stream_options":null}`, prompt, stream)
		r := post(t, u+"/v1/completions", body)
		var text string
		var finish *string
		if stream {
			evs := events(t, r.body)
			if len(evs) != 1 {
				t.Fatalf("echo alone, streamed: %d events: %s", len(evs), r.body)
			}
			text, finish = *evs[0].Choices[0].Text, evs[0].Choices[0].FinishReason
		} else {
			c := decodeResp(t, r.body)
			text, finish = *c.Choices[0].Text, c.Choices[0].FinishReason
			if c.Usage.CompletionTokens != 1 {
				t.Errorf("echo alone: usage %+v: expected the one token run", c.Usage)
			}
		}
		if r.status != 200 || text != prompt || finish == nil || *finish != "length" {
			t.Errorf("echo alone (stream %v): %d %s: expected the prompt alone, finish length", stream, r.status, r.body)
		}
	}
	if r := post(t, u+"/v1/completions", `{"prompt":[0,1,33],"max_tokens":0,"echo":true}`); r.status != 200 || *decodeResp(t, r.body).Choices[0].Text != " the engine engine" {
		t.Errorf("echo of token ids: %d %s: expected them as /detokenize reads them", r.status, r.body)
	}
	if r := post(t, u+"/v1/completions", `{"prompt":"x","max_tokens":0}`); r.status != 400 {
		t.Errorf("max_tokens 0 without echo: %d %s", r.status, r.body)
	}
	chat := func(msgs, extra string) (string, []api.Response) {
		body := `{"messages":` + msgs + `,"max_tokens":3,"echo":true` + extra + `}`
		c := decodeResp(t, post(t, u+"/v1/chat/completions", body).body)
		evs := events(t, post(t, u+"/v1/chat/completions", strings.Replace(body, `"echo":true`, `"echo":true,"stream":true`, 1)).body)
		return c.Choices[0].Message.Content, evs
	}
	const asked = `[{"role":"user","content":"go on"},{"role":"assistant","content":"Once upon"}]`
	content, evs := chat(asked, "")
	if !strings.HasPrefix(content, "Once upon") || len(content) == len("Once upon") {
		t.Errorf("chat echo: %q: expected the assistant's message continued", content)
	}
	if len(evs) != 5 || evs[0].Choices[0].Delta.Role != "assistant" || *evs[1].Choices[0].Delta.Content != "Once upon" {
		t.Errorf("chat echo streamed: %d events %+v: expected the role, the echo, three tokens", len(evs), evs)
	}
	if content, evs := chat(`[{"role":"user","content":"go on"}]`, ""); strings.Contains(content, "go on") || len(evs) != 4 {
		t.Errorf("chat echo after a user message: %q, %d events: expected nothing echoed", content, len(evs))
	}
	// Without a generation prompt the answer continues the last message,
	// in its role.
	if content, evs := chat(`[{"role":"user","content":"go on"}]`, `,"add_generation_prompt":false`); !strings.HasPrefix(content, "go on") || evs[0].Choices[0].Delta.Role != "user" {
		t.Errorf("chat echo without a generation prompt: %q, role chunk %+v: expected the user's message continued as the user", content, evs[0].Choices[0].Delta)
	}
	r = post(t, u+"/v1/chat/completions", `{"messages":[{"role":"user","content":"go on"}],"add_generation_prompt":false,"max_tokens":2}`)
	if c := decodeResp(t, r.body); c.Choices[0].Message.Role != "user" {
		t.Errorf("without a generation prompt: %s: expected the answer in the last message's role", r.body)
	}
}

// Logprobs, in vLLM's shapes: on completions (logprobs N) each token with
// its logprob and the chosen token among its N alternatives, the prompt's
// tokens first with echo (the first with null), text offsets that index
// the text; streamed, each chunk its tokens' part of the same values; on
// chat (logprobs true, top_logprobs N) a content list. Asked beyond
// --max-logprobs, or top_logprobs without logprobs, is a 400.
func TestLogprobs(t *testing.T) {
	u := startFleet(t, 1, Options{Seed: 9}).Servers()[0].URL()
	type lp struct {
		TextOffset    []int                `json:"text_offset"`
		TokenLogprobs []*float64           `json:"token_logprobs"`
		Tokens        []string             `json:"tokens"`
		TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	}
	const prompt = "hello there, engine"
	r := post(t, u+"/v1/completions", `{"prompt":"`+prompt+`","max_tokens":4,"logprobs":2,"echo":true}`)
	c := decodeResp(t, r.body)
	var whole lp
	if err := json.Unmarshal(c.Choices[0].Logprobs, &whole); err != nil || r.status != 200 {
		t.Fatalf("%d %s: %v", r.status, r.body, err)
	}
	text := *c.Choices[0].Text
	if n := c.Usage.PromptTokens + 4; len(whole.Tokens) != n || len(whole.TokenLogprobs) != n || len(whole.TopLogprobs) != n || len(whole.TextOffset) != n {
		t.Fatalf("logprobs %+v: expected %d prompt and answer tokens", whole, n)
	}
	if whole.TokenLogprobs[0] != nil || whole.TopLogprobs[0] != nil || strings.Join(whole.Tokens, "") != text {
		t.Errorf("logprobs %+v: expected the first prompt token without a logprob, the tokens spelling %q", whole, text)
	}
	for i := 1; i < len(whole.Tokens); i++ {
		v, top := *whole.TokenLogprobs[i], whole.TopLogprobs[i]
		if v >= 0 || len(top) < 1 || len(top) > 2 || top[whole.Tokens[i]] != v || text[whole.TextOffset[i]:][:len(whole.Tokens[i])] != whole.Tokens[i] {
			t.Errorf("token %d %q: logprob %v, alternatives %v, offset %d: expected a negative logprob among at most 2 and an offset into the text", i, whole.Tokens[i], v, top, whole.TextOffset[i])
		}
	}
	// Streamed without echo: the chunks' values are the answer's part of
	// the whole's, the offsets continuing.
	evs := events(t, post(t, u+"/v1/completions", `{"prompt":"`+prompt+`","max_tokens":4,"logprobs":2,"stream":true}`).body)
	p := c.Usage.PromptTokens
	off := 0
	for k, e := range evs {
		var part lp
		if err := json.Unmarshal(e.Choices[0].Logprobs, &part); err != nil || len(part.Tokens) != 1 {
			t.Fatalf("chunk %d: %s (%v)", k, e.Choices[0].Logprobs, err)
		}
		if part.Tokens[0] != whole.Tokens[p+k] || *part.TokenLogprobs[0] != *whole.TokenLogprobs[p+k] || part.TextOffset[0] != off {
			t.Errorf("chunk %d: %+v: expected %q at offset %d, as the whole answer's", k, part, whole.Tokens[p+k], off)
		}
		off += len(part.Tokens[0])
	}
	// Chat.
	r = post(t, u+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"logprobs":true,"top_logprobs":3}`)
	cc := decodeResp(t, r.body)
	var chat struct {
		Content []struct {
			Token       string  `json:"token"`
			Logprob     float64 `json:"logprob"`
			Bytes       []int   `json:"bytes"`
			TopLogprobs []struct {
				Token   string  `json:"token"`
				Logprob float64 `json:"logprob"`
			} `json:"top_logprobs"`
		} `json:"content"`
	}
	if err := json.Unmarshal(cc.Choices[0].Logprobs, &chat); err != nil || len(chat.Content) != 3 {
		t.Fatalf("chat logprobs %s: %v", r.body, err)
	}
	var spelled strings.Builder
	for _, e := range chat.Content {
		spelled.WriteString(e.Token)
		if len(e.TopLogprobs) != 3 || e.TopLogprobs[0].Token != e.Token || e.TopLogprobs[0].Logprob != e.Logprob || len(e.Bytes) != len(e.Token) {
			t.Errorf("chat token %+v: expected 3 alternatives, the chosen first, its bytes", e)
		}
	}
	if spelled.String() != cc.Choices[0].Message.Content {
		t.Errorf("chat logprobs spell %q, the answer is %q", spelled.String(), cc.Choices[0].Message.Content)
	}
	if r := post(t, u+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":3}`); !bytes.Contains(r.body, []byte(`"logprobs":null`)) {
		t.Errorf("no logprobs asked: %s", r.body)
	}
	// vLLM's prompt_logprobs: per prompt token (the first null) its id
	// with rank 1 and the alternatives asked; on chat at the top level.
	type plp map[string]struct {
		Logprob float64 `json:"logprob"`
		Rank    int     `json:"rank"`
		Decoded string  `json:"decoded_token"`
	}
	checkPrompt := func(name string, raw json.RawMessage, n, top int) {
		t.Helper()
		var list []plp
		if err := json.Unmarshal(raw, &list); err != nil || len(list) != n || list[0] != nil {
			t.Fatalf("%s prompt_logprobs %s (%v): expected %d entries, the first null", name, raw, err, n)
		}
		var text strings.Builder
		for _, m := range list[1:] {
			if len(m) != top {
				t.Errorf("%s: %v: expected %d alternatives", name, m, top)
			}
			for _, e := range m {
				if e.Rank == 1 {
					text.WriteString(e.Decoded)
				}
			}
		}
		if !strings.HasSuffix(prompt, text.String()) || text.Len() == 0 {
			t.Errorf("%s: rank-1 tokens spell %q: expected the prompt after its first token", name, text.String())
		}
	}
	r = post(t, u+"/v1/completions", `{"prompt":"`+prompt+`","max_tokens":2,"prompt_logprobs":2}`)
	c = decodeResp(t, r.body)
	checkPrompt("completions", c.Choices[0].PromptLogprobs, c.Usage.PromptTokens, 2)
	if string(c.Choices[0].Logprobs) != "null" {
		t.Errorf("prompt_logprobs alone gave the answer's logprobs: %s", r.body)
	}
	r = post(t, u+"/v1/chat/completions", `{"messages":[{"role":"user","content":"`+prompt+`"}],"max_tokens":2,"prompt_logprobs":0}`)
	cc = decodeResp(t, r.body)
	checkPrompt("chat", cc.PromptLogprobs, cc.Usage.PromptTokens, 1)
	// An echo asks for them as vLLM's does: at the answer's count
	// (completions' logprobs, chat's top_logprobs), in a whole answer.
	r = post(t, u+"/v1/completions", `{"prompt":"`+prompt+`","max_tokens":2,"echo":true,"logprobs":3}`)
	c = decodeResp(t, r.body)
	checkPrompt("completions echo", c.Choices[0].PromptLogprobs, c.Usage.PromptTokens, 3)
	r = post(t, u+"/v1/chat/completions", `{"messages":[{"role":"user","content":"`+prompt+`"}],"max_tokens":2,"echo":true}`)
	cc = decodeResp(t, r.body)
	checkPrompt("chat echo", cc.PromptLogprobs, cc.Usage.PromptTokens, 1)
	for body, param := range map[string]string{
		`{"prompt":"x","prompt_logprobs":1,"stream":true}`:                                "prompt_logprobs",
		`{"prompt":"x","prompt_logprobs":-1,"stream":true}`:                               "prompt_logprobs",
		`{"prompt":"x","prompt_logprobs":-2}`:                                             "prompt_logprobs",
		`{"prompt":"x","logprobs":21}`:                                                    "logprobs",
		`{"messages":[{"role":"user","content":"hi"}],"top_logprobs":2}`:                  "top_logprobs",
		`{"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":-1}`: "top_logprobs",
	} {
		path := "/v1/completions"
		if strings.Contains(body, "messages") {
			path = "/v1/chat/completions"
		}
		if r := post(t, u+path, body); r.status != 400 || !bytes.Contains(r.body, []byte(`"param":"`+param+`"`)) {
			t.Errorf("%s: %d %s: expected a 400 naming %s", body, r.status, r.body, param)
		}
	}
}
