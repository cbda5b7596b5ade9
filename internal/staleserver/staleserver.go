// Package staleserver serves HTTP/1.1 on loopback for the tests of a
// client that sends a request again when the server closed its pooled
// connection idle (live/api.DoResending: the router's engine legs, the
// load generator's requests). It answers requests over keep-alive
// connections, and lets a test end a connection instead of answering a
// request that comes on it after an answer, as a server that closes idle
// connections, or that ends a request it had read, would. Nothing but
// tests imports it.
package staleserver

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// Server is a running server.
type Server struct {
	// URL is its base URL, http://HOST:PORT.
	URL string
	// Conns counts the connections accepted; Answered the requests
	// answered.
	Conns, Answered atomic.Int64
}

// Start serves until t ends. answer is the whole HTTP/1.1 response (status
// line, headers, body) every answered request gets. A request that comes
// on a connection that answered one before is handed, unread, to next
// with how long the connection sat idle since that answer (counted to the
// request's first byte): when next returns a function, that function ends
// the connection instead of an answer (reading the request first, or
// not); when it returns nil, the request is answered.
func Start(t testing.TB, answer string, next func(idle time.Duration) func(c *net.TCPConn, br *bufio.Reader)) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	s := &Server{URL: "http://" + ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.Conns.Add(1)
			go s.serve(c.(*net.TCPConn), answer, next)
		}
	}()
	return s
}

func (s *Server) serve(c *net.TCPConn, answer string, next func(time.Duration) func(*net.TCPConn, *bufio.Reader)) {
	defer c.Close()
	br := bufio.NewReader(c)
	var answered time.Time // zero: nothing answered on c yet
	for {
		if _, err := br.Peek(1); err != nil {
			return
		}
		if !answered.IsZero() {
			if end := next(time.Since(answered)); end != nil {
				end(c, br)
				return
			}
		}
		q, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, q.Body)
		s.Answered.Add(1) // before the answer: a client that has it finds it counted
		if _, err := io.WriteString(c, answer); err != nil {
			return
		}
		answered = time.Now()
	}
}

// Always is a next for Start that ends every connection's second request
// with end.
func Always(end func(c *net.TCPConn, br *bufio.Reader)) func(time.Duration) func(*net.TCPConn, *bufio.Reader) {
	return func(time.Duration) func(*net.TCPConn, *bufio.Reader) { return end }
}

// ReadRequest reads the request at br whole, as a server that takes it
// does; false when none came.
func ReadRequest(br *bufio.Reader) bool {
	q, err := http.ReadRequest(br)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, q.Body)
	return true
}
