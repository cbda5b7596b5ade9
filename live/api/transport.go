package api

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// NewTransport is an HTTP transport for OpenAI traffic with many streams
// at once (a router's engine legs, a load generator's requests):
// keep-alive connections pooled per host, up to idlePerHost idle ones, no
// compression (server-sent events must flow token by token), no proxy.
// An idle connection is dropped after IdleConnTimeout (3 s), under the 5 s
// after which vLLM's server (uvicorn, VLLM_HTTP_TIMEOUT_KEEP_ALIVE) closes
// one: a request written onto a connection the engine is closing fails
// with EOF, which Go does not retry for a POST, and the router would count
// a failure against a healthy engine (the router also sends such a leg
// again itself when the failure shows it was not read: live.postEngine).
func NewTransport(idlePerHost int) *http.Transport {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &timedConn{Conn: c}, nil
		},
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: idlePerHost,
		IdleConnTimeout:     IdleConnTimeout,
		TLSHandshakeTimeout: 10 * time.Second,
		DisableCompression:  true,
	}
}

// IdleConnTimeout is how long NewTransport keeps an idle connection.
const IdleConnTimeout = 3 * time.Second

// EngineKeepAlive is how long vLLM's server keeps an idle client
// connection open (uvicorn's timeout_keep_alive as vLLM sets it); the stub
// engines close theirs after as long.
const EngineKeepAlive = 5 * time.Second

// ServerIdleTimeout is how long the router keeps an idle client connection
// open: longer than the usual clients' own pools keep one (Go's 90 s,
// httpx's 5 s), so a client never writes onto one the router is closing.
const ServerIdleTimeout = 120 * time.Second

// timedConn is a connection that remembers when it was last written.
type timedConn struct {
	net.Conn
	wrote atomic.Int64 // unix ns of the last Write
}

func (c *timedConn) Write(b []byte) (int, error) {
	c.wrote.Store(time.Now().UnixNano())
	return c.Conn.Write(b)
}

// LastWrite is when conn, a connection NewTransport dialed (as httptrace's
// GotConnInfo gives it, under TLS or not), was last written: for a pooled
// connection just taken, when the request before was sent. An engine
// cannot have finished that request's answer before then, so it cannot
// have closed the connection idle before LastWrite plus its keep-alive.
// ok is false for a connection NewTransport did not dial.
func LastWrite(conn net.Conn) (t time.Time, ok bool) {
	if tc, isTLS := conn.(*tls.Conn); isTLS {
		conn = tc.NetConn()
	}
	c, ok := conn.(*timedConn)
	if !ok || c.wrote.Load() == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, c.wrote.Load()), true
}
