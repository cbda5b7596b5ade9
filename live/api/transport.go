package api

import (
	"net"
	"net/http"
	"time"
)

// NewTransport is an HTTP transport for OpenAI traffic with many streams
// at once (a router's engine legs, a load generator's requests):
// keep-alive connections pooled per host, up to idlePerHost idle ones, no
// compression (server-sent events must flow token by token), no proxy.
// An idle connection is dropped after IdleConnTimeout (4 s), under the 5 s
// after which vLLM's server (uvicorn, VLLM_HTTP_TIMEOUT_KEEP_ALIVE) closes
// one: a request written onto a connection the engine is closing fails
// with EOF, which Go does not retry for a POST, and the router would count
// a failure against a healthy engine (the router also sends such a leg
// again itself when the failure shows it was not read: live.postEngine).
func NewTransport(idlePerHost int) *http.Transport {
	return &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: idlePerHost,
		IdleConnTimeout:     IdleConnTimeout,
		TLSHandshakeTimeout: 10 * time.Second,
		DisableCompression:  true,
	}
}

// IdleConnTimeout is how long NewTransport keeps an idle connection.
const IdleConnTimeout = 4 * time.Second

// EngineKeepAlive is how long vLLM's server keeps an idle client
// connection open (uvicorn's timeout_keep_alive as vLLM sets it); the stub
// engines close theirs after as long.
const EngineKeepAlive = 5 * time.Second

// ServerIdleTimeout is how long the router keeps an idle client connection
// open: longer than the usual clients' own pools keep one (Go's 90 s,
// httpx's 5 s), so a client never writes onto one the router is closing.
const ServerIdleTimeout = 120 * time.Second
