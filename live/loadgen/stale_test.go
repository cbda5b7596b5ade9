package loadgen

import (
	"bufio"
	"context"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/narwhal-bench/narwhal-bench/internal/staleserver"
	"github.com/narwhal-bench/narwhal-bench/live/api"
)

// sseAnswer is a whole streamed completion of two tokens.
const sseAnswer = "data: {\"id\":\"x\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":null}]}\n\n" +
	"data: {\"id\":\"x\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\"b\",\"finish_reason\":\"length\"}],\"usage\":{\"completion_tokens\":2}}\n\n" +
	"data: [DONE]\n\n"

// sseResponse is sseAnswer's whole HTTP/1.1 response.
var sseResponse = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: " + strconv.Itoa(len(sseAnswer)) + "\r\n\r\n" + sseAnswer

// spacedPlan is n requests, one every gap.
func spacedPlan(n int, gap time.Duration) []Item {
	plan := make([]Item, n)
	for i := range plan {
		plan[i] = Item{At: time.Duration(i) * gap, Input: 4, Output: 2, MinTokens: 2}
	}
	return plan
}

// failures lists the failed outcomes' errors.
func failures(res *Result) []string {
	var errs []string
	for _, o := range res.Outcomes {
		if !o.OK() {
			errs = append(errs, o.Err)
		}
	}
	return errs
}

// A target that closes idle keep-alive connections (vLLM and many proxies
// after 5 s) is no failing server: a request written onto a pooled
// connection as the target closes it idle was never read, and is sent
// again on another connection, not counted as failed. The server here
// closes a connection idle for keepAlive, its close made to cross the
// client's next request on the wire deterministically: the connection
// stays open until that request arrives, and the server, whose close
// the request met, never reads it. The close is seen at once (a reset as
// the request arrives), or late, on a connection whose request before was
// sent a keep-alive earlier (the generator short of CPU sees it late).
func TestRunResendsOnIdleClose(t *testing.T) {
	defer func(d time.Duration) { targetKeepAlive = d }(targetKeepAlive)
	const keepAlive = 100 * time.Millisecond
	targetKeepAlive = keepAlive
	for name, end := range map[string]func(c *net.TCPConn, br *bufio.Reader){
		"reset at once": func(c *net.TCPConn, br *bufio.Reader) { c.SetLinger(0) },
		"closed late":   func(c *net.TCPConn, br *bufio.Reader) { time.Sleep(4 * api.StaleWindow) },
	} {
		srv := staleserver.Start(t, sseResponse, func(idle time.Duration) func(*net.TCPConn, *bufio.Reader) {
			if idle > keepAlive {
				return end
			}
			return nil
		})
		const n = 4
		res, err := Run(context.Background(), Config{URL: srv.URL}, spacedPlan(n, 3*keepAlive))
		if err != nil {
			t.Fatal(err)
		}
		if errs := failures(res); len(errs) > 0 || len(res.Outcomes) != n {
			t.Errorf("%s: %d of %d requests failed (%q): expected each met idle close sent again", name, len(errs), len(res.Outcomes), errs)
		}
		if srv.Answered.Load() != n || srv.Conns.Load() < 2 {
			t.Errorf("%s: %d requests answered on %d connections: expected each of the %d once, the reused connections dropped", name, srv.Answered.Load(), srv.Conns.Load(), n)
		}
	}
}

// A request the target may have read is never sent twice: a close or a
// reset that comes late, after a request on a connection used just before
// (within the keep-alive), or an answer cut after its first bytes, fails
// the request, and the target reads it once.
func TestRunDoesNotResendARequestRead(t *testing.T) {
	for name, end := range map[string]func(c *net.TCPConn){
		"closed late":    func(c *net.TCPConn) { time.Sleep(4 * api.StaleWindow) },
		"reset late":     func(c *net.TCPConn) { time.Sleep(4 * api.StaleWindow); c.SetLinger(0) },
		"partial answer": func(c *net.TCPConn) { io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/ev") },
	} {
		// The second request on a connection is read, then end ends it.
		var second atomic.Int64
		srv := staleserver.Start(t, sseResponse, staleserver.Always(func(c *net.TCPConn, br *bufio.Reader) {
			if staleserver.ReadRequest(br) {
				second.Add(1)
			}
			end(c)
		}))
		res, err := Run(context.Background(), Config{URL: srv.URL}, spacedPlan(2, 200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Outcomes) != 2 || !res.Outcomes[0].OK() || res.Outcomes[1].OK() {
			t.Errorf("%s: outcomes %+v: expected the first to succeed, the second to fail", name, res.Outcomes)
		}
		if read := srv.Answered.Load() + second.Load(); read != 2 {
			t.Errorf("%s: %d requests read: expected 2 (the second not sent again)", name, read)
		}
	}
}
