package stub

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"

	"github.com/narwhal-bench/narwhal-bench/live/api"
)

// MaxLogprobs is the most alternatives per token a request may ask for
// (vLLM's --max-logprobs default).
const MaxLogprobs = 20

// logprobsAsk is what a request asks of logprobs, as vLLM reads it: on
// completions `logprobs: N` (N alternatives per token, the chosen token
// always among them), with echo the prompt's tokens too; on chat
// `logprobs: true` and `top_logprobs: N`.
type logprobsAsk struct {
	on     bool
	top    int
	prompt bool // completions echo: the prompt's tokens come first
	// promptTop is vLLM's prompt_logprobs: the alternatives per prompt
	// token (-1: not asked).
	promptTop int
}

// askLogprobs reads the request's logprobs fields; a bad one is a 400
// naming it.
func askLogprobs(r *api.Request) (logprobsAsk, *api.Error) {
	a := logprobsAsk{promptTop: -1}
	raw := func(k string) (json.RawMessage, bool) {
		v, ok := r.Raw[k]
		return v, ok && string(v) != "null"
	}
	count := func(k string, v json.RawMessage) (int, *api.Error) {
		n, ok := api.LaxInt(v)
		if !ok || n < 0 || n > MaxLogprobs {
			return 0, api.Invalid(k, string(v), fmt.Sprintf("an integer from 0 to %d", MaxLogprobs))
		}
		return n, nil
	}
	if v, ok := raw("prompt_logprobs"); ok {
		// -1 asks for the whole vocabulary: the stub gives its most.
		n, all := MaxLogprobs, string(v) == "-1"
		if !all {
			var e *api.Error
			if n, e = count("prompt_logprobs", v); e != nil {
				return a, api.Invalid("prompt_logprobs", string(v), fmt.Sprintf("an integer from 0 to %d, or -1", MaxLogprobs))
			}
		}
		switch {
		case r.Stream && (all || n > 0):
			// As vLLM: the prompt's logprobs come only in a whole answer.
			return a, api.Invalid("prompt_logprobs", string(v), "0, or stream false (prompt logprobs are not streamed)")
		case !r.Stream:
			a.promptTop = n
		}
	}
	// As vLLM, an echo without prompt_logprobs asks for the prompt's at
	// the answer's count (completions' logprobs, chat's top_logprobs), in
	// a whole answer.
	echoPrompt := func() {
		if a.promptTop < 0 && r.Echo() && !r.Stream && (a.on || r.Chat) {
			a.promptTop = a.top
		}
	}
	if !r.Chat {
		v, ok := raw("logprobs")
		if !ok {
			return a, nil
		}
		n, e := count("logprobs", v)
		if e != nil {
			return a, e
		}
		a.on, a.top = true, n
		a.prompt = r.Echo()
		echoPrompt()
		return a, nil
	}
	if v, ok := raw("logprobs"); ok {
		b, ok := api.LaxBool(v)
		if !ok {
			return a, api.Invalid("logprobs", string(v), "a boolean")
		}
		a.on = b
	}
	if v, ok := raw("top_logprobs"); ok {
		n, e := count("top_logprobs", v)
		if e != nil {
			return a, e
		}
		a.top = n
		if !a.on && a.top > 0 {
			return a, api.Invalid("top_logprobs", string(v), "logprobs true with top_logprobs")
		}
	}
	echoPrompt()
	return a, nil
}

// tokenLogprob is the stub's log probability of the token at index i of
// the answer to the prompt hashed h: a deterministic draw in (-3, 0).
func tokenLogprob(seed, h uint64, i int) float64 {
	f := fnv.New64a()
	var b [24]byte
	for k, v := range [3]uint64{seed, h, uint64(i)} {
		for j := range 8 {
			b[k*8+j] = byte(v >> (8 * j))
		}
	}
	f.Write(b[:])
	u := float64(f.Sum64()>>11) / (1 << 53)
	return -0.01 - 2.9*u*u
}

// alternative k (1-based) of a token: another answer word, less likely.
func alternative(tok string, lp float64, k int) (string, float64) {
	w := 0
	for i, v := range spacedVocab {
		if v == tok {
			w = i
		}
	}
	return spacedVocab[(w+7*k)%len(spacedVocab)], lp - 0.4*float64(k) - 0.3
}

// promptTokens is the prompt as the stub tokenizes it: its token ids
// read as words, else its text cut in PromptTokens slices (tokenIDs).
func promptTokens(r *api.Request) []string {
	if r.PromptIDs != nil {
		out := make([]string, len(r.PromptIDs))
		for i, id := range r.PromptIDs {
			out[i] = wordsOf([]int{id})
		}
		return out
	}
	return textSlices(r.Text(), r.PromptTokens())
}

// completionLogprobs is a completions choice's logprobs object (OpenAI's
// legacy shape, as vLLM writes it); a prompt token has a null logprob and
// null alternatives when it is the first.
type completionLogprobs struct {
	TextOffset    []int                `json:"text_offset"`
	TokenLogprobs []*float64           `json:"token_logprobs"`
	Tokens        []string             `json:"tokens"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
}

// chatLogprob is one token of a chat choice's logprobs content.
type chatLogprob struct {
	Token       string    `json:"token"`
	Logprob     float64   `json:"logprob"`
	Bytes       []int     `json:"bytes"`
	TopLogprobs []chatTop `json:"top_logprobs"`
}

type chatTop struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

func byteList(s string) []int {
	out := make([]int, len(s))
	for i := range len(s) {
		out[i] = int(s[i])
	}
	return out
}

// logprobWriter writes the logprobs of an answer's tokens, chunk by chunk
// or whole, keeping the text offset across chunks.
type logprobWriter struct {
	ask    logprobsAsk
	seed   uint64
	hash   uint64
	offset int
}

// completions is the prompt's tokens (with echo; the first has no
// logprob) and answer tokens from index first, in the completions shape.
func (w *logprobWriter) completions(prompt []string, answer []string, first int) json.RawMessage {
	var lp completionLogprobs
	add := func(tok string, v *float64, top map[string]float64) {
		lp.TextOffset = append(lp.TextOffset, w.offset)
		lp.TokenLogprobs = append(lp.TokenLogprobs, v)
		lp.Tokens = append(lp.Tokens, tok)
		lp.TopLogprobs = append(lp.TopLogprobs, top)
		w.offset += len(tok)
	}
	for i, tok := range prompt {
		if i == 0 {
			add(tok, nil, nil)
			continue
		}
		v := tokenLogprob(w.seed, w.hash^0x70726f6d7074, i)
		add(tok, &v, w.top(tok, v))
	}
	for k, tok := range answer {
		v := tokenLogprob(w.seed, w.hash, first+k)
		add(tok, &v, w.top(tok, v))
	}
	b, _ := json.Marshal(lp)
	return b
}

// top is a completions token's alternatives: the token itself and the
// next top-1 answer words (vLLM returns the chosen token with the top N).
func (w *logprobWriter) top(tok string, v float64) map[string]float64 {
	m := map[string]float64{tok: v}
	for k := 1; k < w.ask.top; k++ {
		alt, lv := alternative(tok, v, k)
		if _, ok := m[alt]; !ok {
			m[alt] = lv
		}
	}
	return m
}

// chat is answer tokens (from index first) in the chat shape.
func (w *logprobWriter) chat(answer []string, first int) json.RawMessage {
	content := make([]chatLogprob, 0, len(answer))
	for k, tok := range answer {
		v := tokenLogprob(w.seed, w.hash, first+k)
		e := chatLogprob{Token: tok, Logprob: v, Bytes: byteList(tok), TopLogprobs: []chatTop{}}
		for j := 0; j < w.ask.top; j++ {
			t, lv := tok, v
			if j > 0 {
				t, lv = alternative(tok, v, j)
			}
			e.TopLogprobs = append(e.TopLogprobs, chatTop{Token: t, Logprob: lv, Bytes: byteList(t)})
		}
		content = append(content, e)
	}
	b, _ := json.Marshal(map[string]any{"content": content})
	return b
}

// promptLogprob is one prompt token's entry in vLLM's prompt_logprobs.
type promptLogprob struct {
	Logprob float64 `json:"logprob"`
	Rank    int     `json:"rank"`
	Decoded string  `json:"decoded_token"`
}

// promptLogprobs is vLLM's prompt_logprobs of the request: per prompt
// token, null for the first, else its id with its logprob (rank 1) and
// top alternatives (other ids, ranks 2 on), keyed by token id.
func promptLogprobs(r *api.Request, seed uint64, top int) json.RawMessage {
	toks := promptTokens(r)
	ids := tokenIDs(r, len(toks))
	h := promptHash(r) ^ 0x70726f6d7074
	out := make([]map[string]promptLogprob, len(toks))
	for i := 1; i < len(toks); i++ {
		v := tokenLogprob(seed, h, i)
		m := map[string]promptLogprob{strconv.Itoa(ids[i]): {Logprob: v, Rank: 1, Decoded: toks[i]}}
		for k := 1; k < top; k++ {
			alt, lv := alternative(toks[i], v, k)
			id := (ids[i] + 7919*k) % vocabSize
			if _, ok := m[strconv.Itoa(id)]; !ok {
				m[strconv.Itoa(id)] = promptLogprob{Logprob: lv, Rank: k + 1, Decoded: alt}
			}
		}
		out[i] = m
	}
	b, _ := json.Marshal(out)
	return b
}
