package stub

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-bench/narwhal-bench/engine"
	"github.com/narwhal-bench/narwhal-bench/live/api"
	"github.com/narwhal-bench/narwhal-bench/timing"
)

const client = `{"model":"stub","prompt":"` + "a prompt of some length for the handoff test" + `","max_tokens":6,"stream":true,"stream_options":{"include_usage":true},"min_tokens":2}`

// prefill sends the prefill leg (protocol §2) and returns the handoff.
func prefill(t *testing.T, url, rid string) json.RawMessage {
	t.Helper()
	req, e := api.Decode([]byte(client), false)
	if e != nil {
		t.Fatal(e)
	}
	body, _ := api.PrefillBody(req.Raw)
	r := post(t, url+"/v1/completions", string(body), "X-Request-Id", rid)
	if r.status != 200 {
		t.Fatalf("prefill: %d %s", r.status, r.body)
	}
	c := decodeResp(t, r.body)
	if c.Usage.CompletionTokens != 1 || *c.Choices[0].FinishReason != "length" {
		t.Errorf("prefill answer %s", r.body)
	}
	return api.Handoff(r.body)
}

func decodeLeg(t *testing.T, url, rid string, handoff json.RawMessage) result {
	t.Helper()
	req, _ := api.Decode([]byte(client), false)
	body, err := api.DecodeBody(req.Raw, handoff)
	if err != nil {
		t.Fatal(err)
	}
	return post(t, url+"/v1/completions", string(body), "X-Request-Id", rid)
}

func TestTwoLegHandoff(t *testing.T) {
	f := startFleet(t, 2, Options{})
	p, d := f.Servers()[0], f.Servers()[1]
	h := prefill(t, p.URL(), "r1")
	var kv map[string]json.RawMessage
	if err := json.Unmarshal(h, &kv); err != nil {
		t.Fatalf("handoff %s: %v", h, err)
	}
	host, port := p.sideChannel()
	for field, want := range map[string]string{
		"do_remote_prefill": "true", "do_remote_decode": "false", "remote_engine_id": `"e0"`,
		"remote_block_ids": "[[1]]", "remote_host": `"` + host + `"`, "remote_port": jsonInt(port),
		"tp_size": "1", "dcp_size": "1", "pp_size": "1", "remote_num_tokens": "11",
		"remote_blocks_expiry_time": "null", "transfer_mode": `"pull"`,
	} {
		if got := string(kv[field]); got != want {
			t.Errorf("handoff %s = %s, want %s", field, got, want)
		}
	}
	if rr := string(kv["remote_request_id"]); !strings.HasPrefix(rr, `"cmpl-r1-`) {
		t.Errorf("remote_request_id %s: expected cmpl-r1-<suffix>", rr)
	}
	if len(kv) != 13 {
		t.Errorf("handoff has %d fields, want 13: %s", len(kv), h)
	}
	if p.PinnedTokens() != 11 {
		t.Errorf("pinned %d, want 11", p.PinnedTokens())
	}
	r := decodeLeg(t, d.URL(), "r1", h)
	if r.status != 200 {
		t.Fatalf("decode leg: %d %s", r.status, r.body)
	}
	evs := events(t, r.body)
	if len(evs) != 7 || evs[6].Usage.CompletionTokens != 6 {
		t.Errorf("decode leg: %d events: %s", len(evs), r.body)
	}
	if p.PinnedTokens() != 0 {
		t.Errorf("prefill engine still pins %d tokens", p.PinnedTokens())
	}
	// The same handoff again: already taken, and the default policy fails.
	r = decodeLeg(t, d.URL(), "r1", h)
	if e := api.ParseError(r.status, r.body); r.status != 500 || e == nil || !strings.Contains(e.Message, "already taken") {
		t.Errorf("double take: %d %s", r.status, r.body)
	}
	// A handoff naming an engine nobody knows (the pull goes over HTTP to
	// its side channel, which is this prefill engine under another id).
	var bad map[string]any
	_ = json.Unmarshal(h, &bad)
	bad["remote_engine_id"] = "nobody"
	hb, _ := json.Marshal(bad)
	if r := decodeLeg(t, d.URL(), "r1", hb); r.status != 500 || !strings.Contains(string(r.body), "another engine") {
		t.Errorf("unknown engine: %d %s", r.status, r.body)
	}
	// Invalid params (no host or port): vLLM silently recomputes.
	if r := decodeLeg(t, d.URL(), "r2", json.RawMessage(`{"do_remote_prefill":true,"remote_engine_id":"e0"}`)); r.status != 200 {
		t.Errorf("invalid params: %d %s", r.status, r.body)
	}
	// An ordinary request on the same engine: no handoff, prefill and decode here.
	req, _ := api.Decode([]byte(client), false)
	plain, _ := api.PlainBody(req.Raw)
	if r := post(t, p.URL()+"/v1/completions", string(plain)); r.status != 200 || len(events(t, r.body)) != 7 {
		t.Errorf("plain: %d %s", r.status, r.body)
	}
}

func jsonInt(n int) string { b, _ := json.Marshal(n); return string(b) }

// Separate processes: two fleets know nothing of each other, so the
// decode engine pulls over HTTP from the side channel the handoff names.
func TestPullOverHTTP(t *testing.T) {
	p := startFleet(t, 1, Options{}).Servers()[0]
	d := startNamed(t, "d", 1, Options{}).Servers()[0]
	h := prefill(t, p.URL(), "x")
	if r := decodeLeg(t, d.URL(), "x", h); r.status != 200 || len(events(t, r.body)) != 7 {
		t.Fatalf("decode over HTTP: %d %s", r.status, r.body)
	}
	if p.PinnedTokens() != 0 {
		t.Error("blocks not freed")
	}
	if r := decodeLeg(t, d.URL(), "x", h); r.status != 500 || !strings.Contains(string(r.body), "already taken") {
		t.Errorf("double take over HTTP: %d %s", r.status, r.body)
	}
}

func TestLeaseExpiryRenewRecompute(t *testing.T) {
	f := startFleet(t, 2, Options{Lease: 200 * time.Millisecond})
	p, d := f.Servers()[0], f.Servers()[1]
	h := prefill(t, p.URL(), "late")
	var kv api.KVTransferParams
	_ = json.Unmarshal(h, &kv)
	if err := p.RenewHandoff(*kv.RemoteRequestID); err != nil {
		t.Errorf("renew: %v", err)
	}
	waitFor(t, "the lease to expire", func() bool { return p.PinnedTokens() == 0 })
	if err := p.RenewHandoff(*kv.RemoteRequestID); err != ErrExpiredHandoff {
		t.Errorf("renew after expiry: %v", err)
	}
	if r := decodeLeg(t, d.URL(), "late", h); r.status != 500 || !strings.Contains(string(r.body), "expired") {
		t.Errorf("expired handoff: %d %s", r.status, r.body)
	}
	// With the recompute policy the same request prefills on the decode engine.
	g := startFleet(t, 2, Options{Lease: time.Millisecond, KVLoadFailurePolicy: PolicyRecompute})
	h = prefill(t, g.Servers()[0].URL(), "late2")
	waitFor(t, "the lease to expire", func() bool { return g.Servers()[0].PinnedTokens() == 0 })
	if r := decodeLeg(t, g.Servers()[1].URL(), "late2", h); r.status != 200 || len(events(t, r.body)) != 7 {
		t.Errorf("recompute: %d %s", r.status, r.body)
	}
}

func setFaults(t *testing.T, url, body string) {
	t.Helper()
	if r := post(t, url+"/stub/faults", body); r.status != 200 {
		t.Fatalf("faults %s: %d %s", body, r.status, r.body)
	}
}

func TestFaults(t *testing.T) {
	f := startFleet(t, 2, Options{})
	s := f.Servers()[0]
	u := s.URL()

	setFaults(t, u, `{"refuse":true}`)
	r := post(t, u+"/v1/completions", `{"prompt":"x"}`)
	if r.status != 503 || r.header.Get("Retry-After") != "1" || api.ParseError(r.status, r.body) == nil {
		t.Errorf("refuse: %d %v %s", r.status, r.header, r.body)
	}

	setFaults(t, u, `{"no_handoff":true}`)
	if h := prefill(t, u, "nh"); h != nil {
		t.Errorf("no_handoff fault returned %s", h)
	}

	setFaults(t, u, `{"break_after":2}`)
	r, err := postRaw(t, u+"/v1/completions", `{"prompt":"x","max_tokens":10,"stream":true}`)
	if err == nil {
		t.Error("broken stream: the body ended cleanly")
	}
	rd := api.NewSSEReader(strings.NewReader(string(r.body)))
	n := 0
	for {
		_, done, err := rd.ReadEvent()
		if done {
			t.Error("broken stream reached [DONE]")
		}
		if err != nil {
			break
		}
		n++
	}
	if n != 2 {
		t.Errorf("broken stream: %d events, want 2", n)
	}
	waitFor(t, "the broken request to leave the engine", func() bool { return s.Gauges().Requests == 0 })

	setFaults(t, u, `{"slow":3}`)
	if r := post(t, u+"/v1/completions", `{"prompt":"x","max_tokens":3}`); r.status != 200 {
		t.Errorf("slow: %d", r.status)
	}

	setFaults(t, u, `{"stall":true}`)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u+"/health", nil)
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		resp.Body.Close()
		t.Error("stalled server answered")
	}
	cancel()

	if r := post(t, u+"/stub/faults", `{"bogus":1}`); r.status != 400 {
		t.Errorf("unknown fault field: %d", r.status)
	}
	setFaults(t, u, `{"crash_after":1}`)
	if r := post(t, u+"/v1/completions", `{"prompt":"x","max_tokens":2}`); r.status != 200 {
		t.Errorf("first request before the crash: %d", r.status)
	}
	resp, err = http.Post(u+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"x"}`))
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Errorf("crashing request answered: %d %s", resp.StatusCode, b)
	}
	waitFor(t, "the crashed server to stop accepting", func() bool {
		resp, err := http.Get(u + "/health")
		if err == nil {
			resp.Body.Close()
		}
		return err != nil
	})
	// The other engine is unaffected.
	if r := post(t, f.Servers()[1].URL()+"/v1/completions", `{"prompt":"x","max_tokens":2}`); r.status != 200 {
		t.Errorf("other engine: %d", r.status)
	}
}

// The router's local decode (an engine turned decode takes the decode of
// a prompt it just prefilled for a handoff: an ordinary request, the
// protocol's "same engine") continues from the KV the engine pins, as
// vLLM's prefix cache finds those blocks and the simulator's local decode
// joins at once: the prompt is not prefilled again. Another prompt is;
// the pin stays for the decode it was made for.
func TestLocalDecodeFromPinnedKV(t *testing.T) {
	pc := engine.PrefixCache{BlockTokens: 16, CapacityTokens: 100_000}
	s := startFleet(t, 1, Options{PrefixCache: &pc}).Servers()[0]
	queries := func() string {
		m := regexp.MustCompile(`(?m)^vllm:prefix_cache_queries_total\{[^}]*\} (\S+)$`).FindStringSubmatch(scrape(t, s.URL()))
		if m == nil {
			t.Fatal("/metrics lacks vllm:prefix_cache_queries_total")
		}
		return m[1]
	}
	prefill(t, s.URL(), "r1")
	if q := queries(); q != "11" {
		t.Fatalf("after the prefill leg: %s prompt tokens looked up, want 11", q)
	}
	r := post(t, s.URL()+"/v1/completions", client, "X-Request-Id", "r1")
	if evs := events(t, r.body); r.status != 200 || len(evs) != 7 || evs[6].Usage.CompletionTokens != 6 {
		t.Fatalf("local decode: %d %s", r.status, r.body)
	}
	if q := queries(); q != "11" {
		t.Fatalf("after the local decode: %s prompt tokens looked up, want 11 (no second prefill)", q)
	}
	if s.PinnedTokens() != 11 {
		t.Errorf("pinned %d after the local decode, want 11 (the pin stays until taken or expired)", s.PinnedTokens())
	}
	other := strings.Replace(client, "for the handoff test", "for another test", 1)
	post(t, s.URL()+"/v1/completions", other, "X-Request-Id", "r2")
	if q := queries(); q == "11" {
		t.Error("another prompt was not prefilled")
	}
}

// metricSums reads the named series of a server's /metrics, summed.
func metricSums(t *testing.T, url string, names ...string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return api.MetricSums(string(b), names...)
}

// The engine that pulls counts each KV transfer in vLLM's NIXL connector
// metrics, and each failed one; a handoff naming a wrong side channel
// (the side_channel fault, a misconfigured VLLM_NIXL_SIDE_CHANNEL_HOST)
// fails the pull even between engines of one process: an error under
// kv_load_failure_policy fail, a silent recompute under recompute, which
// only the failure counter shows.
func TestNixlMetricsAndSideChannel(t *testing.T) {
	const count, bytesSum, failed = "vllm:nixl_xfer_time_seconds_count", "vllm:nixl_bytes_transferred_sum", "vllm:nixl_num_failed_transfers_total"
	for _, policy := range []string{PolicyFail, PolicyRecompute} {
		t.Run(policy, func(t *testing.T) {
			f := startFleet(t, 2, Options{KVLoadFailurePolicy: policy, KV: timing.KV{Latency: 0.01, BytesPerToken: 1000, Bandwidth: 1e9}})
			p, d := f.Servers()[0], f.Servers()[1]
			m := metricSums(t, d.URL(), count, bytesSum, failed)
			if len(m) != 3 || m[count] != 0 || m[failed] != 0 {
				t.Fatalf("before any transfer: %v", m)
			}
			if r := decodeLeg(t, d.URL(), "good", prefill(t, p.URL(), "good")); r.status != 200 {
				t.Fatalf("decode: %d %s", r.status, r.body)
			}
			m = metricSums(t, d.URL(), count, bytesSum, failed)
			if m[count] != 1 || m[bytesSum] <= 0 || m[failed] != 0 {
				t.Fatalf("after one transfer: %v", m)
			}
			if m := metricSums(t, p.URL(), count, failed); m[count] != 0 || m[failed] != 0 {
				t.Errorf("the prefill engine counted a transfer: %v", m)
			}

			p.SetFaults(Faults{SideChannel: "localhost:1"})
			h := prefill(t, p.URL(), "wrong")
			var kv api.KVTransferParams
			if err := json.Unmarshal(h, &kv); err != nil || *kv.RemoteHost != "localhost" || *kv.RemotePort != 1 {
				t.Fatalf("handoff %s: %v", h, err)
			}
			r := decodeLeg(t, d.URL(), "wrong", h)
			switch policy {
			case PolicyFail:
				if r.status != 500 || !strings.Contains(string(r.body), "kv load failed") {
					t.Errorf("pull from a wrong side channel: %d %s", r.status, r.body)
				}
			case PolicyRecompute:
				if r.status != 200 {
					t.Errorf("recompute: %d %s", r.status, r.body)
				}
			}
			if m := metricSums(t, d.URL(), count, failed); m[count] != 1 || m[failed] != 1 {
				t.Errorf("after a failed pull: %v", m)
			}
		})
	}
	// A side channel that is not HOST:PORT is refused.
	f := startFleet(t, 1, Options{})
	if r := post(t, f.Servers()[0].URL()+"/stub/faults", `{"side_channel":"nowhere"}`); r.status != 400 || !strings.Contains(string(r.body), "side_channel") {
		t.Errorf("bad side channel: %d %s", r.status, r.body)
	}
}
