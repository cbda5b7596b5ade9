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
func NewTransport(idlePerHost int) *http.Transport {
	return &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: idlePerHost,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
}
