package live

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/narwhal-bench/narwhal-bench/internal/staleserver"
	"github.com/narwhal-bench/narwhal-bench/live/api"
)

// staleEngine serves the first request of each connection; on the next
// one it does what close says (after reading the request or not), so a
// reused connection ends without an answer. reads counts the requests
// answered.
func staleEngine(t *testing.T, close func(c net.Conn, br *bufio.Reader)) (url string, conns, reads *atomic.Int64) {
	s := staleserver.Start(t, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
		staleserver.Always(func(c *net.TCPConn, br *bufio.Reader) { close(c, br) }))
	return s.URL + "/v1/completions", &s.Conns, &s.Answered
}

// stalePoster posts a leg through one pooled client, as the router does,
// reading any answer whole.
func stalePoster() func(url string) error {
	client := &http.Client{Transport: NewTransport()}
	return func(url string) error {
		resp, err := postEngine(context.Background(), client, url, []byte(`{"prompt":"x"}`), "req")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return err
	}
}

// An engine leg written onto a pooled connection that the engine closes
// as the leg arrives (an idle close racing the reuse) is sent again on a
// new connection, not failed against a healthy engine; one that fails
// later, or after any byte of an answer, is not (a prefill is not run
// twice for a late failure).
func TestLegRetriedOnStaleConnection(t *testing.T) {
	post := stalePoster()
	// Reset unread as it arrives: sent again.
	url, conns, reads := staleEngine(t, func(c net.Conn, br *bufio.Reader) {
		br.Peek(1) // the request is there, unread
		c.(*net.TCPConn).SetLinger(0)
	})
	for i := 0; i < 3; i++ {
		if err := post(url); err != nil {
			t.Fatalf("reset unread, request %d: %v: expected it sent again on a new connection", i, err)
		}
	}
	if conns.Load() != 3 || reads.Load() != 3 {
		t.Errorf("reset unread: %d connections, %d requests read: expected 3 and 3 (each reuse dropped, each request sent again once)", conns.Load(), reads.Load())
	}
	// Closed at once: sent again.
	url, _, _ = staleEngine(t, func(c net.Conn, br *bufio.Reader) {
		if q, err := http.ReadRequest(br); err == nil {
			io.Copy(io.Discard, q.Body)
		}
	})
	for i := 0; i < 2; i++ {
		if err := post(url); err != nil {
			t.Fatalf("closed at once, request %d: %v", i, err)
		}
	}
	// Read, then ended late, by a close or a reset (an engine or a load
	// balancer ending a request it had taken); or a partial answer, then
	// a close: not sent again.
	for name, end := range map[string]func(c net.Conn){
		"closed late":    func(c net.Conn) { time.Sleep(4 * api.StaleWindow) },
		"reset late":     func(c net.Conn) { time.Sleep(4 * api.StaleWindow); c.(*net.TCPConn).SetLinger(0) },
		"partial answer": func(c net.Conn) { io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: app") },
	} {
		var second atomic.Int64 // the reused connection's request, read
		url, conns, reads := staleEngine(t, func(c net.Conn, br *bufio.Reader) {
			if q, err := http.ReadRequest(br); err == nil {
				io.Copy(io.Discard, q.Body)
				second.Add(1)
			}
			end(c)
		})
		if err := post(url); err != nil {
			t.Fatal(err)
		}
		if err := post(url); err == nil {
			t.Fatalf("%s: the request was sent again", name)
		}
		if conns.Load() != 1 || reads.Load()+second.Load() != 2 {
			t.Errorf("%s: %d connections, %d requests read: expected 1 and 2", name, conns.Load(), reads.Load()+second.Load())
		}
	}
}

// A reset or an EOF seen late (past api.StaleWindow), with no answer, on a
// connection whose request before was sent at least a keep-alive earlier
// is sent again: the engine may have closed it idle, which a router
// relaying a slow client's stream, or short of CPU, sees late. The same
// failure on a connection used just before is not (TestLegRetriedOnStaleConnection).
func TestLegRetriedAfterKeepAlive(t *testing.T) {
	defer func(d time.Duration) { idleCloseAfter = d }(idleCloseAfter)
	idleCloseAfter = 300 * time.Millisecond
	post := stalePoster()
	// The engine ends the reused connection late, without reading the
	// request (its idle close, as the router sees it when late).
	url, conns, reads := staleEngine(t, func(c net.Conn, br *bufio.Reader) {
		br.Peek(1)
		time.Sleep(4 * api.StaleWindow)
	})
	if err := post(url); err != nil {
		t.Fatal(err)
	}
	time.Sleep(idleCloseAfter + 50*time.Millisecond) // a keep-alive since the request before
	if err := post(url); err != nil {
		t.Fatalf("late close after a keep-alive: %v: expected the leg sent again", err)
	}
	if conns.Load() != 2 || reads.Load() != 2 {
		t.Errorf("%d connections, %d requests read: expected 2 and 2", conns.Load(), reads.Load())
	}
	// The same close right after the request before: failed, not sent again.
	url, conns, reads = staleEngine(t, func(c net.Conn, br *bufio.Reader) {
		br.Peek(1)
		time.Sleep(4 * api.StaleWindow)
	})
	if err := post(url); err != nil {
		t.Fatal(err)
	}
	if err := post(url); err == nil {
		t.Fatal("late close on a connection used just before: sent again")
	}
	if conns.Load() != 1 || reads.Load() != 1 {
		t.Errorf("%d connections, %d requests read: expected 1 and 1", conns.Load(), reads.Load())
	}
}
