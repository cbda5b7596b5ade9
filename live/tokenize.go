package live

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"

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
func (r *Router) promptTokens(ctx context.Context, req *api.Request) int {
	est := req.PromptTokens()
	if !r.cfg.Tokenize || req.PromptIDs != nil {
		return est
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
		return est
	}
	count, ok := r.tokenizeOn(ctx, e, req)
	if !ok {
		r.tokenizer.Store(int64((int(e.idx) + 1) % n))
		r.met.tokenize.WithLabelValues("estimate").Inc()
		return est
	}
	r.tokenizer.Store(int64(e.idx))
	r.met.tokenize.WithLabelValues("engine").Inc()
	return count
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
		r.maxModelLen.Store(int64(out.MaxModelLen))
	}
	return *out.Count, true
}
