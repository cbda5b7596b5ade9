package stub

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/narwhal-bench/narwhal-bench/live/api"
)

func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.serveGenerate(w, r, false) })
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.serveGenerate(w, r, true) })
	mux.HandleFunc("GET /v1/models", s.guard(s.serveModels))
	mux.HandleFunc("GET /health", s.guard(s.serveHealth))
	mux.HandleFunc("POST /tokenize", s.guard(s.serveTokenize))
	mux.HandleFunc("POST /detokenize", s.guard(s.serveDetokenize))
	mux.HandleFunc("GET /version", s.guard(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"version": "narwhal-stub"}) // vLLM's: its release
	}))
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("POST "+PullPath, s.servePull)
	mux.HandleFunc("POST "+RenewPath, s.serveRenew)
	if s.opts.AllowFaults {
		mux.HandleFunc("/stub/faults", s.serveFaults)
	} else {
		mux.HandleFunc("/stub/faults", func(w http.ResponseWriter, _ *http.Request) {
			api.WriteVLLMError(w, &api.Error{Status: http.StatusNotFound, Type: "NotFoundError",
				Message: "/stub/faults is off: start the stubs with --allow-faults to inject faults"})
		})
	}
	return mux
}

// guard applies the stall fault to a route.
func (s *Server) guard(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.getFaults().Stall {
			s.stall(r)
			return
		}
		h(w, r)
	}
}

func (s *Server) stall(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-s.stallCh:
	}
}

func (s *Server) serveHealth(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "engine_id": s.id,
		"generation": s.started.Load()})
}

func (s *Server) serveModels(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []map[string]any{{
		"id": s.opts.Model, "object": "model", "created": s.started.Load() / 1e9, "owned_by": "narwhal-stub",
		"max_model_len": s.opts.MaxModelLen}}})
}

// readRequest reads and decodes a body, checking the model.
func (s *Server) readRequest(w http.ResponseWriter, r *http.Request, chat bool) (*api.Request, *api.Error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, api.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &api.Error{Status: http.StatusRequestEntityTooLarge, Type: api.TypeInvalidRequest, Param: "body",
				Message: fmt.Sprintf("body: over %d bytes: expected a smaller request", api.MaxBodyBytes)}
		}
		return nil, api.BadRequest("body: " + err.Error())
	}
	req, e := api.Decode(body, chat)
	if e != nil {
		return nil, e
	}
	if req.Model != "" && req.Model != s.opts.Model {
		return nil, api.ModelNotFound(req.Model, []string{s.opts.Model})
	}
	return req, nil
}

func (s *Server) serveTokenize(w http.ResponseWriter, r *http.Request) {
	var probe map[string]json.RawMessage
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, api.MaxBodyBytes))
	if err != nil || json.Unmarshal(body, &probe) != nil {
		api.WriteVLLMError(w, api.Invalid("body", "unreadable", "a JSON object"))
		return
	}
	_, chat := probe["messages"]
	req, e := api.Decode(body, chat)
	if e == nil && req.Model != "" && req.Model != s.opts.Model {
		e = api.ModelNotFound(req.Model, []string{s.opts.Model})
	}
	if e != nil {
		api.WriteVLLMError(w, e)
		return
	}
	n := req.PromptTokens()
	writeJSON(w, http.StatusOK, map[string]any{"count": n, "max_model_len": s.opts.MaxModelLen, "tokens": tokenIDs(req, n)})
}

// serveDetokenize is vLLM's POST /detokenize: {"tokens": [ids]} to
// {"prompt": text}, the text wordsOf gives; ids from 0 to vocabSize-1.
func (s *Server) serveDetokenize(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Model  *string          `json:"model"`
		Tokens *json.RawMessage `json:"tokens"`
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, api.MaxBodyBytes))
	if err != nil || json.Unmarshal(b, &body) != nil {
		api.WriteVLLMError(w, api.Invalid("body", "unreadable", "a JSON object"))
		return
	}
	if body.Model != nil && *body.Model != "" && *body.Model != s.opts.Model {
		api.WriteVLLMError(w, api.ModelNotFound(*body.Model, []string{s.opts.Model}))
		return
	}
	var ids []int
	if body.Tokens == nil || json.Unmarshal(*body.Tokens, &ids) != nil {
		got := "missing"
		if body.Tokens != nil {
			got = string(*body.Tokens)
		}
		api.WriteVLLMError(w, api.Invalid("tokens", got, "a list of token ids"))
		return
	}
	for i, id := range ids {
		if id < 0 || id >= vocabSize {
			api.WriteVLLMError(w, api.Invalid(fmt.Sprintf("tokens[%d]", i), strconv.Itoa(id), fmt.Sprintf("a token id from 0 to %d", vocabSize-1)))
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"prompt": wordsOf(ids)})
}

// serveGenerate is /v1/completions and /v1/chat/completions.
func (s *Server) serveGenerate(w http.ResponseWriter, r *http.Request, chat bool) {
	f := s.getFaults()
	if f.CrashAfter > 0 {
		s.mu.Lock()
		s.served++
		n := s.served
		s.mu.Unlock()
		if n > f.CrashAfter {
			if s.crash() && f.RestartAfterMs > 0 {
				s.restartLater(time.Duration(f.RestartAfterMs) * time.Millisecond)
			}
			panic(http.ErrAbortHandler)
		}
	}
	if f.Stall {
		s.stall(r)
		return
	}
	if f.Refuse {
		api.WriteVLLMError(w, api.Unavailable("engine refusing requests (fault)", time.Second))
		return
	}
	req, e := s.readRequest(w, r, chat)
	if e != nil {
		api.WriteVLLMError(w, e)
		return
	}
	ask, e := askLogprobs(req)
	if e != nil {
		api.WriteVLLMError(w, e)
		return
	}
	prompt, limit := req.PromptTokens(), req.OutputLimitIn(s.opts.MaxModelLen)
	if prompt >= s.opts.MaxModelLen {
		// vLLM checks the prompt alone first, whatever the output limit
		// (a router's prefill leg asks for one token: the client must
		// hear of its prompt, not of that 1); a prompt that fills the
		// context leaves no room for an answer.
		param := "prompt"
		if req.Chat {
			param = "messages"
		}
		api.WriteVLLMError(w, api.Invalid(param, fmt.Sprintf("%d tokens", prompt),
			fmt.Sprintf("a prompt shorter than max_model_len %d", s.opts.MaxModelLen)))
		return
	}
	if prompt+limit > s.opts.MaxModelLen {
		api.WriteVLLMError(w, api.Invalid("max_tokens", strconv.Itoa(limit),
			fmt.Sprintf("prompt (%d tokens) plus output at most max_model_len %d", prompt, s.opts.MaxModelLen)))
		return
	}
	if req.MinTokens > limit {
		api.WriteVLLMError(w, api.Invalid("min_tokens", strconv.Itoa(req.MinTokens), "at most the output limit "+strconv.Itoa(limit)))
		return
	}
	rid := r.Header.Get("X-Request-Id")
	if rid == "" {
		rid = fmt.Sprintf("%s-%d", s.id, s.nextID.Load()+1)
	}
	w.Header().Set("X-Request-Id", rid)
	ans := makeAnswer(req, limit, s.opts.Seed, s.opts.MeanOutput)
	ans.echo, ans.echoOnly = echoText(req), req.EchoOnly()
	l := newLive(s.nextID.Add(1), prompt, ans.n())
	s.metrics.prompt.Add(float64(prompt))

	ctx, cancel := s.closing(r.Context())
	defer cancel()
	prefillLeg := req.KVTransfer.WantsRemoteDecode() && !req.Stream
	kind := cmdPrefill
	// firstWithKV: the prompt's KV is here (pulled, or this engine's own
	// pinned handoff): its first token comes with it, and it decodes on.
	firstWithKV := func() {
		now := time.Now()
		s.metrics.token(l, 1, now)
		l.tokens, l.last = 1, now
		if l.want == 1 {
			// Its one token came with the KV: never in the batch, it is
			// scheduled, and done, when the KV is here.
			l.done = true
			l.scheduled, l.firstHere = now, now
		} else {
			kind = cmdDecode
		}
	}
	switch {
	case req.KVTransfer == nil && s.handoffs.holdsPrompt(promptKey(req), time.Now()):
		// An ordinary request for a prompt this engine prefilled for a
		// decode elsewhere and still pins: the router placed its decode
		// here (the protocol's "same engine": no kv_transfer_params).
		// vLLM with prefix caching (its default) finds those blocks in
		// its cache; the stub continues from them, as the simulator's
		// local decode does. The pin stays until its lease ends (vLLM
		// holds it until its abort timeout).
		firstWithKV()
	case req.KVTransfer.CanPull():
		kv := req.KVTransfer
		s.pulling.Add(1)
		tokens, delay, err := s.puller.Pull(ctx, *kv.RemoteEngineID, *kv.RemoteRequestID, *kv.RemoteHost, *kv.RemotePort)
		if err != nil {
			s.pulling.Add(-1)
			if ctx.Err() != nil {
				return // the client went away during the pull: not the transfer's failure
			}
			s.metrics.nixlFailed.Inc()
			if s.opts.KVLoadFailurePolicy == PolicyFail {
				s.logf("stub %s: request %s: KV pull from %s failed: %v", s.id, rid, *kv.RemoteEngineID, err)
				api.WriteVLLMError(w, api.ServerError(http.StatusInternalServerError,
					fmt.Sprintf("kv load failed (kv_load_failure_policy=fail): engine %s, request %s: %v", *kv.RemoteEngineID, *kv.RemoteRequestID, err)))
				return
			}
			s.logf("stub %s: request %s: KV pull failed (%v): recomputing the prompt", s.id, rid, err)
			break
		}
		// The context is this engine's own count of the prompt; the
		// transfer's bytes are the tokens pulled at the fleet's KV size.
		xfer := s.scale(modelTime(delay))
		select {
		case <-time.After(xfer):
			s.pulling.Add(-1)
			s.metrics.nixlTime.Observe(xfer.Seconds())
			s.metrics.nixlBytes.Observe(float64(tokens) * s.opts.KV.BytesPerToken)
		case <-ctx.Done():
			s.pulling.Add(-1)
			return
		}
		firstWithKV()
	case req.KVTransfer.WantsRemotePrefill():
		s.logf("stub %s: request %s: invalid KVTransferParams: recomputing the prompt", s.id, rid)
	}
	if kind == cmdPrefill && s.opts.PrefixCache != nil {
		l.hashes = api.BlockHashes(req, prompt, s.opts.PrefixCache.BlockTokens)
	}
	if !l.done {
		if !s.submit(cmd{kind: kind, r: l}) {
			api.WriteVLLMError(w, api.Unavailable("engine shutting down", time.Second))
			return
		}
		// However the handler ends (client gone, broken stream, server
		// closing), the engine lets the request go.
		defer func() {
			if _, done := l.progress(); !done {
				s.submit(cmd{kind: cmdCancel, r: l})
			}
		}()
	}
	o := output{s: s, w: w, req: req, ans: &ans, l: l, rid: rid, chat: chat, breakAfter: f.BreakAfter}
	if ask.on || ask.promptTop >= 0 {
		o.lp = &logprobWriter{ask: ask, seed: s.opts.Seed, hash: promptHash(req)}
	}
	if prefillLeg {
		o.prefillLeg = true
	}
	if !o.run(ctx) {
		s.metrics.finished(l, "abort", time.Now())
		return
	}
	s.metrics.finished(l, ans.finish, time.Now())
}

// output writes one answer as its tokens come.
type output struct {
	s          *Server
	w          http.ResponseWriter
	req        *api.Request
	ans        *answer
	l          *live
	rid        string
	chat       bool
	prefillLeg bool
	breakAfter int
	lp         *logprobWriter // nil: no logprobs asked
}

// run waits for the engine and writes the response; false when the
// client went away or the server closed first.
func (o *output) run(ctx context.Context) bool {
	var sse *api.SSEWriter
	if o.req.Stream {
		api.SetSSEHeaders(o.w.Header())
		o.w.WriteHeader(http.StatusOK)
		sse = api.NewSSEWriter(o.w)
	}
	sent := 0
	for {
		n, done := o.l.progress()
		if sse != nil {
			for sent < n {
				sent++
				if o.breakAfter > 0 && sent > o.breakAfter {
					panic(http.ErrAbortHandler)
				}
				if err := o.chunk(sse, sent, sent == o.l.want); err != nil {
					return false
				}
			}
		} else if o.breakAfter > 0 && n > o.breakAfter && o.l.want > o.breakAfter {
			panic(http.ErrAbortHandler)
		}
		if done {
			break
		}
		select {
		case <-o.l.notify:
		case <-ctx.Done():
			return false
		}
	}
	if sse != nil {
		if o.req.IncludeUsage {
			_ = sse.Send(o.response(nil, o.usage()))
		}
		_ = sse.Done()
		return true
	}
	o.whole()
	return true
}

// usage is the answer's usage; with a prefix cache, its prompt's cached
// tokens too (as vLLM's with --enable-prompt-tokens-details).
func (o *output) usage() *api.Usage {
	u := api.NewUsage(o.l.prompt, o.l.want)
	if o.s.opts.PrefixCache != nil {
		o.l.mu.Lock()
		u.PromptTokensDetails = &api.PromptTokensDetails{CachedTokens: o.l.cached}
		o.l.mu.Unlock()
	}
	return u
}

func (o *output) id() string {
	if o.chat {
		return "chatcmpl-" + o.rid
	}
	return "cmpl-" + o.rid
}

func (o *output) response(choices []api.Choice, usage *api.Usage) api.Response {
	obj := api.ObjectCompletion
	if o.chat {
		obj = api.ObjectChat
		if o.req.Stream {
			obj = api.ObjectChatChunk
		}
	}
	if choices == nil {
		choices = []api.Choice{}
	}
	return api.Response{ID: o.id(), Object: obj, Created: time.Now().Unix(), Model: o.s.opts.Model, Choices: choices, Usage: usage}
}

// chunk streams token k (the first chat chunk is preceded by the role).
func (o *output) chunk(sse *api.SSEWriter, k int, last bool) error {
	finish, stop := "", ""
	if last {
		finish, stop = o.ans.finish, o.ans.stop
	}
	text := o.ans.shown(k - 1)
	// With stream_options.continuous_usage_stats (and include_usage), as
	// vLLM: every chunk carries the usage so far, the completion tokens
	// written with it included.
	var usage func(n int) *api.Usage
	if o.req.IncludeUsage && o.req.ContinuousUsage {
		usage = func(n int) *api.Usage { return api.NewUsage(o.l.prompt, n) }
	} else {
		usage = func(int) *api.Usage { return nil }
	}
	if !o.chat {
		ch := api.TextChoice(text, finish).WithStop(stop)
		if o.lp != nil && o.lp.ask.on {
			var prompt, answer []string
			if k == 1 && o.lp.ask.prompt {
				prompt = promptTokens(o.req)
			}
			if !o.ans.echoOnly {
				answer = []string{o.ans.token(k - 1)}
			}
			ch.Logprobs = o.lp.completions(prompt, answer, k-1)
		}
		return sse.Send(o.response([]api.Choice{ch}, usage(k)))
	}
	if k == 1 {
		if err := sse.Send(o.response([]api.Choice{api.DeltaChoice(answerRole(o.req), "", "")}, usage(0))); err != nil {
			return err
		}
		if o.ans.echo != "" {
			// vLLM sends a chat echo as its own chunk after the role's.
			if err := sse.Send(o.response([]api.Choice{api.DeltaChoice("", o.ans.echo, "")}, usage(0))); err != nil {
				return err
			}
			text = o.ans.token(0)
		}
	}
	ch := api.DeltaChoice("", text, finish).WithStop(stop)
	if o.lp != nil {
		if o.lp.ask.on {
			ch.Logprobs = o.lp.chat([]string{o.ans.token(k - 1)}, k-1)
		}
	}
	return sse.Send(o.response([]api.Choice{ch}, usage(k)))
}

// whole writes a non-streamed answer; a prefill leg's carries the handoff.
func (o *output) whole() {
	text := o.ans.text()
	var ch api.Choice
	if o.chat {
		ch = api.MessageChoice(text, o.ans.finish).WithStop(o.ans.stop)
		ch.Message.Role = answerRole(o.req)
	} else {
		ch = api.TextChoice(text, o.ans.finish).WithStop(o.ans.stop)
	}
	var promptLP json.RawMessage
	if o.lp != nil && o.lp.ask.promptTop >= 0 {
		promptLP = promptLogprobs(o.req, o.s.opts.Seed, o.lp.ask.promptTop)
		if !o.chat {
			ch.PromptLogprobs = promptLP
		}
	}
	if o.lp != nil && o.lp.ask.on {
		var answer []string
		if !o.ans.echoOnly {
			answer = make([]string, o.ans.n())
			for i := range answer {
				answer[i] = o.ans.token(i)
			}
		}
		if o.chat {
			ch.Logprobs = o.lp.chat(answer, 0)
		} else {
			var prompt []string
			if o.lp.ask.prompt {
				prompt = promptTokens(o.req)
			}
			ch.Logprobs = o.lp.completions(prompt, answer, 0)
		}
	}
	resp := o.response([]api.Choice{ch}, o.usage())
	if o.chat {
		resp.PromptLogprobs = promptLP
	}
	if o.prefillLeg && !o.s.getFaults().NoHandoff {
		resp.KVTransferParams = o.s.pinHandoff(o.id(), o.l.prompt, promptKey(o.req))
	}
	b, _ := json.Marshal(resp)
	if resp.KVTransferParams == nil {
		// vLLM sends kv_transfer_params: null on ordinary responses.
		b = append(b[:len(b)-1], `,"kv_transfer_params":null}`...)
	}
	o.w.Header().Set("Content-Type", "application/json")
	o.w.WriteHeader(http.StatusOK)
	_, _ = o.w.Write(append(b, '\n'))
}

// pinHandoff pins the prompt's KV and returns the handoff (protocol §3).
func (s *Server) pinHandoff(requestID string, tokens int, prompt uint64) json.RawMessage {
	// vLLM appends a suffix to the client's id; the decode leg must use
	// the id the handoff names.
	internal := fmt.Sprintf("%s-%08x", requestID, s.nextID.Add(1))
	blocks := s.handoffs.pin(internal, tokens, prompt, time.Now())
	host, port := s.sideChannel()
	p := api.KVTransferParams{
		DoRemotePrefill: api.Ptr(true), DoRemoteDecode: api.Ptr(false),
		RemoteBlockIDs: blocks, RemoteEngineID: api.Ptr(s.id), RemoteRequestID: api.Ptr(internal),
		RemoteHost: api.Ptr(host), RemotePort: api.Ptr(port),
		TPSize: api.Ptr(1), DCPSize: api.Ptr(1), PPSize: api.Ptr(1),
		RemoteNumTokens: api.Ptr(tokens), TransferMode: api.Ptr("pull"),
	}
	b, _ := json.Marshal(&p)
	return b
}

func (s *Server) servePull(w http.ResponseWriter, r *http.Request) {
	s.serveKV(w, r, func(id string) (any, error) {
		tokens, delay, err := s.handoffs.take(id, time.Now())
		return pullResponse{Tokens: tokens, DelayS: delay}, err
	})
}

func (s *Server) serveRenew(w http.ResponseWriter, r *http.Request) {
	s.serveKV(w, r, func(id string) (any, error) {
		return map[string]string{"status": "renewed"}, s.handoffs.renew(id, time.Now())
	})
}

func (s *Server) serveKV(w http.ResponseWriter, r *http.Request, op func(id string) (any, error)) {
	var p pullRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&p); err != nil || p.RequestID == "" {
		api.WriteVLLMError(w, api.Invalid("request_id", "missing", "a JSON body with engine_id and request_id"))
		return
	}
	var out any
	err := ErrWrongEngine
	if p.EngineID == s.id {
		out, err = op(p.RequestID)
	}
	if err != nil {
		e := api.ServerError(pullStatus(err), err.Error())
		e.Type = api.TypeInvalidRequest
		api.WriteVLLMError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// promptKey names a request's prompt (its token ids, or its text, and its
// token count), so that a request can find the handoff its own prefill
// pinned on this engine.
func promptKey(r *api.Request) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(r.PromptTokens()))
	h.Write(b[:])
	if r.PromptIDs != nil {
		for _, id := range r.PromptIDs {
			binary.LittleEndian.PutUint64(b[:], uint64(id))
			h.Write(b[:])
		}
	} else {
		h.Write([]byte(r.Text()))
	}
	return h.Sum64()
}
