package live

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/narwhal-bench/narwhal-bench/live/api"
)

// tokenizeFields are the body fields that change how vLLM's /tokenize
// counts a prompt: the prompt or messages themselves, the model, and the
// chat template's inputs.
var tokenizeFields = []string{"model", "prompt", "messages", "add_special_tokens", "add_generation_prompt",
	"continue_final_message", "chat_template", "chat_template_kwargs", "tools"}

// promptTokens is the prompt's length in tokens. With Config.Tokenize it
// is the count one engine's POST /tokenize gives, as the engine's own
// tokenizer and chat template count it: the engine asked is the last one
// that answered (sticky), else the next one up in fleet order; on any
// failure (an error, a timeout of TokenizeTimeout, no integer count) this
// request takes the estimate and the next one asks the next engine up.
// Without it, and for prompts given as token ids, it is live/api's
// estimate (PromptTokens). The prefill's price grows with the square of
// this number, so an estimate's error is squared.
func (r *Router) promptTokens(ctx context.Context, req *api.Request) (count int, exact bool) {
	est := req.PromptTokens()
	if req.PromptIDs != nil {
		return est, true
	}
	if !r.cfg.Tokenize {
		return est, false
	}
	n := len(r.engines)
	first := int(r.tokenizer.Load())
	var e *engine
	for k := range n {
		if c := r.engines[(first+k)%n]; !c.br.ejected() {
			e = c
			break
		}
	}
	if e == nil {
		r.met.tokenize.WithLabelValues("estimate").Inc()
		return est, false
	}
	count, ok := r.tokenizeOn(ctx, e, req)
	if !ok {
		r.tokenizer.Store(int64((int(e.idx) + 1) % n))
		r.met.tokenize.WithLabelValues("estimate").Inc()
		return est, false
	}
	r.tokenizer.Store(int64(e.idx))
	r.met.tokenize.WithLabelValues("engine").Inc()
	return count, true
}

// contextLen is the largest max_model_len any engine has given the router
// (in /tokenize's answers or /v1/models'), 0 when unknown: a request is
// refused only when no engine could serve it.
func (r *Router) contextLen() int {
	return int(max(r.maxModelLen.Load(), r.modelsLen.Load()))
}

// storeMax raises a to v when v is larger.
func storeMax(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// overflow is the 400 vLLM answers at once for a request whose prompt
// plus output limit exceeds the context, which the router would otherwise
// learn only from the decode engine, after a whole prefill. With an
// estimated prompt only an output limit that alone fills the context is
// refused (the prompt has at least one token).
func (r *Router) overflow(req *api.Request, input int, exact bool) *api.Error {
	m := r.contextLen()
	if m <= 0 || req.Chat && !req.LimitSet() {
		return nil // a chat answer without a limit takes the rest of the context
	}
	want, prompt := req.OutputLimit(), 1
	if exact {
		prompt = input
	}
	if prompt+want <= m {
		return nil
	}
	if prompt >= m {
		field := "prompt"
		if req.Chat {
			field = "messages"
		}
		return api.Invalid(field, fmt.Sprintf("%d tokens", prompt), fmt.Sprintf("fewer than the model's context, %d tokens", m))
	}
	param, value := "max_tokens", strconv.Itoa(want)
	switch {
	case req.MaxCompletionTokens != nil:
		param = "max_completion_tokens" // OutputLimit takes it first
	case !req.LimitSet():
		value += " (unset: vLLM's default)"
	}
	if exact {
		return api.Invalid(param, value, fmt.Sprintf("at most %d: the model's context is %d tokens and the prompt has %d", m-prompt, m, prompt))
	}
	return api.Invalid(param, value, fmt.Sprintf("under %d, the model's context in tokens, prompt included", m))
}

// learnContext reads max_model_len from e's GET /v1/models (vLLM lists it
// with each model), for overflow. It reports whether e answered (200, a
// model list), whether or not the list gives a context.
func (r *Router) learnContext(ctx context.Context, e *engine) bool {
	hq, err := http.NewRequestWithContext(ctx, http.MethodGet, e.base+"/v1/models", nil)
	if err != nil {
		return false
	}
	resp, err := r.client.Do(hq)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var out struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&out) != nil {
		return false
	}
	for _, m := range out.Data {
		if m.MaxModelLen > 0 && (r.cfg.Model == "" || m.ID == r.cfg.Model) {
			storeMax(&r.modelsLen, int64(m.MaxModelLen))
			break
		}
	}
	return true
}

// tokenizeOn asks e's POST /tokenize for the prompt's count.
func (r *Router) tokenizeOn(ctx context.Context, e *engine, req *api.Request) (int, bool) {
	body := map[string]json.RawMessage{}
	for _, k := range tokenizeFields {
		if v, ok := req.Raw[k]; ok {
			body[k] = v
		}
	}
	b, err := json.Marshal(body)
	if err != nil {
		return 0, false
	}
	tctx, cancel := context.WithTimeout(ctx, r.cfg.TokenizeTimeout)
	defer cancel()
	hq, err := http.NewRequestWithContext(tctx, http.MethodPost, e.base+"/tokenize", bytes.NewReader(b))
	if err != nil {
		return 0, false
	}
	hq.Header.Set("Content-Type", "application/json")
	resp, err := r.client.Do(hq)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return 0, false
	}
	var out struct {
		Count       *int `json:"count"`
		MaxModelLen int  `json:"max_model_len"`
	}
	if json.Unmarshal(rb, &out) != nil || out.Count == nil || *out.Count < 1 {
		return 0, false
	}
	if out.MaxModelLen > 0 {
		// vLLM's context length: a chat request with no limit may run to
		// its end (OutputLimitIn).
		storeMax(&r.maxModelLen, int64(out.MaxModelLen))
	}
	return *out.Count, true
}
