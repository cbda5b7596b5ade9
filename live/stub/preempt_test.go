package stub

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/engine"
	"github.com/narwhal-bench/narwhal-bench/timing"
)

// startTightKV starts one engine whose KV capacity (350 tokens) holds
// three streams of a 100-token prompt, and returns its URL.
func startTightKV(t *testing.T, timeScale float64) string {
	t.Helper()
	f := startInstances(t, Options{TimeScale: scale(timeScale)}, []Instance{{ID: "e0", Addr: "127.0.0.1:0",
		Engine: engine.Config{Profile: timing.Reference, Batch: engine.Batch{KVCapacityTokens: 350}}}})
	return f.Servers()[0].URL()
}

// idPrompt is a prompt of token ids 1..n, as JSON.
func idPrompt(n int) string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = strconv.Itoa(i + 1)
	}
	return "[" + strings.Join(ids, ",") + "]"
}

// A KV capacity three streams wide under six concurrent streams: the
// engine preempts (recompute), /metrics counts it as vLLM does
// (vllm:num_preemptions_total), and every streamed answer still has each
// of its tokens exactly once.
func TestPreemptionStreamsEveryTokenOnce(t *testing.T) {
	u := startTightKV(t, 0.1)
	body := `{"prompt":` + idPrompt(100) + `,"max_tokens":80,"stream":true,"stream_options":{"include_usage":true}}`
	var wg sync.WaitGroup
	got := make([]result, 6)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _ = postRaw(t, u+"/v1/completions", body)
		}()
	}
	wg.Wait()
	for i, r := range got {
		evs := events(t, r.body)
		if r.status != 200 || len(evs) != 81 || evs[80].Usage == nil || evs[80].Usage.CompletionTokens != 80 {
			t.Fatalf("request %d: %d, %d events: expected 80 tokens and the usage chunk", i, r.status, len(evs))
		}
		for k, e := range evs[:80] {
			if len(e.Choices) != 1 || e.Choices[0].Text == nil || *e.Choices[0].Text == "" {
				t.Fatalf("request %d chunk %d: %+v", i, k, e)
			}
		}
	}
	resp, err := http.Get(u + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`(?m)^vllm:num_preemptions_total\{engine="0",model_name="stub"\} (\d+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("/metrics has no vllm:num_preemptions_total: %s", b)
	}
	if n, _ := strconv.Atoi(string(m[1])); n == 0 || !bytes.Contains(b, []byte("vllm:generation_tokens_total{engine=\"0\",model_name=\"stub\"} 480")) {
		t.Errorf("%s preemptions: expected some, and 480 tokens generated once each\n%s", m[1], grep(b, "vllm:"))
	}
}

func grep(b []byte, s string) string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, s) && !strings.Contains(l, "_bucket") {
			out = append(out, l)
		}
	}
	return fmt.Sprint(out)
}
