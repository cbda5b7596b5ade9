package stub

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/narwhal-bench/narwhal-bench/live/api"
)

// Restart stops the server as a crash does (listener closed, every
// connection dropped, pinned KV lost) and serves again on the same
// address as a new process: a later process_start_time_seconds (and /health
// generation), healthy faults, nothing pinned. Tests use it, and a
// crash_after fault with restart_after_ms schedules it.
func (s *Server) Restart() error {
	s.mu.Lock()
	srv, ln := s.http, s.ln
	s.mu.Unlock()
	if ln == nil {
		return fmt.Errorf("stub %s: restart: not listening", s.id)
	}
	s.crashed.Store(true)
	s.handoffs.clear()
	if srv != nil {
		_ = srv.Close()
	}
	addr := ln.Addr().String()
	// A new process start, strictly later than the last one.
	for {
		prev, now := s.started.Load(), time.Now().UnixNano()
		if s.started.CompareAndSwap(prev, max(now, prev+1)) {
			break
		}
	}
	var nl net.Listener
	var err error
	for try := 0; try < 50; try++ { // the old socket may take a moment to go
		if nl, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("stub %s: restart: listen %s: %w", s.id, addr, err)
	}
	nsrv := &http.Server{Handler: s.mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: api.EngineKeepAlive}
	s.mu.Lock()
	s.ln, s.http = nl, nsrv
	s.faults, s.served = Faults{}, 0
	s.mu.Unlock()
	s.crashed.Store(false)
	s.logf("stub %s: restarted at %s", s.id, addr)
	go func() { _ = nsrv.Serve(nl) }()
	return nil
}

// restartLater restarts the server after d unless it was closed.
func (s *Server) restartLater(d time.Duration) {
	go func() {
		select {
		case <-time.After(d):
			if err := s.Restart(); err != nil {
				s.logf("%v", err)
			}
		case <-s.quit:
		}
	}()
}

// Kill crashes the server now, as kill -9 of the engine process would
// (listener closed, connections dropped, pinned KV lost); Restart brings it
// back as a new process.
func (s *Server) Kill() {
	if s.crash() {
		s.mu.Lock()
		srv := s.http
		s.mu.Unlock()
		if srv != nil {
			_ = srv.Close() // at once, not in the background
		}
	}
}
