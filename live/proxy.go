package live

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/live/api"
)

// maxLegBody bounds a non-streamed leg's response body, and one event of a
// streamed one (vLLM bounds neither: a long prompt's logprobs, echoed,
// run to tens of MiB). A variable for the tests.
var maxLegBody = 64 << 20

// errAnswerTooLarge: a non-streamed leg's answer is over maxLegBody.
var errAnswerTooLarge = errors.New("the answer is over the router's bound")

// readLegBody reads a non-streamed leg's whole answer, or fails with
// errAnswerTooLarge: never a prefix of it.
func readLegBody(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, int64(maxLegBody)+1))
	if err == nil && len(b) > maxLegBody {
		return nil, errAnswerTooLarge
	}
	return b, err
}

// tooLarge reports an answer (or one event of a stream) over the router's
// bounds: the engine answered, the router cannot relay it. Not the
// engine's fault, and no other engine would answer smaller.
func tooLarge(err error) bool {
	return errors.Is(err, errAnswerTooLarge) || errors.Is(err, api.ErrEventTooLarge)
}

// mib writes n bytes in MiB.
func mib(n int) string { return strconv.FormatFloat(float64(n)/(1<<20), 'f', -1, 64) + " MiB" }

// codeAnswerTooLarge is the error code of tooLargeError.
const codeAnswerTooLarge = "answer_too_large"

// tooLargeError is the client's answer to a tooLarge failure.
func tooLargeError(e *engine) *api.Error {
	return &api.Error{Status: http.StatusBadGateway, Type: api.TypeServer, Code: codeAnswerTooLarge,
		Message: fmt.Sprintf("%s's answer is over the router's bound (%s for a non-streamed answer or one streamed event): ask for fewer logprobs or no echo of a long prompt", e.name, mib(maxLegBody))}
}

// maxClassLen bounds X-Narwhal-Class (trace class names are at most 64).
const maxClassLen = 128

// Headers a load generator may set.
const (
	// HeaderScheduled is the request's scheduled send time in nanoseconds
	// of the router clock (the journal's Ref); TTFT is measured from it. It
	// may not be more than a second after the router's now, and with
	// tenants only an admin tenant may send it.
	HeaderScheduled = "X-Narwhal-Scheduled-Ns"
	// HeaderClass names the request's trace class in the journal (at most
	// maxClassLen printable ASCII characters).
	HeaderClass = "X-Narwhal-Class"
	// HeaderRequestID is the id both legs carry (the client's, or a new one).
	HeaderRequestID = "X-Request-Id"
)

// Handler is the router's HTTP API.
func (r *Router) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, q *http.Request) { r.serve(w, q, false) })
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, q *http.Request) { r.serve(w, q, true) })
	mux.HandleFunc("GET /v1/models", r.models)
	mux.HandleFunc("GET /health", r.health)
	mux.HandleFunc("GET /ping", r.health) // vLLM's (SageMaker's) health route
	mux.HandleFunc("POST /ping", r.health)
	for _, p := range []string{"GET /version", "POST /tokenize", "POST /detokenize"} {
		// vLLM's own routes, answered by an engine as it would answer.
		mux.HandleFunc(p, r.passEngine)
	}
	mux.HandleFunc("GET /ready", r.ready)
	mux.HandleFunc("GET /state", r.stateHandler)
	mux.Handle("GET /metrics", r.met.Handler())
	mux.HandleFunc("POST /engines/{name}/cordon", r.cordonHandler(true))
	mux.HandleFunc("POST /engines/{name}/uncordon", r.cordonHandler(false))
	for _, p := range []string{"/v1/completions", "/v1/chat/completions", "/engines/{name}/cordon", "/engines/{name}/uncordon"} {
		// A known route with another method: 405, as vLLM answers.
		mux.HandleFunc(p, func(w http.ResponseWriter, q *http.Request) {
			w.Header().Set("Allow", http.MethodPost)
			api.WriteError(w, &api.Error{Status: http.StatusMethodNotAllowed, Type: api.TypeInvalidRequest,
				Message: fmt.Sprintf("%s %s: expected POST", q.Method, q.URL.Path)})
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, q *http.Request) {
		api.WriteError(w, &api.Error{Status: http.StatusNotFound, Type: "not_found_error",
			Message: fmt.Sprintf("%s %s: no such route: expected POST /v1/completions, POST /v1/chat/completions, GET /v1/models, /health, /ready, /state, /metrics or /version, POST /tokenize or /detokenize, or POST /engines/NAME/cordon or /uncordon", q.Method, q.URL.Path)})
	})
	return mux
}

// CORS answers browsers calling the router from another origin as vLLM's
// CORS middleware does, on every route but the operator's: a preflight (OPTIONS with
// Access-Control-Request-Method) from an allowed origin gets 200 with the
// method and the headers asked for; every other request from one gets
// Access-Control-Allow-Origin, its errors included. A preflight from
// another origin is a 400. The operator's routes (/state, /metrics,
// /journal, /engines/...) take no part: no page on another origin reads
// them. origins: "*" for any (vLLM's default), or
// the origins themselves; none: next as it is. It goes in front of any
// key check (Gate.Wrap): a browser's preflight carries no key.
func CORS(origins []string, next http.Handler) http.Handler {
	if len(origins) == 0 {
		return next
	}
	all := slices.Contains(origins, "*")
	return http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		origin := q.Header.Get("Origin")
		if origin == "" || adminPath(q.URL.Path) {
			next.ServeHTTP(w, q)
			return
		}
		ok := all || slices.Contains(origins, origin)
		h := w.Header()
		if ok {
			if all {
				h.Set("Access-Control-Allow-Origin", "*")
			} else {
				h.Set("Access-Control-Allow-Origin", origin)
				h.Add("Vary", "Origin")
			}
		}
		if q.Method != http.MethodOptions || q.Header.Get("Access-Control-Request-Method") == "" {
			next.ServeHTTP(w, q)
			return
		}
		if !ok {
			h.Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, "Disallowed CORS origin")
			return
		}
		h.Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
		if rh := q.Header.Get("Access-Control-Request-Headers"); rh != "" {
			h.Set("Access-Control-Allow-Headers", rh)
		}
		h.Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusOK)
	})
}

// halted says whether the router has stopped: what is still in flight was
// ended, and journaled, by the owner's shutdown.
func (r *Router) halted() bool {
	select {
	case <-r.stopped:
		return true
	default:
		return false
	}
}

// haltedError is the 503 of a request the router's stop cut short.
func haltedError() *api.Error {
	return api.Unavailable("the router stopped before this request's end", time.Second)
}

// stopping answers 503 and says true once the router stops.
func (r *Router) stopping(w http.ResponseWriter) bool {
	if !r.halted() {
		return false
	}
	api.WriteError(w, api.Unavailable("the router is stopping", time.Second))
	return true
}

func (r *Router) health(w http.ResponseWriter, _ *http.Request) {
	if r.stopping(w) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"status":"ok"}`))
}

// ready is GET /ready, the readiness check a load balancer or Kubernetes
// sends traffic by: 200 while at least one engine is up and answering,
// 503 (code no_engine) when every engine is ejected or failing (the last
// one up is never ejected: it fails at the threshold instead), or while
// the router stops. /health stays 200 as long as the process serves
// (liveness).
// The breakers alone answer it (an engine is down in the core exactly
// when its breaker is open), without a round trip to the owner.
func (r *Router) ready(w http.ResponseWriter, _ *http.Request) {
	if r.stopping(w) {
		return
	}
	if r.cfg.Fence != nil && !r.cfg.Fence() {
		api.WriteError(w, fencedError())
		return
	}
	up := 0
	for _, e := range r.engines {
		if !r.failing(e) && !e.cordoned.Load() {
			up++
		}
	}
	if up == 0 {
		e := api.Unavailable(fmt.Sprintf("no engine of %d is up and answering", len(r.engines)), time.Second)
		e.Code = "no_engine"
		api.WriteError(w, e)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"status": "ready", "engines_up": up, "engines": len(r.engines)})
}

func (r *Router) models(w http.ResponseWriter, q *http.Request) {
	body := r.engineModels(q)
	if r.cfg.Model == "" {
		// The router serves whatever the engines serve.
		if body == nil {
			api.WriteError(w, api.Unavailable("no engine answered GET /v1/models", time.Second))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
		return
	}
	// --model: the one model clients may ask for, as the engines describe
	// it (max_model_len, root, permission), else as the router knows it.
	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	if body != nil && json.Unmarshal(body, &list) == nil {
		for _, m := range list.Data {
			var id struct {
				ID          string `json:"id"`
				MaxModelLen int    `json:"max_model_len"`
			}
			if json.Unmarshal(m, &id) == nil && id.ID == r.cfg.Model {
				if id.MaxModelLen > 0 {
					storeMax(&r.modelsLen, int64(id.MaxModelLen))
				}
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": []json.RawMessage{m}})
				return
			}
		}
	}
	entry := map[string]any{"id": r.cfg.Model, "object": "model", "created": r.start.Unix(), "owned_by": "narwhal-bench"}
	if n := r.contextLen(); n > 0 {
		entry["max_model_len"] = n
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": []map[string]any{entry}})
}

// passEngine answers GET /version, POST /tokenize and POST /detokenize
// with the first engine's answer (askEngines; a 5xx tries the next): the
// engines all serve one model, so any of them answers as any other would.
func (r *Router) passEngine(w http.ResponseWriter, q *http.Request) {
	if r.stopping(w) {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, q.Body, r.cfg.MaxBodyBytes))
	if err != nil {
		api.WriteError(w, &api.Error{Status: http.StatusRequestEntityTooLarge, Type: api.TypeInvalidRequest,
			Message: fmt.Sprintf("the body is over %d bytes", r.cfg.MaxBodyBytes)})
		return
	}
	a := r.askEngines(q.Context(), q.Method, q.URL.Path, body, q.Header.Get("Content-Type"), 30*time.Second,
		func(status int) bool { return status < 500 })
	if a == nil {
		api.WriteError(w, api.Unavailable("no engine answered "+q.URL.Path, time.Second))
		return
	}
	if ct := a.header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

// engineModels is the first engine's answer to GET /v1/models (nil when
// none answers 200 within ProbeTimeout: an engine that hangs costs the
// route that long, not the client's patience).
func (r *Router) engineModels(q *http.Request) []byte {
	a := r.askEngines(q.Context(), http.MethodGet, "/v1/models", nil, "", r.cfg.ProbeTimeout,
		func(status int) bool { return status == http.StatusOK })
	if a == nil {
		return nil
	}
	return a.body
}

// engineAnswer is one engine's whole answer to a call askEngines made.
type engineAnswer struct {
	status int
	header http.Header
	body   []byte
}

// askEngines sends method path (with body, of content type ct when not
// "") to each engine in fleet order, skipping ejected engines, each call
// bounded by timeout, and returns the first answer whose status accept
// takes (nil when none does).
func (r *Router) askEngines(ctx context.Context, method, path string, body []byte, ct string, timeout time.Duration, accept func(int) bool) *engineAnswer {
	for _, e := range r.engines {
		if e.br.ejected() {
			continue
		}
		if a := r.askEngine(ctx, e, method, path, body, ct, timeout); a != nil && accept(a.status) {
			return a
		}
	}
	return nil
}

func (r *Router) askEngine(ctx context.Context, e *engine, method, path string, body []byte, ct string, timeout time.Duration) *engineAnswer {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hq, _ := http.NewRequestWithContext(ctx, method, e.base+path, bytes.NewReader(body))
	if ct != "" {
		hq.Header.Set("Content-Type", ct)
	}
	resp, err := r.client.Do(hq)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(io.LimitReader(resp.Body, int64(maxLegBody)))
	if err != nil {
		return nil
	}
	return &engineAnswer{status: resp.StatusCode, header: resp.Header, body: rb}
}

func (r *Router) stateHandler(w http.ResponseWriter, _ *http.Request) {
	ch := make(chan State, 1)
	if !r.send(msg{kind: msgState, state: ch}) {
		api.WriteError(w, api.Unavailable("the router is stopping", time.Second))
		return
	}
	select {
	case s, ok := <-ch:
		if !ok {
			api.WriteError(w, api.Unavailable("the router is stopping", time.Second))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s)
	case <-r.stopped:
		api.WriteError(w, api.Unavailable("the router is stopping", time.Second))
	}
}

// State asks the owner for a snapshot (tests and the CLI).
func (r *Router) State() (State, bool) {
	ch := make(chan State, 1)
	if !r.send(msg{kind: msgState, state: ch}) {
		return State{}, false
	}
	select {
	case s, ok := <-ch:
		return s, ok
	case <-r.stopped:
		return State{}, false
	}
}

// send hands m to the owner, or reports that it stopped.
func (r *Router) send(m msg) bool {
	select {
	case r.inbox <- m:
		return true
	case <-r.stopped:
		return false
	}
}

// ask sends m and waits for the owner's placement.
func (r *Router) ask(m msg) (placement, bool) {
	if !r.send(m) {
		return placement{}, false
	}
	select {
	case p := <-m.f.reply:
		return p, true
	case <-r.stopped:
		return placement{}, false
	}
}

// endFlight tells the owner how f ended.
func (r *Router) endFlight(f *flight, kind event.Kind, cause event.Cause) {
	r.send(msg{kind: msgEnd, f: f, terminal: kind, cause: cause})
}

// serve is one client request: decode it, ask the core where it runs, run
// its legs, and journal how it ended.
func (r *Router) serve(w http.ResponseWriter, q *http.Request, chat bool) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(r.cfg.BodyTimeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, q.Body, r.cfg.MaxBodyBytes))
	if err == nil {
		// Cleared at once: net/http's own read that notices a client
		// hanging up mid-answer must not inherit the body's deadline. (On
		// an error it stays: net/http reads what is left of a body before
		// it answers, which the deadline keeps from waiting for good.)
		_ = rc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			api.WriteError(w, &api.Error{Status: http.StatusRequestEntityTooLarge, Type: api.TypeInvalidRequest,
				Message: fmt.Sprintf("request body over %d bytes", r.cfg.MaxBodyBytes)})
			return
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			api.WriteError(w, &api.Error{Status: http.StatusRequestTimeout, Type: api.TypeInvalidRequest,
				Message: fmt.Sprintf("the request body did not arrive within %v", r.cfg.BodyTimeout)})
			return
		}
		api.WriteError(w, api.BadRequest("could not read the request body: "+err.Error()))
		return
	}
	req, e := api.Decode(body, chat)
	if e != nil {
		api.WriteError(w, e)
		return
	}
	if r.cfg.Model != "" && req.Model != "" && req.Model != r.cfg.Model {
		// A body without a model is served, as vLLM serves it.
		api.WriteError(w, api.ModelNotFound(req.Model, []string{r.cfg.Model}))
		return
	}
	want := req.OutputLimit()
	if req.LimitSet() && want > r.cfg.MaxOutputTokens {
		param := "max_tokens"
		if req.MaxCompletionTokens != nil {
			param = "max_completion_tokens"
		}
		api.WriteError(w, api.Invalid(param, strconv.Itoa(want), fmt.Sprintf("at most %d", r.cfg.MaxOutputTokens)))
		return
	}
	xid := q.Header.Get(HeaderRequestID)
	if xid == "" {
		xid = fmt.Sprintf("nwb-%x-%d", r.start.UnixNano(), r.ids.Add(1))
	}
	w.Header().Set(HeaderRequestID, xid)
	input, exact := r.promptTokens(q.Context(), req)
	if e := r.overflow(req, input, exact); e != nil {
		api.WriteError(w, e)
		return
	}
	if req.Chat && !req.LimitSet() {
		// vLLM's chat default: the rest of the context, known when an
		// engine's /tokenize said its max_model_len (--tokenize); else 0,
		// journaled as unknown.
		want = req.OutputLimitIn(0)
		if m := int(r.maxModelLen.Load()); m > 0 {
			want = max(1, m-input)
		}
	}
	class := q.Header.Get(HeaderClass)
	if len(class) > maxClassLen || strings.ContainsFunc(class, func(c rune) bool { return c < 0x20 || c > 0x7e }) {
		// It is journaled with the request, and kept by every reader.
		api.WriteError(w, api.Invalid(HeaderClass, class[:min(len(class), 80)], fmt.Sprintf("a class name of at most %d printable ASCII characters", maxClassLen)))
		return
	}
	f := &flight{input: input, want: want, class: class, scheduled: -1,
		reply: make(chan placement, 1), noDecode: want == 1, whole: req.PromptLogprobs(), hashes: r.prefixHashes(req, input)}
	if s := q.Header.Get(HeaderScheduled); s != "" {
		// A load generator in front of this router says when it meant to
		// send (the client's queue counts toward TTFT). A time far from
		// now would move every latency the journal and the metrics hold.
		// (Any past time is taken: a load generator far behind its
		// schedule sends requests late, and they must be journaled as the
		// misses they are. With --tenants only an admin tenant may send
		// the header at all.)
		at, e := parseScheduled(s, time.Duration(r.now())+time.Second)
		if e != nil {
			api.WriteError(w, e)
			return
		}
		f.scheduled = at
	}
	if !r.send(msg{kind: msgArrive, f: f}) {
		api.WriteError(w, api.Unavailable("the router is stopping", time.Second))
		return
	}
	var p placement
	select {
	case p = <-f.reply:
	case <-r.stopped:
		api.WriteError(w, api.Unavailable("the router is stopping", time.Second))
		return
	case <-q.Context().Done():
		// The client left while its request waited for admission.
		r.endFlight(f, event.KindFinish, event.CauseCancel)
		return
	}
	r.met.wait.Observe((r.now() - f.arrived).Seconds())
	if p.inst == event.NoInstance {
		if r.halted() {
			api.WriteError(w, haltedError()) // ended, waiting, by the router's stop
			return
		}
		writeRefusal(w, p)
		return
	}
	ctx, cancel := context.WithTimeout(q.Context(), r.cfg.RequestTimeout)
	defer cancel()
	defer context.AfterFunc(r.halt, cancel)() // the router stops: cut its legs
	lg := &leg{r: r, w: w, q: q, ctx: ctx, req: req, f: f, xid: xid, path: q.URL.Path}
	lg.start(p.inst) // live/retry.go
}

// fencedError is the 503 of a router that lost its high-availability
// lease: it admits nothing more and finishes what is in flight; another
// router leads (or will), so clients move, as they do on a standby.
func fencedError() *api.Error {
	e := api.Unavailable("this router lost its high-availability lease and admits nothing more; another router leads", time.Second)
	e.Code = "standby"
	return e
}

// writeRefusal answers a request the core refused (429) or could not
// place (503), with Retry-After.
func writeRefusal(w http.ResponseWriter, p placement) {
	msg := "no engine can take the request now (" + p.cause.String() + ")"
	switch {
	case p.fenced:
		api.WriteError(w, fencedError())
	case p.cause == event.CausePrompt:
		// No queue drains this: no Retry-After.
		api.WriteError(w, &api.Error{Status: http.StatusTooManyRequests, Type: api.TypeRateLimit, Code: "prompt",
			Message: "this prompt's own prefill prices its TTFT above the budget; shorten the prompt or raise the TTFT SLO"})
	case p.cause == event.CauseQueueTimeout:
		api.WriteError(w, &api.Error{Status: http.StatusServiceUnavailable, Type: api.TypeUnavailable, Code: "queue_timeout",
			Message: "the request waited its admission deadline without a placement that meets the TTFT SLO", RetryAfter: time.Second})
	case !p.fail && p.cause == event.CauseOverload:
		api.WriteError(w, api.RateLimited(msg, time.Second))
	default:
		api.WriteError(w, api.Unavailable(msg, time.Second))
	}
}

// leg runs one request's engine legs.
type leg struct {
	r    *Router
	w    http.ResponseWriter
	q    *http.Request
	ctx  context.Context
	req  *api.Request
	f    *flight
	xid  string
	path string
	// sent is true once the client has the response status.
	sent bool
	// retried: the request was re-placed once already (live/retry.go).
	retried bool
	// pe is the prefill engine of a two-leg attempt.
	pe *engine
	// tFirst is when this attempt's first token existed (router clock).
	tFirst event.Time
	// ttftSeen: the TTFT histogram has this request already (a request
	// re-placed after a failed leg is observed at its first prefill's
	// return, once).
	ttftSeen bool
	// whole: one engine answered without streaming, so the first token
	// seen is the last; the TTFT and TPOT histograms skip it.
	whole bool
	// rc is w's controller; wdl the write deadline set on it (zero: none;
	// writeBy).
	rc  *http.ResponseController
	wdl time.Time
}

func (l *leg) post(ctx context.Context, e *engine, body []byte) (*http.Response, error) {
	return postEngine(ctx, l.r.client, e.base+l.path, body, l.xid)
}

// postEngine sends a leg's POST to an engine, and sends it again when
// the engine closed the pooled connection idle under it
// (api.DoResending, with the engine's keep-alive idleCloseAfter): a leg
// written onto a connection an engine closes idle was never read, and
// would fail and count against a healthy engine. Anything else (a failure
// on a new connection, an engine or a load balancer ending a request it
// had read soon after the one before, a partial answer, a stall) fails the
// leg as before: a prefill is not run twice for it.
func postEngine(ctx context.Context, client *http.Client, url string, body []byte, xid string) (*http.Response, error) {
	hq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hq.Header.Set("Content-Type", "application/json")
	hq.Header.Set(HeaderRequestID, xid)
	return api.DoResending(client, hq, idleCloseAfter)
}

// idleCloseAfter is the keep-alive after which an engine closes an idle
// connection (vLLM's 5 s); tests shorten it.
var idleCloseAfter = api.EngineKeepAlive

// fail ends the request with cause, answering the client when it is still
// there and has no response yet: 504 for timeouts, 502 otherwise (or the
// engine's own 4xx, or its 503 with Retry-After, passed through).
func (l *leg) fail(kind event.Kind, cause event.Cause, engineErr *api.Error) {
	if l.q.Context().Err() != nil {
		// The client went away: that is a cancel, whatever the leg saw.
		l.r.endFlight(l.f, event.KindFinish, event.CauseCancel)
		return
	}
	if l.r.halted() {
		// The owner's shutdown journaled its end (fail, unavailable).
		if !l.sent {
			api.WriteError(l.w, haltedError())
		}
		return
	}
	l.r.endFlight(l.f, kind, cause)
	if l.sent {
		return
	}
	switch {
	case engineErr != nil && (engineErr.Status >= 400 && engineErr.Status < 500 || engineErr.Status == http.StatusServiceUnavailable || engineErr.Code == codeAnswerTooLarge):
		api.WriteError(l.w, engineErr)
	case cause == event.CauseTimeout:
		api.WriteError(l.w, api.ServerError(http.StatusGatewayTimeout, "an engine did not answer in time"))
	case cause == event.CauseNoHandoff:
		api.WriteError(l.w, api.ServerError(http.StatusBadGateway, "the prefill engine returned no KV handoff the decode engine can use (is it running the NIXL connector?)"))
	default:
		msg := "an engine failed the request"
		if engineErr != nil {
			msg += ": " + engineErr.Message
		}
		api.WriteError(l.w, api.ServerError(http.StatusBadGateway, msg))
	}
}

// legFailure classifies a failed round trip: the client gone, the engine
// ejected under it, a timeout (which makes the router probe the engine),
// or a connection failure (which counts against the engine's breaker). An
// ejection or a connection failure before anything reached the client is
// re-placed once (live/retry.go); everything else ends the request.
func (l *leg) legFailure(e *engine, ctx context.Context, err error, stage string, timedOut bool) verdict {
	switch {
	case l.q.Context().Err() != nil:
		l.fail(event.KindFinish, event.CauseCancel, nil)
	case l.r.halted():
		l.fail(event.KindFail, event.CauseUnavailable, nil) // not the engine's fault
	case l.f.guard.isDead():
		if l.retryable() {
			return verdict{retry: true, stage: stage, from: e, cause: event.CauseEngineDown}
		}
		l.fail(event.KindFail, event.CauseEngineDown, &api.Error{Message: e.name + " was ejected"})
	case timedOut || ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
		l.r.timedOut(e)
		l.fail(event.KindFail, event.CauseTimeout, nil)
	case tooLarge(err):
		// The engine answered: nothing counts against it, and no retry.
		l.r.answered(e)
		l.fail(event.KindFail, event.CauseBadGateway, tooLargeError(e))
	default:
		l.r.failed(e, "connect")
		if l.retryable() {
			return verdict{retry: true, stage: stage, from: e, cause: event.CauseEngineError}
		}
		l.fail(event.KindFail, event.CauseEngineError, &api.Error{Message: e.name + " unreachable"})
	}
	return verdict{}
}

// twoLegs runs the prefill leg on pe, asks the core for the decode
// engine, and runs the decode leg there with the handoff (protocol §2-§4).
// A failure it may re-place comes back as a verdict.
func (l *leg) twoLegs(pe *engine) verdict {
	l.pe = pe
	l.f.noHandoff = false
	body, err := api.PrefillBody(l.req.Raw)
	if err != nil {
		l.fail(event.KindFail, event.CauseEngineError, api.BadRequest(err.Error()))
		return verdict{}
	}
	tctx, tcancel := context.WithTimeout(l.ctx, l.r.cfg.PrefillTimeout)
	defer tcancel()
	pctx, done := l.armLeg(tctx, pe)
	resp, err := l.post(pctx, pe, body)
	if err != nil {
		done()
		return l.legFailure(pe, tctx, err, "prefill", false)
	}
	rb, err := readLegBody(resp.Body)
	resp.Body.Close()
	done()
	if err != nil {
		return l.legFailure(pe, tctx, err, "prefill", false)
	}
	if resp.StatusCode != http.StatusOK {
		return l.engineStatus(pe, resp.StatusCode, resp.Header, rb, "prefill")
	}
	l.r.answered(pe)
	handoff := api.Handoff(rb)
	if handoff == nil {
		// vLLM before late 2025 returns no handoff when the one token was
		// an end of sequence (finish "stop"): that is an answer, not a
		// lost handoff, so the decode leg runs without one (recomputing
		// the prompt) even under fail.
		if _, finish := nonStreamTokens(rb); l.r.cfg.Handoff == HandoffFail && finish != api.FinishStop {
			l.f.noHandoff = true
			l.fail(event.KindFail, event.CauseNoHandoff, nil)
			return verdict{}
		}
		l.f.noHandoff = true
	}
	l.observeFirst()
	l.f.prefillCached = promptCached(rb)
	d, ok := l.r.ask(msg{kind: msgPrefilled, f: l.f})
	if !ok || d.inst == event.NoInstance {
		if !ok {
			l.fail(event.KindFail, event.CauseEngineError, nil)
		} else {
			l.sent = true // the owner ended it
			if l.r.halted() {
				api.WriteError(l.w, haltedError()) // its stop, not the engines
			} else {
				api.WriteError(l.w, api.Unavailable("no engine can take the decode now", time.Second))
			}
		}
		return verdict{}
	}
	de := l.r.engines[d.inst]
	if d.inst == pe.idx || handoff == nil {
		return l.run(de, l.req.Raw, nil, false)
	}
	return l.run(de, l.req.Raw, handoff, false)
}

// engineStatus handles a leg's non-200 answer before anything reached the
// client: a 5xx but 503 counts against the engine (a decode leg's, only
// while its prefill engine is above suspicion: a failed KV pull is the
// producer's fault), a 4xx is the request's fault. A prefill answered 502, 503 or
// 504, and a decode answered any 5xx, are re-placed once.
func (l *leg) engineStatus(e *engine, status int, hdr http.Header, body []byte, stage string) verdict {
	ae := api.ParseError(status, body)
	if ae == nil {
		ae = &api.Error{Status: status, Message: fmt.Sprintf("%s answered %d", e.name, status)}
	}
	ae.Status = status
	if ae.Type == "" {
		ae.Type = api.TypeInvalidRequest
		if status >= 500 {
			ae.Type = api.TypeServer
		}
	}
	if status >= 500 {
		switch {
		case status == http.StatusServiceUnavailable:
			// The engine answered that it will not serve now (busy,
			// draining, asleep): it is there, and not broken. Counting it
			// would eject it for a hold at least (live/health.go).
		case stage == "decode" && l.pe != nil && l.pe != e:
			l.r.blame(l.pe, e)
		default:
			l.r.failed(e, "5xx")
		}
		retry := stage == "decode" || status == http.StatusBadGateway || status == http.StatusServiceUnavailable ||
			status == http.StatusGatewayTimeout
		if retry && l.retryable() && l.q.Context().Err() == nil {
			return verdict{retry: true, stage: stage, from: e, cause: event.CauseBadGateway}
		}
		if status == http.StatusServiceUnavailable {
			// The engine is there but will not serve now (overloaded,
			// draining, asleep): the client gets the 503 and its
			// Retry-After (1 s when the engine gave none), as from the
			// engine itself, and may come back.
			ra := time.Second
			if s, err := strconv.Atoi(hdr.Get("Retry-After")); err == nil && s > 0 {
				ra = time.Duration(s) * time.Second
			}
			l.fail(event.KindFail, event.CauseUnavailable, api.Unavailable(e.name+" is unavailable: "+ae.Message, ra))
			return verdict{}
		}
		l.fail(event.KindFail, event.CauseBadGateway, ae)
		return verdict{}
	}
	l.r.answered(e)
	l.fail(event.KindFail, event.CauseEngineError, ae)
	return verdict{}
}

// passThrough answers a non-streamed client with an engine's body, and
// journals the finish.
func (l *leg) passThrough(body []byte) {
	tokens, finish := nonStreamTokens(body)
	l.f.produced.Store(int64(max(tokens, 1)))
	l.w.Header().Set("Content-Type", "application/json")
	l.writeBy()
	l.w.WriteHeader(http.StatusOK)
	l.sent = true
	if _, err := l.w.Write(body); err != nil {
		l.clientWriteFailed()
		return
	}
	l.wroteAll()
	l.observeFinish(int64(max(tokens, 1)))
	l.r.endFlight(l.f, event.KindFinish, l.finishCause(finish))
}

// writeBy bounds the next write to the client: a client that takes no
// data for the read timeout (or past the request's deadline) has stopped
// reading, and its request ends rather than hold engine capacity and an
// in-flight slot for as long as the socket stays open. A blocked write
// is not interrupted by the request's context: only a deadline ends it.
// Every write to the client is bracketed by writeBy and wrote: a deadline
// that passes while the relay waits for the engine must not cut the error
// event that tells the client why its stream ends.
//
// Under HTTP/1 a deadline that passes with no write under way ends
// nothing, so it is set lazily: writeBy moves it only when it would come
// less than the read timeout after now, and then to up to a slack later
// (writeSlack), so a stream sets it about once a slack, not twice a
// token; every write still gets at least the read timeout (a stalled
// client is cut between the read timeout and a slack past it), and the
// response's end clears it (wroteAll). Under HTTP/2 a deadline resets the
// stream when it passes, write or not: it is set before each write and
// cleared after (wrote).
func (l *leg) writeBy() {
	now := time.Now()
	need := now.Add(l.r.cfg.ReadTimeout)
	// A second past the request's deadline: at the deadline the relay
	// tells the client why its stream ends (an error event), which needs
	// a write of its own.
	last, capped := l.ctx.Deadline()
	last = last.Add(time.Second)
	if capped && last.Before(need) {
		need = last
	}
	lazy := l.q.ProtoMajor == 1
	if lazy && !l.wdl.IsZero() && !l.wdl.Before(need) {
		return // set, and far enough
	}
	d := need
	if lazy {
		d = now.Add(l.r.cfg.ReadTimeout + writeSlack(l.r.cfg.ReadTimeout))
		if capped && last.Before(d) {
			d = last
		}
	}
	l.setWriteDeadline(d)
}

// writeSlack is how much later than the read timeout writeBy may set an
// HTTP/1 client's write deadline: an eighth of the read timeout, at most
// a second.
func writeSlack(readTimeout time.Duration) time.Duration {
	return min(readTimeout/8, time.Second)
}

// wrote clears the write deadline writeBy set, after a write went
// through, under HTTP/2 (under HTTP/1 it stays until wroteAll).
func (l *leg) wrote() {
	if l.q.ProtoMajor != 1 {
		l.setWriteDeadline(time.Time{})
	}
}

// wroteAll clears the write deadline writeBy set, after the response's
// last write went through.
func (l *leg) wroteAll() {
	if !l.wdl.IsZero() {
		l.setWriteDeadline(time.Time{})
	}
}

// setWriteDeadline sets the client's write deadline (zero: none).
func (l *leg) setWriteDeadline(d time.Time) {
	if l.rc == nil {
		l.rc = http.NewResponseController(l.w)
	}
	l.wdl = d
	_ = l.rc.SetWriteDeadline(d) // (not every writer has one)
}

// clientWriteFailed ends a request whose client could not be written to,
// or whose context a failed write cancelled: it hung up or stopped reading
// (cancel), or the request's deadline passed while it did not read
// (timeout). Either way the engine is not blamed.
func (l *leg) clientWriteFailed() {
	// (A failed write cancels the request's context itself: net/http's
	// connection writer does, so only the deadline tells the two apart.)
	dl, ok := l.ctx.Deadline()
	switch {
	case l.r.halted(): // the owner's shutdown journaled its end
	case ok && !time.Now().Before(dl):
		l.r.endFlight(l.f, event.KindFail, event.CauseTimeout)
	default:
		l.r.endFlight(l.f, event.KindFinish, event.CauseCancel)
	}
}

// finishCause maps a finish reason to the journal's cause. An answer that
// stopped at max_tokens because the client asked for exactly that many
// (min_tokens up to the limit, or ignore_eos, as benchmark clients do) is a
// natural end, not a cut.
func (l *leg) finishCause(reason string) event.Cause {
	if reason == api.FinishLength && (l.f.want == 0 || !l.req.IgnoreEOS && l.req.MinTokens < l.f.want) {
		return event.CauseLength // want 0: a chat answer that ran to the end of an unknown context
	}
	return event.CauseStop
}

// run sends the leg that produces the answer to e (the decode leg, or the
// single ordinary request when single) and relays it to the client. A
// failure before anything reached the client may come back as a verdict
// to re-place the request.
func (l *leg) run(e *engine, raw map[string]json.RawMessage, handoff json.RawMessage, single bool) verdict {
	stage := "decode"
	if single {
		stage = "prefill"
	}
	var body []byte
	var err error
	// A streamed leg always asks for usage: the engine's token count
	// corrects the relay's count of chunks. The usage chunk goes back to
	// the client only when it asked for it.
	dropUsage := l.req.Stream && !l.req.IncludeUsage
	if dropUsage {
		raw = api.WithUsage(raw)
	}
	if handoff != nil {
		body, err = api.DecodeBody(raw, handoff)
	} else {
		body, err = api.PlainBody(raw)
	}
	if err != nil {
		l.fail(event.KindFail, event.CauseEngineError, api.BadRequest(err.Error()))
		return verdict{}
	}
	lctx, done := l.armLeg(l.ctx, e)
	defer done()
	var timedOut atomic.Bool
	first := l.r.cfg.FirstTokenTimeout
	if handoff == nil {
		// The engine prefills the prompt itself (one engine serves it
		// whole, or a decode leg without a handoff recomputes it): its
		// first token comes after the engine's queue and a prefill, which
		// the prefill timeout bounds, as it bounds a prefill leg.
		first = l.r.cfg.PrefillTimeout
	}
	if !l.req.Stream {
		// vLLM sends a non-streamed answer's headers with its last token:
		// there is no first token to wait for, and the request's own
		// deadline bounds the leg.
		first = l.r.cfg.RequestTimeout
	}
	timer := time.AfterFunc(first, func() { timedOut.Store(true); done() })
	defer timer.Stop()
	failed := func(err error) verdict {
		return l.legFailure(e, lctx, err, stage, timedOut.Load() && !l.f.guard.isDead())
	}
	resp, err := l.post(lctx, e, body)
	if err != nil {
		return failed(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		rb, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return l.engineStatus(e, resp.StatusCode, resp.Header, rb, stage)
	}
	if !l.req.Stream {
		timer.Reset(l.r.cfg.RequestTimeout)
		rb, err := readLegBody(resp.Body)
		if err != nil {
			return failed(err)
		}
		l.r.answered(e)
		if single {
			// A whole answer's usage is known with its first token: its
			// cached prompt tokens are journaled as a prefill leg's are.
			l.f.prefillCached = promptCached(rb)
			l.whole = true
			l.observeFirst()
			if !l.prefilled() {
				return verdict{}
			}
		}
		l.passThrough(rb)
		return verdict{}
	}
	return l.relay(e, resp.Body, single, timer, &timedOut, stage, dropUsage)
}

// prefilled tells the owner a single request's first token exists (the
// core places its decode on the same engine); false when the request was
// ended instead.
func (l *leg) prefilled() bool {
	d, ok := l.r.ask(msg{kind: msgPrefilled, f: l.f})
	if !ok || d.inst == event.NoInstance {
		l.fail(event.KindFail, event.CauseEngineError, nil)
		return false
	}
	return true
}

// relay copies a streamed answer to the client event by event, timing
// every token, and journals how it ended. The client gets its status with
// the first event that carries a token (events before it, such as a chat
// role chunk, are held until then), so a stream that breaks, or that
// reports an error event, before any token may still be re-placed as a
// failed leg; one that breaks after ends with an error event, never
// silently, journaled with its cause.
func (l *leg) relay(e *engine, upstream io.Reader, single bool, timer *time.Timer, timedOut *atomic.Bool, stage string, dropUsage bool) verdict {
	sw := api.NewSSEWriter(l.w)
	var held [][]byte // events before the first token, not yet sent
	open := func() error {
		if l.sent {
			return nil
		}
		api.SetSSEHeaders(l.w.Header())
		l.w.WriteHeader(http.StatusOK)
		l.sent = true
		if fl, ok := l.w.(http.Flusher); ok {
			fl.Flush()
		}
		for _, p := range held {
			if err := sw.SendRaw(p); err != nil {
				return err
			}
		}
		held = nil
		return nil
	}
	sr := api.NewSSEReaderMax(upstream, maxLegBody)
	delivered, usage, cached := 0, -1, 0
	finish := ""
	var last time.Time
	for k := 0; ; k++ {
		if k > 0 {
			// The read timeout times the engine alone: it runs while the
			// relay waits for the engine's next event, not while it
			// writes to the client (a slow reader is no engine fault).
			timer.Reset(l.r.cfg.ReadTimeout)
		}
		payload, done, err := sr.ReadEvent()
		if err != nil {
			if l.q.Context().Err() != nil {
				// The client hung up, or a write to it failed after it
				// went into the response's buffer (net/http cancels the
				// context then): past the request's deadline that is a
				// timeout, as when the write itself fails.
				l.clientWriteFailed()
				return verdict{}
			}
			dead := l.f.guard.isDead()
			if !l.sent {
				// Nothing reached the client: fail (or re-place) it as a
				// failed round trip.
				return l.legFailure(e, context.Background(), err, stage, timedOut.Load() && !dead)
			}
			if l.r.halted() {
				// The owner's shutdown journaled its end; say why it ends.
				l.writeBy()
				_ = sw.EndWithError(haltedError().Message, api.TypeUnavailable, http.StatusServiceUnavailable)
				return verdict{}
			}
			cause, code, why := event.CauseBadGateway, http.StatusBadGateway, "the engine's stream broke before its end"
			switch {
			case dead:
				cause, why = event.CauseEngineDown, e.name+" went down before the answer's end"
			case l.ctx.Err() != nil: // the request's own deadline: not the engine's fault
				cause, code, why = event.CauseTimeout, http.StatusGatewayTimeout, "the request's deadline passed before the answer's end"
			case timedOut.Load(): // a read gap: the engine may be stuck
				cause, code, why = event.CauseTimeout, http.StatusGatewayTimeout, "the engine sent nothing for the read timeout"
				l.r.timedOut(e)
			case tooLarge(err): // the engine's event is whole; the router cannot relay it
				why = tooLargeError(e).Message
			default:
				l.r.failed(e, "connect") // 200 then broken
			}
			// Journal the cause before the client reads the error event
			// (it may hang up at once, which is not a cancel).
			l.r.endFlight(l.f, event.KindFail, cause)
			l.writeBy()
			_ = sw.EndWithError(why, api.TypeServer, code)
			return verdict{}
		}
		timer.Stop()
		if done {
			break
		}
		tokens := 0
		if c, ok := api.ReadChunk(payload); ok {
			if c.Err != nil {
				if !l.sent {
					// An error event before any token (vLLM reports a
					// request it failed, a KV pull among them, this way
					// once its stream has begun): nothing reached the
					// client, so it is a failed leg like a 5xx.
					return l.engineStatus(e, http.StatusBadGateway, nil, payload, stage)
				}
				l.r.endFlight(l.f, event.KindFail, event.CauseBadGateway)
				l.writeBy()
				_ = sw.EndWithRawError(payload)
				return verdict{}
			}
			n := c.Tokens
			if c.Finish != "" {
				finish = c.Finish
			}
			if c.Usage >= 0 {
				usage = c.Usage
				if single {
					// One engine served the prompt too: its usage, the
					// stream's last chunk, says what its cache served.
					cached = promptCached(payload)
				}
				if dropUsage && c.Tokens == 0 {
					continue // the usage chunk the client did not ask for
				}
			}
			if n > 0 {
				now := time.Now()
				if delivered == 0 {
					if single {
						l.observeFirst()
						if !l.prefilled() {
							return verdict{}
						}
					} else {
						l.observeHandoff()
						l.r.send(msg{kind: msgFirstToken, f: l.f})
					}
				} else {
					e.gapNanos.Add(int64(now.Sub(last)))
					e.gaps.Add(1)
				}
				last = now
				delivered += n
				l.f.produced.Store(int64(delivered))
			}
			tokens = n
		}
		if tokens == 0 && !l.sent {
			held = append(held, bytes.Clone(payload))
			continue
		}
		l.writeBy()
		err = open()
		if err == nil {
			err = sw.SendRaw(payload)
		}
		if err != nil {
			l.clientWriteFailed()
			return verdict{}
		}
		l.wrote()
	}
	l.writeBy()
	if err := open(); err != nil {
		l.clientWriteFailed()
		return verdict{}
	}
	l.r.answered(e)
	if err := sw.Done(); err != nil && (l.q.Context().Err() != nil || errors.Is(err, os.ErrDeadlineExceeded)) {
		l.clientWriteFailed()
		return verdict{}
	}
	l.wroteAll()
	if delivered == 0 && single {
		l.observeFirst()
		if !l.prefilled() {
			return verdict{}
		}
	}
	if usage > 0 {
		delivered = usage
	}
	l.f.endCached = cached // read by the owner after endFlight's send
	l.f.produced.Store(int64(max(delivered, 1)))
	l.observeFinish(int64(max(delivered, 1)))
	l.r.endFlight(l.f, event.KindFinish, l.finishCause(finish))
	return verdict{}
}

// parseScheduled reads an X-Narwhal-Scheduled-Ns value: nanoseconds of
// the router clock, from 0 to hi.
func parseScheduled(s string, hi time.Duration) (time.Duration, *api.Error) {
	if ns, err := strconv.ParseInt(s, 10, 64); err == nil && ns >= 0 && time.Duration(ns) <= hi {
		return time.Duration(ns), nil
	}
	return 0, api.Invalid(HeaderScheduled, s, fmt.Sprintf(
		"nanoseconds of the router clock, from 0 to %d (a second after now)", hi))
}

// promptCached is a whole answer's usage.prompt_tokens_details.cached_tokens
// (vLLM's with --enable-prompt-tokens-details; 0 when absent).
func promptCached(body []byte) int {
	var v struct {
		Usage *struct {
			Details *struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if json.Unmarshal(body, &v) != nil || v.Usage == nil || v.Usage.Details == nil {
		return 0
	}
	return max(v.Usage.Details.Cached, 0)
}

// nonStreamTokens reads a whole response's completion tokens (usage, else
// one per non-empty choice) and first finish reason.
func nonStreamTokens(body []byte) (int, string) {
	var v struct {
		Choices []struct {
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
		Usage *struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(body, &v) != nil {
		return 0, ""
	}
	finish := ""
	if len(v.Choices) > 0 && v.Choices[0].FinishReason != nil {
		finish = *v.Choices[0].FinishReason
	}
	if v.Usage != nil && v.Usage.CompletionTokens >= 0 {
		return v.Usage.CompletionTokens, finish // a negative count is none, as api.ReadChunk reads it
	}
	return len(v.Choices), finish
}
