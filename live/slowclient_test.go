package live

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/live/stub"
)

// A client that stops reading a long stream (its socket stays open) is no
// engine's fault: the router's read timeout times the engine only, so the
// engine is neither charged a timeout nor probed; a write to the client
// that cannot complete within the read timeout ends the request (a
// cancel), so it stops holding an in-flight slot and its engine's decode
// at once, not when the client reads again. A client that reads slowly but
// steadily gets its whole answer.
func TestStalledClientNotEngineFault(t *testing.T) {
	r := startRig(t, rigOpts{n: 2, arm: "static:1P1D", stub: stub.Options{TimeScale: zero()},
		configure: func(c *Config) { c.ReadTimeout = time.Second }})
	addr := strings.TrimPrefix(r.url, "http://")
	send := func(maxTokens int, stall bool) (*net.TCPConn, *bufio.Reader) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		tc := c.(*net.TCPConn)
		if stall {
			// Small, so that the stalled stream fills it soon. (Not for a
			// reader that reads: a window this small closes, and TCP's
			// probes of a closed window back off past a second.)
			_ = tc.SetReadBuffer(4096)
		}
		body := fmt.Sprintf(`{"model":"stub","prompt":"a long answer please","max_tokens":%d,"stream":true}`, maxTokens)
		fmt.Fprintf(tc, "POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", addr, len(body), body)
		return tc, bufio.NewReaderSize(tc, 4096)
	}

	// Stalled: it reads nothing for seconds.
	c, _ := send(30000, true)
	defer c.Close()
	waitFor(t, "the stalled request to end", func() bool {
		st, _ := r.router.State()
		return st.Counts.Arrived == 1 && st.Counts.InFlight == 0
	})
	st, _ := r.router.State()
	if st.Counts.Cancelled != 1 {
		t.Errorf("counts %+v: expected the stalled request cancelled", st.Counts)
	}

	// Slow but steady: 4 KB every 20 ms, well within the read timeout.
	c2, br := send(1000, false)
	defer c2.Close()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		got.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("slow reader: %v after %d bytes", err, got.Len())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.HasSuffix(strings.TrimSpace(got.String()), "data: [DONE]") || strings.Contains(got.String(), `"error"`) {
		t.Errorf("the slow reader's stream did not end whole: ...%s", got.String()[max(0, got.Len()-300):])
	}

	for _, m := range family(t, r, "narwhal_engine_failures_total").GetMetric() {
		if m.GetCounter().GetValue() != 0 {
			t.Errorf("engine failure counted for a client's pace: %v", m)
		}
	}
	r.stop()
	rows := checkJournal(t, r.jr.records())
	if len(rows) != 2 || rows[0].Terminal != event.KindFinish || rows[0].Cause != event.CauseCancel ||
		rows[1].Terminal != event.KindFinish || rows[1].OutputTokens != 1000 {
		t.Fatalf("rows %+v: expected the stalled one cancelled, the slow one finished with 1000 tokens", rows)
	}
}

// A body sent a byte at a time is cut at the body timeout (408), so it
// cannot hold a connection and a tenant's slot for good; the deadline is
// the body's only, so an answer streaming past it is not cut. A class
// header past its bound, or not printable ASCII, is refused: it
// would be journaled with the request.
func TestBodyTimeoutAndClassBound(t *testing.T) {
	scale := 1.0
	r := startRig(t, rigOpts{n: 2, arm: "static:1P1D", stub: stub.Options{TimeScale: &scale},
		configure: func(c *Config) { c.BodyTimeout = 300 * time.Millisecond }})
	addr := strings.TrimPrefix(r.url, "http://")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{", addr)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("a body that never arrives: %v, %v: expected 408", resp, err)
	}

	// Streams for about a second, well past the body timeout.
	resp = post(t, r, "/v1/completions", `{"model":"stub","prompt":"a while","max_tokens":300,"min_tokens":300,"stream":true}`, nil)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasSuffix(strings.TrimSpace(string(b)), "data: [DONE]") || strings.Contains(string(b), `"error"`) {
		t.Fatalf("a stream longer than the body timeout: status %d, ...%s", resp.StatusCode, b[max(0, len(b)-200):])
	}

	for _, class := range []string{strings.Repeat("c", 129), "cl\xe9ss"} {
		resp := post(t, r, "/v1/completions", `{"model":"stub","prompt":"classy","max_tokens":2}`, map[string]string{HeaderClass: class})
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), HeaderClass) {
			t.Errorf("class %q: status %d, %s: expected a 400 naming the header", class[:min(len(class), 10)], resp.StatusCode, b)
		}
	}
	r.stop()
	rows := checkJournal(t, r.jr.records())
	if len(rows) != 1 || rows[0].Terminal != event.KindFinish || rows[0].OutputTokens != 300 {
		t.Fatalf("rows %+v: expected the one stream, finished with 300 tokens", rows)
	}
}

// An engine that stalls mid-stream: the client still gets the error event
// that says why its stream ends, then [DONE] (the relay's write deadline
// bounds its own writes only, never the wait for the engine), and the
// request is journaled a timeout, charged to the engine.
func TestEngineStallMidStreamSaid(t *testing.T) {
	r := startRig(t, rigOpts{n: 1, arm: "aggregated", stub: stub.Options{TimeScale: zero()},
		configure: func(c *Config) {
			c.ReadTimeout = 300 * time.Millisecond
			interpose(t, c, 0, func(w http.ResponseWriter, q *http.Request, body []byte, engine http.Handler) {
				if !strings.HasSuffix(q.URL.Path, "/completions") {
					engine.ServeHTTP(w, q)
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(http.StatusOK)
				for k := 0; k < 3; k++ {
					fmt.Fprint(w, `data: {"id":"x","object":"text_completion","choices":[{"index":0,"text":"a","finish_reason":null}]}`+"\n\n")
					w.(http.Flusher).Flush()
				}
				<-q.Context().Done() // then nothing: a stuck engine
			})
		}})
	resp := post(t, r, "/v1/completions", `{"model":"stub","prompt":"stall","max_tokens":50,"stream":true}`, nil)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !strings.Contains(string(b), `"error"`) || !strings.HasSuffix(strings.TrimSpace(string(b)), "data: [DONE]") {
		t.Fatalf("a stream the engine stalled: %v, body:\n%s\nexpected an error event, then [DONE]", err, b)
	}
	r.stop()
	rows := checkJournal(t, r.jr.records())
	if len(rows) != 1 || rows[0].Terminal != event.KindFail || rows[0].Cause != event.CauseTimeout {
		t.Fatalf("rows %+v: expected one timeout failure", rows)
	}
}

// A client that stops reading until past its request's deadline is
// journaled a timeout (the deadline, not the client's hanging up), and
// no engine is blamed.
func TestStalledPastDeadlineIsTimeout(t *testing.T) {
	r := startRig(t, rigOpts{n: 2, arm: "static:1P1D", stub: stub.Options{TimeScale: zero()},
		configure: func(c *Config) { c.RequestTimeout = time.Second }})
	addr := strings.TrimPrefix(r.url, "http://")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetReadBuffer(4096)
	body := `{"model":"stub","prompt":"a long answer please","max_tokens":30000,"stream":true}`
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", addr, len(body), body)
	waitFor(t, "the stalled request to end", func() bool {
		st, _ := r.router.State()
		return st.Counts.Arrived == 1 && st.Counts.InFlight == 0
	})
	for _, m := range family(t, r, "narwhal_engine_failures_total").GetMetric() {
		if m.GetCounter().GetValue() != 0 {
			t.Errorf("engine failure counted for a client's stall: %v", m)
		}
	}
	r.stop()
	rows := checkJournal(t, r.jr.records())
	if len(rows) != 1 || rows[0].Terminal != event.KindFail || rows[0].Cause != event.CauseTimeout {
		t.Fatalf("rows %+v: expected fail timeout", rows)
	}
}

// Over HTTP/2 (a TLS front, as serve --tls-cert serves it), where the
// relay sets the client's write deadline before each write and clears it
// after (one left set resets an HTTP/2 stream when it passes, write or
// not; under HTTP/1 it moves it lazily, writeBy): a stream with gaps
// between its tokens arrives whole, and one its engine stalls ends with
// the error event that says why.
func TestStreamOverHTTP2(t *testing.T) {
	r := startRig(t, rigOpts{n: 1, arm: "aggregated", stub: stub.Options{TimeScale: zero()},
		configure: func(c *Config) {
			c.ReadTimeout = time.Second // gaps of 100 ms: far under it on a loaded machine
			interpose(t, c, 0, func(w http.ResponseWriter, q *http.Request, body []byte, engine http.Handler) {
				if !strings.HasSuffix(q.URL.Path, "/completions") {
					engine.ServeHTTP(w, q)
					return
				}
				stall := strings.Contains(string(body), `"stall"`)
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(http.StatusOK)
				for k := 0; k < 5; k++ {
					fmt.Fprint(w, `data: {"id":"x","object":"text_completion","choices":[{"index":0,"text":"a","finish_reason":null}]}`+"\n\n")
					w.(http.Flusher).Flush()
					time.Sleep(100 * time.Millisecond)
				}
				if stall {
					<-q.Context().Done()
					return
				}
				fmt.Fprint(w, `data: {"id":"x","object":"text_completion","choices":[{"index":0,"text":"b","finish_reason":"length"}]}`+"\n\ndata: [DONE]\n\n")
			})
		}})
	front := httptest.NewUnstartedServer(r.router.Handler())
	front.EnableHTTP2 = true
	front.StartTLS()
	defer front.Close()
	for _, prompt := range []string{"whole", "stall"} {
		resp, err := front.Client().Post(front.URL+"/v1/completions", "application/json",
			strings.NewReader(fmt.Sprintf(`{"model":"stub","prompt":%q,"max_tokens":6,"stream":true}`, prompt)))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.ProtoMajor != 2 || !strings.HasSuffix(strings.TrimSpace(string(b)), "data: [DONE]") ||
			strings.Count(string(b), `"text":"a"`) != 5 || strings.Contains(string(b), `"error"`) != (prompt == "stall") {
			t.Fatalf("%s over HTTP/%d: %v, body:\n%s", prompt, resp.ProtoMajor, err, b)
		}
	}
	r.stop()
	rows := checkJournal(t, r.jr.records())
	if len(rows) != 2 || rows[0].Terminal != event.KindFinish || rows[0].OutputTokens != 6 ||
		rows[1].Terminal != event.KindFail || rows[1].Cause != event.CauseTimeout {
		t.Fatalf("rows %+v: expected the whole stream finished with 6 tokens, the stalled one a timeout", rows)
	}
}
