package api

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"sync/atomic"
	"syscall"
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
// a failure against a healthy engine (the router and the load generator
// also send such a request again themselves when the failure shows it was
// not read: DoResending).
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

// StaleWindow is how soon after its write a reset or an EOF on a reused
// connection still reads as the server closing that connection idle, not
// as a server (or a middlebox) ending a request it had taken.
const StaleWindow = 250 * time.Millisecond

// MaxStaleTries bounds the tries of one request on pooled connections
// found closed idle (DoResending).
const MaxStaleTries = 4

// DoResending sends q through client, and sends it again when the server
// closed the pooled connection idle under it. A server closes a pooled
// connection idle past its keep-alive (vLLM's 5 s, many proxies'), and a
// request written onto it as it closes was never read; Go's transport
// does not send a POST again, so the request would fail, a failure of the
// client's pool, not of the server. DoResending sends it again when the
// connection was reused, not one byte of an answer came, and the failure
// shows an idle close: Go's own report of one (ServerClosedIdle), or a
// reset or an EOF that came within StaleWindow of the write (a close
// racing the write) or on a connection whose request before q was sent at
// least keepAlive (the server's keep-alive) before q (the server may have
// closed it idle, which a client short of CPU, or reading the answer
// before slowly, sees late; this needs a connection NewTransport dialed,
// LastWrite). The transport may take another pooled connection for the
// next try, as stale as the first when the server closed several at once,
// so q is tried up to MaxStaleTries times while each failure is such a
// close on a reused connection. Anything else (a failure on a new
// connection, a server or a load balancer ending a request it had read
// soon after the one before, a partial answer, a stall) is returned as it
// is: a request the server may have received is never sent twice.
//
// q's body must be one that can be made again (q.GetBody, which
// http.NewRequest sets for a bytes.Reader): one that cannot is sent once.
// q's context bounds every try.
func DoResending(client *http.Client, q *http.Request, keepAlive time.Duration) (*http.Response, error) {
	if q.GetBody == nil && q.Body != nil && q.Body != http.NoBody {
		return client.Do(q)
	}
	if q.Body != nil {
		defer q.Body.Close() // each try sends a body of its own (GetBody)
	}
	ctx := q.Context()
	for try := 1; ; try++ {
		var reused, answered atomic.Bool
		var wrote, before atomic.Int64
		hq := q.Clone(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			GotConn: func(i httptrace.GotConnInfo) {
				reused.Store(i.Reused)
				if t, ok := LastWrite(i.Conn); ok && i.Reused {
					before.Store(t.UnixNano()) // the request before ours on it
				}
			},
			WroteRequest:         func(httptrace.WroteRequestInfo) { wrote.Store(time.Now().UnixNano()) },
			GotFirstResponseByte: func() { answered.Store(true) },
		}))
		if q.GetBody != nil {
			body, err := q.GetBody()
			if err != nil {
				return nil, err
			}
			hq.Body = body
		}
		resp, err := client.Do(hq)
		if err == nil || try >= MaxStaleTries || !reused.Load() || answered.Load() || ctx.Err() != nil {
			return resp, err
		}
		if ServerClosedIdle(err) {
			continue // the server closed it idle: the request was never read, however late this is seen
		}
		if wrote.Load() == 0 {
			return resp, err
		}
		closed := errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF)
		late := time.Since(time.Unix(0, wrote.Load())) >= StaleWindow
		// The server may have closed it idle before our write: its answer
		// to the request before could have ended a keep-alive before it. A
		// client reading that answer slowly (a router relaying a slow
		// client's stream, its own CPU short) pools the connection long
		// after the server's last byte, so the pool's idle time does not
		// show it, and sees the close late.
		mayBeIdle := before.Load() != 0 && wrote.Load()-before.Load() >= int64(keepAlive)
		if !closed || late && !mayBeIdle {
			return resp, err
		}
	}
}

// ServerClosedIdle reports whether err is Go's transport finding that the
// server closed the pooled connection while it sat idle ("http: server
// closed idle connection", its own error, not exported): the request was
// written as the server's close arrived, and the server, which had closed
// it as idle, never read it. Go sends such a request again only when it is
// idempotent, never a POST. A client short of CPU sees it late, past
// StaleWindow, so the time since the write does not decide it.
func ServerClosedIdle(err error) bool {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err != nil && err.Error() == "http: server closed idle connection"
}
