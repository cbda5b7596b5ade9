package live

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/fleet"
	"github.com/narwhal-bench/narwhal-bench/live/api"
)

// HandoffPolicy says what the router does when a prefill leg returns no KV
// handoff the decode engine can use.
type HandoffPolicy string

// Handoff policies.
const (
	// HandoffFail fails the request with 502 (cause no_handoff), as vLLM's
	// kv_load_failure_policy=fail would fail the decode.
	HandoffFail HandoffPolicy = "fail"
	// HandoffRecompute sends the decode leg without a handoff: the decode
	// engine computes the prompt again. The miss is still journaled.
	HandoffRecompute HandoffPolicy = "recompute"
)

// Config configures a Router. Zero durations and limits take the defaults
// named on each field.
type Config struct {
	// Fleet is the fleet file: engines (instances.list[].url), profiles, SLO.
	Fleet *fleet.Spec
	// URLs overrides the engines' base URLs (one per instance), e.g. a stub
	// fleet on --base-port; nil uses the fleet file's urls.
	URLs []string
	// Controller decides placements and roles (core.NewController).
	Controller core.Controller
	// Admission is the core's admission gate (default open); the fleet
	// file's admission block, or serve's --admission.
	Admission core.Admission
	// PrefixCache, when set, says the engines keep prefix caches of this
	// size (vLLM's automatic prefix caching; the stubs' with their
	// PrefixCache): placement then prices a prompt's prefill as T(n) −
	// T(shared prefix) on the engine that holds its prefix, as sim
	// --prefix-cache does, the prefixes read from the prompts' text
	// (live/prefix.go). nil: every prompt priced in full.
	PrefixCache *fleet.PrefixCache
	// Model is the model name clients must ask for ("" accepts any and
	// forwards it as sent).
	Model string
	// Recorder receives every record (nil: discarded). The router stamps
	// Seq and At; records arrive from one goroutine in time order.
	Recorder event.Recorder
	// Handoff is the missing-handoff policy (default HandoffFail).
	Handoff HandoffPolicy
	// PrefillTimeout bounds a prefill leg (default 120 s).
	PrefillTimeout time.Duration
	// PrefillTimeout also bounds the wait for the first event of a
	// streamed leg whose engine prefills the prompt itself: a request one
	// engine serves whole, or a decode leg without a handoff (its queue
	// and a prefill come first).
	//
	// FirstTokenTimeout bounds the wait for a streamed decode leg's first
	// event (default 30 s). A non-streamed answer comes whole, headers
	// and all, with its last token (as vLLM sends it), so RequestTimeout
	// alone bounds it.
	FirstTokenTimeout time.Duration
	// ReadTimeout bounds the gap between two events of a decode leg
	// (default 60 s).
	ReadTimeout time.Duration
	// BodyTimeout bounds reading a request's body (default 30 s): a
	// client that sends it a byte at a time would otherwise hold its
	// connection, and its tenant's slot, for good.
	BodyTimeout time.Duration
	// RequestTimeout bounds a request end to end (default 1 h: a backstop;
	// ReadTimeout keeps a stream live, and a reasoning model writing 32,000
	// tokens at 30 a second runs 18 minutes).
	RequestTimeout time.Duration
	// Tokenize counts each prompt with an engine's POST /tokenize (its
	// own tokenizer and chat template) instead of the estimate, at the
	// price of one more round trip before placement; TokenizeTimeout
	// bounds it (default 2 s), after which the estimate is used
	// (live/tokenize.go).
	Tokenize        bool
	TokenizeTimeout time.Duration
	// MaxBodyBytes bounds a request body (default 8 MiB).
	MaxBodyBytes int64
	// MaxOutputTokens bounds max_tokens / max_completion_tokens (default
	// 131072).
	MaxOutputTokens int
	// MaxInFlight bounds the requests admitted and not ended; beyond it a
	// request is refused with 429 and Retry-After (default 100,000).
	MaxInFlight int
	// FailuresToEject is how many consecutive connection failures or 5xx
	// answers open an engine's breaker and mark it down (default 3). A 4xx
	// never counts; a timeout counts only when the probe it triggers fails
	// (live/health.go).
	FailuresToEject int
	// ProbeInterval is how often a down engine is probed for readmission
	// (default 1 s).
	ProbeInterval time.Duration
	// ProbeTimeout bounds one probe of /health or /metrics (default 2 s).
	ProbeTimeout time.Duration
	// SweepInterval is how often idle engines are probed (default 5 s;
	// negative: never).
	SweepInterval time.Duration
	// SameProcessHold is how long an ejected engine must answer /health,
	// still as the process that failed, before it is readmitted (default
	// 30 s; doubled for each later readmission of that process, up to 16
	// times; negative: never, it must restart). A stall that clears (a
	// paused process, a driver hiccup) costs the engine this long, not the
	// rest of the run; an engine that keeps failing is kept out longer
	// each time.
	SameProcessHold time.Duration
	// Logf receives the router's operational log lines (ejections,
	// readmissions); nil discards them.
	Logf func(format string, args ...any)
	// Transport carries the engine legs (default: a pooled transport sized
	// for thousands of concurrent streams).
	Transport http.RoundTripper
	// High availability (serve --ha, live/ha; docs/operations.md). All
	// zero when the router runs alone.
	//
	// Epoch is written into every record: the election epoch under which
	// this router leads.
	Epoch uint64
	// Fence, when set, is asked at each admission; false means the
	// router no longer holds the lease and must not admit: the request
	// fails with 503 (journaled fail, cause unavailable).
	Fence func() bool
	// Resume opens the core from a split and engine generations
	// published by a previous leader instead of the controller's opening.
	Resume *Resume
}

func (c *Config) defaults() {
	if c.Handoff == "" {
		c.Handoff = HandoffFail
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.PrefillTimeout, 120*time.Second)
	def(&c.FirstTokenTimeout, 30*time.Second)
	def(&c.ReadTimeout, 60*time.Second)
	def(&c.BodyTimeout, 30*time.Second)
	def(&c.RequestTimeout, time.Hour)
	def(&c.TokenizeTimeout, 2*time.Second)
	def(&c.ProbeInterval, time.Second)
	def(&c.ProbeTimeout, 2*time.Second)
	if c.SweepInterval == 0 {
		c.SweepInterval = 5 * time.Second
	}
	if c.SameProcessHold == 0 {
		c.SameProcessHold = 30 * time.Second
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 8 << 20
	}
	if c.MaxOutputTokens <= 0 {
		c.MaxOutputTokens = 131072
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 100000
	}
	if c.FailuresToEject <= 0 {
		c.FailuresToEject = 3
	}
	if c.Recorder == nil {
		c.Recorder = event.Discard
	}
	if c.Transport == nil {
		c.Transport = NewTransport()
	}
}

// NewTransport is the engine legs' default transport: enough idle
// connections per engine for thousands of concurrent streams.
func NewTransport() *http.Transport { return api.NewTransport(4096) }

// engine is the router's handle on one engine.
type engine struct {
	idx  event.Instance
	name string
	base string // base URL, no trailing slash
	// Written by leg goroutines, read by the owner at each tick.
	gapNanos atomic.Int64 // summed gaps between decode tokens
	gaps     atomic.Int64 // how many gaps
	// br is its breaker and probe state (live/health.go).
	br breaker
	// modelsRead says its /v1/models answered (learnContext, for its
	// max_model_len); modelsFailed counts the tries that got no answer.
	modelsRead   atomic.Bool
	modelsFailed atomic.Int64
	// cordoned: an operator took it out of service (POST
	// /engines/NAME/cordon); written by the owner, read by GET /ready and
	// the breakers.
	cordoned atomic.Bool
}

// Router is the live driver: an OpenAI-compatible HTTP front end whose
// placements and role moves come from the same core as the simulator's.
// One owner goroutine holds the core; handlers talk to it over a channel.
type Router struct {
	cfg     Config
	client  *http.Client
	engines []*engine
	// resumedDown are the engines a resumed state had down: Run starts
	// their readmission probes.
	resumedDown []*engine
	inbox       chan msg
	start       time.Time
	done        chan struct{}
	stopped     chan struct{}
	// halt is cancelled once the owner has stopped (after stopped is
	// closed): it cuts the legs still in flight, whose ends the owner has
	// journaled, so each handler answers its client (halted).
	halt       context.Context
	haltCancel context.CancelFunc
	once       sync.Once
	ids        atomic.Uint64 // X-Request-Id for clients that send none
	// tokenizer is the engine the next /tokenize asks first (Tokenize).
	tokenizer atomic.Int64
	// maxModelLen is the engines' context length, from /tokenize's
	// max_model_len (0 until one answered).
	maxModelLen atomic.Int64
	// modelsLen is the same read from an engine's /v1/models (the health
	// sweep asks until one answers); it only bounds requests (overflow).
	modelsLen atomic.Int64
	// ejectMu makes one ejection decision at a time (claimEjection).
	ejectMu sync.Mutex
	o       *owner
	met     *Metrics
}

// New builds a router; Run starts its owner.
func New(cfg Config) (*Router, error) {
	cfg.defaults()
	if cfg.Fleet == nil {
		return nil, errors.New("live: no fleet")
	}
	if cfg.Controller == nil {
		return nil, errors.New("live: no controller")
	}
	switch cfg.Handoff {
	case HandoffFail, HandoffRecompute:
	default:
		return nil, fmt.Errorf("live: handoff policy %q: expected fail or recompute", cfg.Handoff)
	}
	n := cfg.Fleet.Size()
	urls := cfg.URLs
	if urls == nil {
		urls = cfg.Fleet.URLs()
	}
	if len(urls) != n {
		return nil, fmt.Errorf("live: %d engine urls for %d instances: expected one per instance", len(urls), n)
	}
	names := cfg.Fleet.Names()
	r := &Router{cfg: cfg, client: &http.Client{Transport: cfg.Transport}, inbox: make(chan msg, 4096),
		done: make(chan struct{}), stopped: make(chan struct{}), start: time.Now()}
	r.halt, r.haltCancel = context.WithCancel(context.Background())
	for i, u := range urls {
		if u == "" {
			return nil, fmt.Errorf("live: instance %d (%s): no url: expected instances.list[%d].url in the fleet file, or --base-port", i, names[i], i)
		}
		pu, err := url.Parse(u)
		if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			return nil, fmt.Errorf("live: instance %d (%s): url %q: expected http://HOST:PORT", i, names[i], u)
		}
		base := strings.TrimRight(u, "/")
		for _, e := range r.engines {
			if e.base == base {
				return nil, fmt.Errorf("live: instance %d (%s): url %q is also %s's: expected one engine per url", i, names[i], u, e.name)
			}
		}
		r.engines = append(r.engines, &engine{idx: event.Instance(i), name: names[i], base: base})
	}
	r.met = newMetrics(cfg.Controller.Name(), cfg.Fleet.CoreSLO(), names)
	mr := &meteredRecorder{next: cfg.Recorder, m: r.met}
	mr.errs, _ = cfg.Recorder.(errSource)
	r.cfg.Recorder = mr
	if pc := cfg.PrefixCache; pc != nil {
		if err := pc.Validate(); err != nil {
			return nil, fmt.Errorf("live: prefix cache: %w", err)
		}
	}
	ccfg := core.Config{Profiles: cfg.Fleet.Profiles(), SLO: cfg.Fleet.CoreSLO(), Pinned: cfg.Fleet.Pins(),
		Admission: cfg.Admission, PrefixAware: cfg.PrefixCache != nil}
	if cfg.Resume != nil {
		ccfg.Opening = cfg.Resume.Roles
	}
	c, err := core.New(ccfg, cfg.Controller)
	if err != nil {
		return nil, fmt.Errorf("live: %w", err)
	}
	r.o = newOwner(r, c)
	if err := r.resume(c); err != nil {
		return nil, err
	}
	return r, nil
}

// Run runs the owner until ctx ends or Close; it returns once the owner
// stopped. Requests still in flight then end as failed (cause
// engine_error) so that every admitted request ends exactly once in the
// journal.
func (r *Router) Run(ctx context.Context) error {
	go r.sweepLoop()
	for _, e := range r.resumedDown {
		go r.readmit(e)
	}
	r.o.run(ctx)
	return r.o.err
}

// Metrics is the router's Prometheus registry and handler (GET /metrics).
func (r *Router) Metrics() *Metrics { return r.met }

// Close stops the owner (idempotent).
func (r *Router) Close() { r.once.Do(func() { close(r.done) }) }

// Stopped is closed when the owner has stopped.
func (r *Router) Stopped() <-chan struct{} { return r.stopped }

// Start is the router clock's zero (time 0 of its journal).
func (r *Router) Start() time.Time { return r.start }

// now is the router clock: monotonic time since New.
func (r *Router) now() event.Time { return event.Time(time.Since(r.start)) }
