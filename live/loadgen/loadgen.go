// Package loadgen is narwhal-bench live's load generator: it replays a
// plan of requests open loop on a fixed schedule against an
// OpenAI-compatible endpoint (the live router, a bare vLLM, any server),
// streams every answer and times its tokens on the client side.
//
// Open loop: a request is sent at its scheduled time whatever the earlier
// answers do. One scheduler goroutine sleeps until each send time and
// starts one goroutine per request; the request's body is built before its
// time comes, so nothing but the sleep's own wake-up sits between the
// schedule and the send. The schedule lag (actual minus scheduled send) of
// every request is measured and summarised (Lag); a run whose p99 lag is
// over DegradedLag did not offer the load it claims and is marked degraded.
package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/narwhal-bench/narwhal-bench/live/api"
)

// Headers the generator sets (the live router's names, live.HeaderScheduled
// and live.HeaderClass; repeated here so this package needs no router).
const (
	HeaderScheduled = "X-Narwhal-Scheduled-Ns"
	HeaderClass     = "X-Narwhal-Class"
	HeaderRequestID = "X-Request-Id"
)

// DegradedLag is the p99 schedule lag above which a run is degraded: the
// generator could not keep the schedule, so the offered load was not the
// planned one.
const DegradedLag = 500 * time.Millisecond

// Item is one planned request.
type Item struct {
	// At is the scheduled send time, from the run's start.
	At    time.Duration
	Class string
	// Input is the prompt length in tokens; the prompt is Prompt when set,
	// else SharedPromptText(seed, salt, index, Input, PrefixGroup,
	// PrefixTokens): with PrefixGroup 0, PromptText's for salt 0; or, when
	// an earlier item left PrefixGroup cached (CacheGroup), that item's
	// text for the prefix, then index's own.
	Input  int
	Prompt string
	// PrefixGroup and PrefixTokens are the trace's shared prefix
	// (traces.Request): prompts of one nonzero group begin with the same
	// PrefixTokens tokens of text.
	PrefixGroup  int64
	PrefixTokens int
	// CacheGroup and CacheTokens are the group and length the prompt leaves
	// cached (traces.Request: an imported Mooncake turn's own blocks): a
	// later prompt whose prefix group it is begins with this prompt's text.
	CacheGroup  int64
	CacheTokens int
	// Output is the answer length the request asks for: max_tokens =
	// Output. MinTokens is min_tokens (normally Output, so that an engine
	// produces exactly the planned answer; see Plan).
	Output    int
	MinTokens int
}

// Endpoints.
const (
	EndpointCompletions = "completions"
	EndpointChat        = "chat"
)

// Config configures a Run.
type Config struct {
	// URL is the endpoint's base URL (http://host:port, with or without a
	// trailing /v1).
	URL string
	// Endpoint is EndpointCompletions (POST /v1/completions, default) or
	// EndpointChat (POST /v1/chat/completions).
	Endpoint string
	// Model is the body's model field (default "stub").
	Model string
	// APIKey, when set, is sent as "Authorization: Bearer <key>".
	APIKey string
	// Seed makes the generated prompts (PromptText).
	Seed uint64
	// Salt varies the prompts between runs of one seed (the CLI salts
	// each rate's run with its rate), so that a server's prefix cache does
	// not serve one run's prompts from another's.
	Salt uint64
	// IDPrefix begins each request's X-Request-Id, its index after it
	// (default "nwb-live-"; a warm-up's are "nwb-warmup-", so that a
	// target's logs tell them from the run's).
	IDPrefix string
	// RouterStart, when set, is the receiving router's clock zero
	// (live.Router.Start): each request then carries X-Narwhal-Scheduled-Ns,
	// its scheduled send time in nanoseconds of that clock, so the
	// router's journal measures TTFT from the schedule. Zero: no header.
	RouterStart time.Time
	// MaxConcurrency bounds the requests in flight (0: no bound). A send
	// waiting for a slot is late, and its lag says so (vllm bench serve's
	// --max-concurrency).
	MaxConcurrency int
	// RequestTimeout bounds one request end to end (default 1 h);
	// FirstTokenTimeout bounds the wait for its first token (default
	// RequestTimeout).
	RequestTimeout, FirstTokenTimeout time.Duration
	// Drain is how long, after a stop (ctx cancelled), requests in flight
	// may still finish before they are cancelled (default 10 s).
	Drain time.Duration
	// Lead is how long after Run is called the schedule's time 0 is
	// (default 20 ms), so the first sends are not late by the setup.
	Lead time.Duration
	// Transport carries the requests (default: a pooled transport sized
	// for thousands of concurrent streams). A request a server's idle
	// close failed is sent again (api.DoResending); one that met such a
	// close late is recognised only on a connection api.NewTransport
	// dialed (NewTransport's, or a clone of one).
	Transport http.RoundTripper
	// KeepTokenTimes keeps every token's arrival time per request
	// (Outcome.TokenAt); the summary's ITL needs them. Default on via Run's
	// callers; off saves memory on long runs.
	KeepTokenTimes bool
	// Progress, when set, is called after each request ends with the
	// requests ended and the plan's size.
	Progress func(done, total int)
}

// Outcome is one request as the client saw it. Times are from the run's
// start (Result.Start); FirstToken and End are -1 when they never came.
type Outcome struct {
	Index     int
	Class     string
	Input     int
	Output    int // max_tokens asked
	Scheduled time.Duration
	// QueueWait is how long it waited for a slot under MaxConcurrency (the
	// client's own queue, vllm bench serve's client queue time): the
	// request was ready at Scheduled+QueueWait (Ready).
	QueueWait time.Duration
	Sent      time.Duration
	// FirstToken is when the first chunk with content arrived.
	FirstToken time.Duration
	End        time.Duration
	// Tokens counts output tokens: the final usage when the server sent
	// it, else the chunks with content.
	Tokens int
	// PromptTokens is the prompt's length as the server counted it (its
	// usage's prompt_tokens; -1 when it sent none): Input is the plan's,
	// which a server's tokenizer counts differently.
	PromptTokens int
	// Chunks counts the chunks with content (ITL's denominator).
	Chunks int
	// TokenAt is when each chunk with content arrived, microseconds after
	// Sent (KeepTokenTimes).
	TokenAt []int32
	// Status is the HTTP status (0: no response).
	Status int
	Finish string // the last finish_reason seen
	// Cut: it stopped at max_tokens although it asked for fewer as its
	// least (min_tokens under max_tokens: the trace's answer was longer
	// than its output cap), so it did not finish naturally and does not
	// qualify (the journal's cause length).
	Cut bool
	// Err says why the request did not finish; "" when it did.
	Err string
	// Cancelled: the run stopped it (Ctrl-C after the drain).
	Cancelled bool
	// TimedOut: a timeout ended it.
	TimedOut bool
}

// OK reports whether the request streamed to its end.
func (o *Outcome) OK() bool { return o.Err == "" && o.Status == http.StatusOK }

// Ready is when the schedule let the request go: its scheduled send, or
// later when it waited for a concurrency slot. Schedule lag, the
// journal's scheduled send and the goodput's TTFT count from it, so the
// client's own queue is neither the generator's lateness nor the
// server's latency.
func (o *Outcome) Ready() time.Duration { return o.Scheduled + o.QueueWait }

// Result is a run.
type Result struct {
	// Start is the wall-clock time of the schedule's time 0.
	Start time.Time
	// Planned is the plan's size; Outcomes holds the requests sent, in
	// plan order (a stopped run sends fewer).
	Planned  int
	Outcomes []Outcome
	// Partial is true when the run stopped before sending every request,
	// or with requests in flight that the drain then cancelled.
	Partial bool
	// Elapsed is from time 0 to the last request's end.
	Elapsed time.Duration
	// RouterOffset is time 0 on the router's clock (Config.RouterStart
	// set; else 0): a request's scheduled send in the router's journal is
	// its Scheduled plus this.
	RouterOffset time.Duration
}

// targetKeepAlive is how long the target is taken to keep an idle
// connection open (vLLM's 5 s): api.DoResending's keepAlive. Tests
// shorten it.
var targetKeepAlive = api.EngineKeepAlive

// NewTransport is the generator's default transport.
func NewTransport() *http.Transport { return api.NewTransport(8192) }

func (c *Config) defaults() error {
	if c.URL == "" {
		return errors.New("loadgen: no URL")
	}
	c.URL = strings.TrimSuffix(strings.TrimRight(c.URL, "/"), "/v1")
	switch c.Endpoint {
	case "":
		c.Endpoint = EndpointCompletions
	case EndpointCompletions, EndpointChat:
	default:
		return fmt.Errorf("loadgen: endpoint %q: expected completions or chat", c.Endpoint)
	}
	if c.Model == "" {
		c.Model = "stub"
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = time.Hour
	}
	if c.FirstTokenTimeout <= 0 {
		c.FirstTokenTimeout = c.RequestTimeout
	}
	if c.Drain <= 0 {
		c.Drain = 10 * time.Second
	}
	if c.Lead <= 0 {
		c.Lead = 20 * time.Millisecond
	}
	if c.Transport == nil {
		c.Transport = NewTransport()
	}
	return nil
}

// runner is one Run's shared state.
type runner struct {
	texts  turnTexts // the prompts, in plan order
	cfg    Config
	client *http.Client
	path   string
	start  time.Time
	out    []Outcome
	done   atomic.Int64
	total  int
	// reqCtx is cancelled once the drain after a stop ran out.
	reqCtx context.Context
}

// Run sends plan (sorted by At) open loop and returns every sent request's
// outcome. When ctx ends, sending stops; requests in flight get cfg.Drain
// to finish, then are cancelled; the result is marked Partial. Run returns
// an error only for a bad configuration.
func Run(ctx context.Context, cfg Config, plan []Item) (*Result, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	for i := 1; i < len(plan); i++ {
		if plan[i].At < plan[i-1].At {
			return nil, fmt.Errorf("loadgen: plan item %d at %v before item %d at %v: expected the plan sorted by time", i, plan[i].At, i-1, plan[i-1].At)
		}
	}
	r := &runner{cfg: cfg, client: &http.Client{Transport: cfg.Transport}, total: len(plan),
		out: make([]Outcome, len(plan)), texts: turnTexts{seed: cfg.Seed, salt: cfg.Salt, plan: plan}}
	r.path = "/v1/completions"
	if cfg.Endpoint == EndpointChat {
		r.path = "/v1/chat/completions"
	}
	reqCtx, cancelReqs := context.WithCancel(context.Background())
	defer cancelReqs()
	r.reqCtx = reqCtx
	r.start = time.Now().Add(cfg.Lead)
	var sem chan struct{}
	if cfg.MaxConcurrency > 0 {
		sem = make(chan struct{}, cfg.MaxConcurrency)
	}
	var wg sync.WaitGroup
	var blockedEnd time.Time // when the send loop last got a slot after waiting for one
	sent := 0
	timer := time.NewTimer(time.Hour)
	timer.Stop()
send:
	for i := range plan {
		body, err := r.body(i, &plan[i])
		if err != nil {
			return nil, err
		}
		if d := time.Until(r.start.Add(plan[i].At)); d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				timer.Stop()
				break send
			case <-timer.C:
			}
		} else if ctx.Err() != nil {
			break send
		}
		var wait time.Duration
		if sem != nil {
			select {
			case sem <- struct{}{}:
			default:
				// No slot free: the wait is the client's own queue.
				select {
				case sem <- struct{}{}:
					blockedEnd = time.Now()
				case <-ctx.Done():
					break send
				}
			}
			// Queued until the last wait for a slot ended, whether it was
			// this request's or one before it that held the loop past this
			// one's scheduled send; any lateness after that is lag.
			if at := r.start.Add(plan[i].At); blockedEnd.After(at) {
				wait = blockedEnd.Sub(at)
			}
		}
		sent++
		wg.Add(1)
		go func(i int, wait time.Duration) {
			defer wg.Done()
			r.one(i, &plan[i], body, wait)
			if sem != nil {
				<-sem
			}
			if cfg.Progress != nil {
				cfg.Progress(int(r.done.Add(1)), r.total)
			}
		}(i, wait)
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	cut := false // the drain ran out: requests in flight were cancelled
	select {
	case <-finished:
	case <-ctx.Done():
		// Stopped while sending, or after the last send with requests
		// still in flight: they get the drain, then are cancelled.
		select {
		case <-finished:
		case <-time.After(cfg.Drain):
			cut = true
			cancelReqs()
			<-finished
		}
	}
	res := &Result{Start: r.start, Planned: len(plan), Outcomes: r.out[:sent], Partial: sent < len(plan) || cut}
	if !cfg.RouterStart.IsZero() {
		res.RouterOffset = r.start.Sub(cfg.RouterStart)
	}
	for i := range res.Outcomes {
		if e := res.Outcomes[i].End; e > res.Elapsed {
			res.Elapsed = e
		}
	}
	return res, nil
}

// wireBody is the request body: completions or chat, streamed with usage,
// max_tokens and min_tokens (vLLM's extension) set.
type wireBody struct {
	Model         string        `json:"model"`
	Prompt        *string       `json:"prompt,omitempty"`
	Messages      []wireMessage `json:"messages,omitempty"`
	MaxTokens     int           `json:"max_tokens"`
	MinTokens     int           `json:"min_tokens,omitempty"`
	Stream        bool          `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type wireMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

func (r *runner) body(i int, it *Item) ([]byte, error) {
	if it.Input < 1 || it.Output < 1 {
		return nil, fmt.Errorf("loadgen: plan item %d: input %d, output %d: expected both >= 1", i, it.Input, it.Output)
	}
	text := it.Prompt
	if text == "" {
		text = r.texts.prompt(i)
	}
	b := wireBody{Model: r.cfg.Model, MaxTokens: it.Output, MinTokens: it.MinTokens, Stream: true}
	b.StreamOptions.IncludeUsage = true
	if r.cfg.Endpoint == EndpointChat {
		b.Messages = []wireMessage{{Role: "user", Content: text}}
	} else {
		b.Prompt = &text
	}
	return json.Marshal(b)
}

// since is the time from the run's start.
func (r *runner) since() time.Duration { return time.Since(r.start) }

// one sends request i and reads its stream.
func (r *runner) one(i int, it *Item, body []byte, wait time.Duration) {
	o := &r.out[i]
	*o = Outcome{Index: i, Class: it.Class, Input: it.Input, Output: it.Output, Scheduled: it.At, QueueWait: wait, FirstToken: -1, End: -1, PromptTokens: -1}
	ctx, cancel := context.WithTimeout(r.reqCtx, r.cfg.RequestTimeout)
	defer cancel()
	var firstTimeout atomic.Bool
	// A first-token bound no shorter than the request's would race it at
	// the same instant: the request timeout alone names the cause then.
	ft := time.AfterFunc(r.cfg.FirstTokenTimeout, func() { firstTimeout.Store(true); cancel() })
	if r.cfg.FirstTokenTimeout >= r.cfg.RequestTimeout {
		ft.Stop()
	}
	defer ft.Stop()
	hq, err := http.NewRequestWithContext(ctx, http.MethodPost, r.cfg.URL+r.path, bytes.NewReader(body))
	if err != nil {
		o.Err, o.End = err.Error(), r.since()
		return
	}
	hq.Header.Set("Content-Type", "application/json")
	hq.Header.Set("Accept", "text/event-stream")
	prefix := r.cfg.IDPrefix
	if prefix == "" {
		prefix = "nwb-live-"
	}
	hq.Header.Set(HeaderRequestID, prefix+strconv.Itoa(i))
	if it.Class != "" {
		hq.Header.Set(HeaderClass, it.Class)
	}
	if !r.cfg.RouterStart.IsZero() {
		hq.Header.Set(HeaderScheduled, strconv.FormatInt(int64(r.start.Add(o.Ready()).Sub(r.cfg.RouterStart)), 10))
	}
	if r.cfg.APIKey != "" {
		hq.Header.Set("Authorization", "Bearer "+r.cfg.APIKey)
	}
	sent := time.Now()
	o.Sent = sent.Sub(r.start)
	// A server closes a pooled connection idle past its keep-alive
	// (vLLM's 5 s, many proxies'): a request written onto it as it closes
	// was never read, and is sent again rather than counted as the
	// server's failure; anything the server may have read is not
	// (api.DoResending). A resend's time counts in the request's TTFT, as
	// a new connection's does.
	resp, err := api.DoResending(r.client, hq, targetKeepAlive)
	if err != nil {
		r.failed(o, ctx, &firstTimeout, err)
		return
	}
	defer resp.Body.Close()
	o.Status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		msg := fmt.Sprintf("HTTP %d", resp.StatusCode)
		if e := api.ParseError(resp.StatusCode, b); e != nil && e.Message != "" {
			msg += ": " + e.Message
		}
		o.Err, o.End = msg, r.since()
		return
	}
	sr := api.NewSSEReader(resp.Body)
	usage := -1
	for {
		payload, done, err := sr.ReadEvent()
		if err != nil {
			ct := resp.Header.Get("Content-Type")
			stream := strings.Contains(ct, "event-stream")
			// A body that ends where no event does (a JSON answer, or a
			// last data: [DONE] without its newline) reads as an
			// unexpected EOF.
			ended := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
			if ended && stream && o.Finish != "" {
				break // ended after its finish reason, with no whole data: [DONE] (as vllm bench serve, a whole answer)
			}
			if ended && !stream {
				err = fmt.Errorf("the answer was not a stream (Content-Type %q, expected text/event-stream): does the server honour stream: true?", ct)
			} else if ended && ctx.Err() == nil {
				err = errors.New("the stream ended before its finish reason and data: [DONE] (the connection closed mid-answer)")
			}
			r.failed(o, ctx, &firstTimeout, err)
			return
		}
		if done {
			break
		}
		c, ok := api.ReadChunk(payload)
		if !ok {
			continue
		}
		if c.Err != nil {
			o.Err, o.End = "error event: "+shorten(string(c.Err)), r.since()
			return
		}
		n := c.Tokens
		if c.Finish != "" {
			o.Finish = c.Finish
		}
		if c.Usage >= 0 {
			usage = c.Usage
		}
		if c.Prompt >= 0 {
			o.PromptTokens = c.Prompt
		}
		if n > 0 {
			now := time.Now()
			if o.Chunks == 0 {
				o.FirstToken = now.Sub(r.start)
				ft.Stop()
			}
			o.Chunks++
			if r.cfg.KeepTokenTimes {
				o.TokenAt = append(o.TokenAt, int32(min(now.Sub(sent)/time.Microsecond, 1<<31-1)))
			}
		}
	}
	o.End = r.since()
	o.Tokens = o.Chunks
	if usage > 0 {
		o.Tokens = usage
	}
	o.Cut = o.Finish == "length" && it.MinTokens < it.Output
	if o.Chunks == 0 {
		// A stream that ends without one chunk of output is no answer
		// (vllm bench serve fails it: no valid chunk for a TTFT); counted
		// as an error, it cannot flatter the throughput or the latencies.
		o.Err = "the stream ended without any output"
	}
}

// failed records a request that ended without its stream's end.
func (r *runner) failed(o *Outcome, ctx context.Context, firstTimeout *atomic.Bool, err error) {
	o.End = r.since()
	o.Tokens = o.Chunks
	switch {
	case r.reqCtx.Err() != nil:
		o.Cancelled = true
		o.Err = "cancelled: the run stopped"
	case firstTimeout.Load():
		o.TimedOut = true
		o.Err = "no first token within the first-token timeout"
	case ctx.Err() != nil:
		o.TimedOut = true
		o.Err = "request timeout"
	default:
		o.Err = shorten(err.Error())
	}
}

func shorten(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}
