package stub

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/narwhal-bench/narwhal-bench/engine"
	"github.com/narwhal-bench/narwhal-bench/live/api"
	"github.com/narwhal-bench/narwhal-bench/timing"
)

// Options configure every stub engine of a fleet.
type Options struct {
	// Model is the served model name (default "stub"); requests naming
	// another get a 404. A request with no model is served.
	Model string
	// Seed seeds the answers' text (with each prompt).
	Seed uint64
	// TimeScale multiplies every modelled duration (prefill, decode
	// iterations, KV transfers): 1 is the profile's time, 0.01 is 100
	// times faster, 0 costs nothing. Default (nil) 1.
	TimeScale *float64
	// KV prices KV transfers between engines (the fleet's kv).
	KV timing.KV
	// Lease is how long a prefill engine pins a handoff's blocks
	// (default 30 s, vLLM's kv_lease_duration).
	Lease time.Duration
	// KVLoadFailurePolicy is what a decode leg does when the pull fails:
	// "fail" (default: the request errors) or "recompute" (prefill here).
	KVLoadFailurePolicy string
	// MaxModelLen bounds prompt plus output tokens (default 32768).
	MaxModelLen int
	// MeanOutput, when > 0, ends answers with an end-of-sequence after a
	// natural length drawn from 1 to 2·MeanOutput tokens (unless
	// ignore_eos or min_tokens); 0 = answers run to their limit.
	MeanOutput int
	// AllowFaults serves POST /stub/faults (tests and drills).
	AllowFaults bool
	// Faults are the opening faults of every server.
	Faults Faults
	// PrefixCache, when set, gives each engine a prefix cache of this
	// size, as vLLM's automatic prefix caching (cache.go); nil: none,
	// every prompt computed in full, as sim without --prefix-cache.
	PrefixCache *engine.PrefixCache
	// Logf, when set, receives one line per notable event (a recompute,
	// a failed pull, a crash).
	Logf func(format string, args ...any)
}

// Policies for a failed KV pull.
const (
	PolicyFail      = "fail"
	PolicyRecompute = "recompute"
)

func (o *Options) defaults() error {
	if o.Model == "" {
		o.Model = "stub"
	}
	if o.TimeScale == nil {
		one := 1.0
		o.TimeScale = &one
	}
	if !(*o.TimeScale >= 0) || math.IsInf(*o.TimeScale, 0) {
		return fmt.Errorf("time scale %v: expected a finite number >= 0", *o.TimeScale)
	}
	if o.Lease == 0 {
		o.Lease = 30 * time.Second
	}
	if o.Lease < 0 {
		return fmt.Errorf("lease %v: expected > 0", o.Lease)
	}
	switch o.KVLoadFailurePolicy {
	case "":
		o.KVLoadFailurePolicy = PolicyFail
	case PolicyFail, PolicyRecompute:
	default:
		return fmt.Errorf("kv load failure policy %q: expected fail or recompute", o.KVLoadFailurePolicy)
	}
	if o.MaxModelLen == 0 {
		o.MaxModelLen = 32768
	}
	if o.MaxModelLen < 2 {
		return fmt.Errorf("max model len %d: expected at least 2 tokens", o.MaxModelLen)
	}
	if o.MeanOutput < 0 {
		return fmt.Errorf("mean output %d: expected >= 0 tokens", o.MeanOutput)
	}
	if err := o.KV.Validate(); err != nil {
		return fmt.Errorf("kv: %w", err)
	}
	if o.PrefixCache != nil {
		if err := o.PrefixCache.Validate(); err != nil {
			return fmt.Errorf("prefix cache: %w", err)
		}
	}
	return nil
}

// Instance is one stub engine to serve.
type Instance struct {
	// ID is the engine id (remote_engine_id in its handoffs).
	ID string
	// Addr is the host:port to listen on.
	Addr   string
	Engine engine.Config
}

// Fleet is a set of stub engines in one process.
type Fleet struct {
	servers []*Server
	puller  *fleetPuller
}

// NewFleet builds one server per instance; Start listens.
func NewFleet(opts Options, insts []Instance) (*Fleet, error) {
	if err := opts.defaults(); err != nil {
		return nil, fmt.Errorf("stub: %w", err)
	}
	if len(insts) == 0 {
		return nil, errors.New("stub: no instances")
	}
	f := &Fleet{puller: &fleetPuller{client: &http.Client{Timeout: 10 * time.Second}}}
	seen := map[string]bool{}
	for i, in := range insts {
		if seen[in.ID] {
			return nil, fmt.Errorf("stub: instance %d: engine id %q repeats", i, in.ID)
		}
		seen[in.ID] = true
		in.Engine = withDefaults(in.Engine)
		if err := in.Engine.Validate(); err != nil {
			return nil, fmt.Errorf("stub: instance %s: %w", in.ID, err)
		}
		insts[i] = in
		s := newServer(opts, in, f.puller)
		f.servers = append(f.servers, s)
		f.puller.add(s)
	}
	return f, nil
}

// Start listens on every instance's address and serves. On an error no
// server is left running.
func (f *Fleet) Start() error {
	for _, s := range f.servers {
		if err := s.Listen(); err != nil {
			f.Close()
			return err
		}
	}
	return nil
}

// Servers returns the fleet's servers in instance order.
func (f *Fleet) Servers() []*Server { return f.servers }

// Close stops every server.
func (f *Fleet) Close() {
	for _, s := range f.servers {
		s.Close()
	}
}

// Server is one stub engine: an HTTP server and the goroutine that owns
// its engine model.
type Server struct {
	id     string
	opts   Options
	cfg    engine.Config
	puller Puller
	epoch  time.Time

	handoffs *handoffs
	cmds     chan cmd
	quit     chan struct{}
	loopDone chan struct{}
	closed   sync.Once

	mu      sync.Mutex
	faults  Faults
	served  int // inference requests accepted (for CrashAfter)
	http    *http.Server
	ln      net.Listener
	addr    string // requested listen address
	crashed atomic.Bool
	// started is the process start the engine reports (Unix ns): its
	// epoch, then the time of each Restart.
	started atomic.Int64
	stallCh chan struct{} // closed on Close: stalled handlers return

	nextID atomic.Uint64
	gauges atomic.Pointer[engine.Gauges]
	// pulling counts decode legs pulling their KV (or waiting out its
	// transfer) before they join the engine: vLLM's waiting for remote KV.
	pulling atomic.Int64

	reg     *prometheus.Registry
	metrics metrics
	mux     *http.ServeMux
}

func newServer(opts Options, in Instance, p Puller) *Server {
	s := &Server{id: in.ID, opts: opts, cfg: in.Engine, puller: p, epoch: time.Now(), addr: in.Addr,
		cmds: make(chan cmd, 256), quit: make(chan struct{}), loopDone: make(chan struct{}),
		stallCh: make(chan struct{}), faults: opts.Faults}
	s.handoffs = newHandoffs(opts.Lease, opts.KV, s.epoch)
	s.started.Store(s.epoch.UnixNano())
	s.gauges.Store(&engine.Gauges{})
	s.reg = prometheus.NewRegistry()
	s.metrics = newMetrics(s)
	s.mux = s.routes()
	go s.loop(engine.New(in.Engine))
	return s
}

// NewServer is a single stub engine (not listening: use Handler, or
// Listen). Pulls by engine id reach only servers of the same Fleet, so a
// lone server pulls over HTTP.
func NewServer(opts Options, in Instance) (*Server, error) {
	if err := opts.defaults(); err != nil {
		return nil, fmt.Errorf("stub: %w", err)
	}
	in.Engine = withDefaults(in.Engine)
	if err := in.Engine.Validate(); err != nil {
		return nil, fmt.Errorf("stub: instance %s: %w", in.ID, err)
	}
	p := &fleetPuller{client: &http.Client{Timeout: 10 * time.Second}}
	s := newServer(opts, in, p)
	p.add(s)
	return s, nil
}

// ID is the engine id.
func (s *Server) ID() string { return s.id }

// Handler serves the stub's routes.
func (s *Server) Handler() http.Handler { return s.mux }

// Listen starts serving on the instance's address (":0" picks a port).
func (s *Server) Listen() error {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("stub %s: listen %s: %w", s.id, s.addr, err)
	}
	srv := &http.Server{Handler: s.mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: api.EngineKeepAlive}
	s.mu.Lock()
	s.ln, s.http = ln, srv
	s.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
	return nil
}

// URL is the server's base URL once listening ("" before).
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return "http://" + s.ln.Addr().String()
}

// sideChannel is the host and port handoffs name: this server's HTTP
// listener, which also serves the internal pull route (PullPath), unless
// the SideChannel fault names another.
func (s *Server) sideChannel() (string, int) {
	if f := s.getFaults(); f.SideChannel != "" {
		if host, port, err := splitSideChannel(f.SideChannel); err == nil {
			return host, port
		}
	}
	return s.ownSideChannel()
}

// ownSideChannel is this server's HTTP listener's host and port.
func (s *Server) ownSideChannel() (string, int) {
	s.mu.Lock()
	ln := s.ln
	s.mu.Unlock()
	if ln == nil {
		return "127.0.0.1", 0
	}
	host, port, err := net.SplitHostPort(ln.Addr().String())
	if err != nil {
		return "127.0.0.1", 0
	}
	p, _ := strconv.Atoi(port)
	return host, p
}

// Close stops the server and its engine; requests in flight end.
func (s *Server) Close() {
	s.closed.Do(func() {
		s.mu.Lock()
		srv := s.http
		s.mu.Unlock()
		if srv != nil {
			_ = srv.Close()
		}
		close(s.stallCh)
		close(s.quit)
		<-s.loopDone
	})
}

// crash drops the listener and every connection, and forgets the pinned
// KV, as a dead engine process would. The server stays down (until
// Restart). It reports whether this call crashed it.
func (s *Server) crash() bool {
	if s.crashed.Swap(true) {
		return false
	}
	s.logf("stub %s: crash (fault)", s.id)
	s.handoffs.clear()
	s.mu.Lock()
	srv := s.http
	s.mu.Unlock()
	if srv != nil {
		go srv.Close()
	}
	return true
}

func (s *Server) logf(format string, args ...any) {
	if s.opts.Logf != nil {
		s.opts.Logf(format, args...)
	}
}

// scale converts model time to wall time under the time scale and a
// slow-down fault.
func (s *Server) scale(d time.Duration) time.Duration {
	f := *s.opts.TimeScale
	if slow := s.getFaults().Slow; slow > 0 {
		f *= slow
	}
	return time.Duration(float64(d) * f)
}

// Gauges is the engine's state as last published by its owner goroutine.
func (s *Server) Gauges() engine.Gauges { return *s.gauges.Load() }

// PinnedTokens is the KV held for handoffs now.
func (s *Server) PinnedTokens() int64 { return s.handoffs.pinnedTokens(time.Now()) }

// RenewHandoff extends a pinned handoff's lease (what a decode engine
// does while the request waits there).
func (s *Server) RenewHandoff(requestID string) error {
	return s.handoffs.renew(requestID, time.Now())
}

// withDefaults fills the engine's zero batch fields as engine.New does.
func withDefaults(c engine.Config) engine.Config {
	if c.ChunkTokens == 0 {
		c.ChunkTokens = engine.DefaultChunkTokens
	}
	if c.BudgetTokens == 0 {
		c.BudgetTokens = engine.DefaultBudgetTokens
	}
	return c
}

// closing derives a context that also ends when the server closes.
func (s *Server) closing(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-s.quit:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
