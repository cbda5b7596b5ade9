package api

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
)

const (
	// MaxBodyBytes is the largest request body a server should read
	// (wrap the body in http.MaxBytesReader; a larger one is a 413).
	MaxBodyBytes = 8 << 20
	// CharsPerToken is the estimate of prompt tokens from text when no
	// token ids are given: bytes of text per token.
	CharsPerToken = 4.0
	// DefaultMaxTokens is the output limit when a completions request sets
	// neither max_tokens nor max_completion_tokens (vLLM's default there;
	// a chat request's is the rest of the context: OutputLimitIn).
	DefaultMaxTokens = 16
	// maxInt bounds integer fields so they stay well inside an int32.
	maxInt = 1 << 30
)

// Request is the part of an OpenAI completions or chat completions body a
// router or an engine acts on. Raw holds the whole body, so a router can
// forward it with edits (PrefillBody, DecodeBody, PlainBody) without
// losing fields it does not model.
type Request struct {
	Chat   bool   // /v1/chat/completions (messages) rather than /v1/completions (prompt)
	Model  string // "" when the client sent none
	Stream bool
	// IncludeUsage is stream_options.include_usage.
	IncludeUsage bool
	// ContinuousUsage is stream_options.continuous_usage_stats (vLLM):
	// with IncludeUsage, every streamed chunk carries the usage so far.
	ContinuousUsage     bool
	MaxTokens           *int // max_tokens (nil: absent or null)
	MaxCompletionTokens *int // max_completion_tokens (nil: absent or null)
	MinTokens           int  // min_tokens (0 when absent)
	IgnoreEOS           bool // ignore_eos (vLLM)
	N                   int  // always 1 after Decode
	Stop                []string
	// Prompt is the completions prompt text; PromptIDs the prompt when it
	// was sent as token ids (then Prompt is "").
	Prompt    string
	PromptIDs []int
	// Messages is the chat conversation.
	Messages []Message
	// KVTransfer is kv_transfer_params (nil when absent or null).
	KVTransfer *KVTransferParams
	// Raw is the whole body, one entry per top-level key.
	Raw map[string]json.RawMessage
}

// Message is one chat message: its role and its text (the text parts of a
// content list, concatenated).
type Message struct {
	Role    string
	Content string
}

// Decode reads a completions (chat=false) or chat completions body. It
// reads the fields it models as vLLM's request models do (pydantic's lax
// mode: an integer may come as a string, "5", and a boolean as a word,
// "yes", or 0/1), refuses what the servers here cannot serve (n != 1,
// more than one prompt), and leaves every other field alone in Raw.
// Every error is a 400 naming the field.
func Decode(body []byte, chat bool) (*Request, *Error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil, Invalid("body", "empty", "a JSON object")
	}
	if body[0] != '{' {
		return nil, Invalid("body", string(body), "a JSON object")
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, BadRequest("body: not valid JSON: " + shorten(err.Error()))
	}
	r := &Request{Chat: chat, N: 1, Raw: raw}
	d := decoder{raw: raw}
	r.Model = d.str("model")
	r.Stream = d.boolean("stream")
	if v, ok := d.get("stream_options"); ok {
		// As vLLM: an object with no include_usage asks for usage
		// (include_usage defaults to true there), an explicit null does
		// not, and a non-empty object without stream is refused.
		var so map[string]json.RawMessage
		if json.Unmarshal(v, &so) != nil {
			d.fail(Invalid("stream_options", string(v), "an object or null"))
		} else if iu, ok := so["include_usage"]; !ok {
			r.IncludeUsage = true
		} else if !isNull(iu) {
			if r.IncludeUsage, ok = LaxBool(iu); !ok {
				d.fail(Invalid("stream_options.include_usage", string(iu), "a boolean"))
			}
		}
		if cu, ok := so["continuous_usage_stats"]; ok && !isNull(cu) {
			if r.ContinuousUsage, ok = LaxBool(cu); !ok {
				d.fail(Invalid("stream_options.continuous_usage_stats", string(cu), "a boolean"))
			}
		}
		if len(so) > 0 && !r.Stream {
			d.fail(Invalid("stream_options", string(v), "only with stream true"))
		}
	}
	// max_tokens 0 with echo on completions asks for the prompt alone
	// (vLLM's echo without generation, as OpenAI's); otherwise at least 1.
	lo := 1
	if !chat && truthy(raw["echo"]) {
		lo = 0
	}
	r.MaxTokens = d.integer("max_tokens", lo)
	if chat {
		// vLLM's completions request has no such field (and ignores it).
		r.MaxCompletionTokens = d.integer("max_completion_tokens", 1)
	}
	if p := d.integer("min_tokens", 0); p != nil {
		r.MinTokens = *p
	}
	r.IgnoreEOS = d.boolean("ignore_eos")
	if p := d.integer("n", 0); p != nil && *p != 1 {
		d.fail(Invalid("n", strconv.Itoa(*p), "1 (one choice per request)"))
	}
	r.Stop = d.stop()
	if chat {
		r.Messages = d.messages()
	} else {
		r.Prompt, r.PromptIDs = d.prompt()
	}
	if v, ok := d.get("kv_transfer_params"); ok {
		r.KVTransfer = decodeKV(v, &d)
	}
	if d.err != nil {
		return nil, d.err
	}
	// A chat request that sets no limit may run to the end of the
	// context, which the engine knows: its min_tokens is the engine's to
	// check.
	if lim := r.OutputLimit(); (!r.Chat || r.LimitSet()) && r.MinTokens > lim {
		return nil, Invalid("min_tokens", strconv.Itoa(r.MinTokens), "at most the output limit "+strconv.Itoa(lim))
	}
	return r, nil
}

// PromptTokens estimates the prompt's length in tokens, deterministically:
// the number of token ids when the prompt is ids, else
// max(1, round(len(text)/CharsPerToken)) where text is the prompt or the
// messages' contents concatenated (bytes, not characters).
func (r *Request) PromptTokens() int {
	if r.PromptIDs != nil {
		return max(1, len(r.PromptIDs))
	}
	n := len(r.Prompt)
	for _, m := range r.Messages {
		n += len(m.Content)
	}
	return max(1, int(math.Round(float64(n)/CharsPerToken)))
}

// Text is the prompt text: the prompt, or the messages' contents joined
// by newlines.
func (r *Request) Text() string {
	if !r.Chat {
		return r.Prompt
	}
	parts := make([]string, len(r.Messages))
	for i, m := range r.Messages {
		parts[i] = m.Content
	}
	return strings.Join(parts, "\n")
}

// PromptLogprobs says whether the request asks for its prompt's
// logprobs: vLLM's prompt_logprobs, a completions echo with logprobs, or
// any chat echo (vLLM's chat request asks for top_logprobs, 0 by default,
// of the prompt when it echoes).
// Only the engine that computes the prompt has them: a decode engine fed
// the prompt's KV by another computes none (vLLM's decode side answers
// such a request with an error or with empty values), so such a request
// must run whole on one engine. The fields are read as vLLM's lax parsing
// reads them: echo true, 1 or a string such as "true"; logprobs any value
// but null (false is 0, the chosen tokens' logprobs).
func (r *Request) PromptLogprobs() bool {
	set := func(k string) bool {
		v, ok := r.Raw[k]
		return ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null"))
	}
	if set("prompt_logprobs") {
		return true
	}
	if r.Chat {
		return truthy(r.Raw["echo"])
	}
	return truthy(r.Raw["echo"]) && set("logprobs")
}

// EchoOnly says whether a completions request asks for its prompt alone:
// echo with max_tokens 0. vLLM (as OpenAI) answers it with the prompt's
// text and no generated text, after running one token; its output limit
// is that one token.
func (r *Request) EchoOnly() bool {
	return !r.Chat && r.MaxTokens != nil && *r.MaxTokens == 0 && truthy(r.Raw["echo"])
}

// Echo says whether the request sets echo (read as LaxBool reads it).
func (r *Request) Echo() bool { return truthy(r.Raw["echo"]) }

// truthy reads a JSON value as a lax boolean (LaxBool), false when it is
// none.
func truthy(v json.RawMessage) bool {
	b, ok := LaxBool(v)
	return ok && b
}

// LaxBool reads a JSON value as pydantic's lax mode reads a boolean, as
// vLLM's request models do: true or false, the numbers 0 and 1, or one of
// the strings "true", "false", "1", "0", "yes", "no", "on", "off", "t",
// "f", "y", "n" (any case, no spaces around). ok is false for anything
// else.
func LaxBool(v json.RawMessage) (b, ok bool) {
	var x any
	if json.Unmarshal(v, &x) != nil {
		return false, false
	}
	switch t := x.(type) {
	case bool:
		return t, true
	case float64:
		return t == 1, t == 0 || t == 1
	case string:
		switch strings.ToLower(t) {
		case "true", "1", "yes", "on", "t", "y":
			return true, true
		case "false", "0", "no", "off", "f", "n":
			return false, true
		}
	}
	return false, false
}

// LimitSet reports whether the request sets its output limit
// (max_tokens or max_completion_tokens).
func (r *Request) LimitSet() bool { return r.MaxTokens != nil || r.MaxCompletionTokens != nil }

// OutputLimitIn is the most tokens the answer may have on an engine whose
// context holds maxModelLen tokens, as vLLM decides it: the limit the
// request sets, else for completions DefaultMaxTokens, else (chat) the
// rest of the context, maxModelLen minus the prompt (at least 1); 0 when
// that is unknown (maxModelLen <= 0).
func (r *Request) OutputLimitIn(maxModelLen int) int {
	if !r.Chat || r.LimitSet() {
		return r.OutputLimit()
	}
	if maxModelLen <= 0 {
		return 0
	}
	return max(1, maxModelLen-r.PromptTokens())
}

// OutputLimit is the most tokens the answer may have by the request alone:
// max_completion_tokens, else max_tokens, else DefaultMaxTokens (vLLM's
// completions default; for chat see OutputLimitIn).
func (r *Request) OutputLimit() int {
	switch {
	case r.EchoOnly():
		return 1
	case r.MaxCompletionTokens != nil:
		return *r.MaxCompletionTokens
	case r.MaxTokens != nil:
		return *r.MaxTokens
	}
	return DefaultMaxTokens
}

// decoder reads typed fields from the raw body, keeping the first error.
type decoder struct {
	raw map[string]json.RawMessage
	err *Error
}

func (d *decoder) fail(e *Error) {
	if d.err == nil {
		d.err = e
	}
}

// get returns a field that is present and not null.
func (d *decoder) get(name string) (json.RawMessage, bool) {
	v, ok := d.raw[name]
	if !ok || isNull(v) {
		return nil, false
	}
	return v, true
}

func isNull(v json.RawMessage) bool { return string(bytes.TrimSpace(v)) == "null" }

func (d *decoder) str(name string) string {
	v, ok := d.get(name)
	if !ok {
		return ""
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		d.fail(Invalid(name, string(v), "a string"))
	}
	return s
}

func (d *decoder) boolean(name string) bool {
	v, ok := d.get(name)
	if !ok {
		return false
	}
	b, ok := LaxBool(v)
	if !ok {
		d.fail(Invalid(name, string(v), "a boolean"))
	}
	return b
}

// integer reads an integral JSON number >= lo (5.0 counts as 5), a
// string holding one ("5", " +5 ", "1_000", "5.0": strInt) or a boolean
// (1 or 0), as pydantic's lax mode reads an integer for vLLM.
func (d *decoder) integer(name string, lo int) *int {
	v, ok := d.get(name)
	if !ok {
		return nil
	}
	n, ok := LaxInt(v)
	if !ok || n < lo || n > maxInt {
		d.fail(Invalid(name, string(v), "an integer from "+strconv.Itoa(lo)+" to "+strconv.Itoa(maxInt)))
		return nil
	}
	return &n
}

// LaxInt reads a JSON value as pydantic's lax mode reads an integer, as
// every integer field here is read: an integral number, a string strInt
// takes, or a boolean (1 or 0).
func LaxInt(v json.RawMessage) (int, bool) {
	var s string
	if json.Unmarshal(v, &s) == nil {
		return strInt(s)
	}
	var b bool
	if json.Unmarshal(v, &b) == nil {
		// pydantic's lax mode reads a boolean as an integer too.
		if b {
			return 1, true
		}
		return 0, true
	}
	var f float64
	if json.Unmarshal(v, &f) != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, false
	}
	return int(f), true
}

// strInt reads a string as pydantic's lax mode reads it into an integer:
// surrounding spaces, a leading +, single underscores between digits and a
// fraction of zeros (".0") are allowed; anything else is not an integer.
func strInt(s string) (int, bool) {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '.'); i >= 0 {
		if frac := s[i+1:]; frac == "" || strings.Trim(frac, "0") != "" {
			return 0, false
		}
		s = s[:i]
	}
	digits := strings.TrimPrefix(strings.TrimPrefix(s, "+"), "-")
	if digits == "" || digits[0] == '_' || digits[len(digits)-1] == '_' || strings.Contains(digits, "__") {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimPrefix(strings.ReplaceAll(s, "_", ""), "+"), 10, 64)
	if err != nil || n > 1<<53 || n < -(1<<53) {
		return 0, false
	}
	return int(n), true
}

func (d *decoder) stop() []string {
	v, ok := d.get("stop")
	if !ok {
		return nil
	}
	var one string
	if json.Unmarshal(v, &one) == nil {
		if one == "" {
			return nil
		}
		return []string{one}
	}
	var list []string
	if json.Unmarshal(v, &list) != nil {
		d.fail(Invalid("stop", string(v), "a string, a list of strings, or null"))
		return nil
	}
	out := list[:0]
	for _, s := range list {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// prompt reads a completions prompt: a string, a list of one string, a
// list of token ids, or a list of one list of token ids.
func (d *decoder) prompt() (string, []int) {
	v, ok := d.get("prompt")
	if !ok {
		d.fail(Invalid("prompt", "missing", "a string or a list of token ids"))
		return "", nil
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		if s == "" {
			// vLLM: "Either prompt or prompt_embeds must be provided and
			// non-empty."
			d.fail(Invalid("prompt", `""`, "a non-empty prompt"))
		}
		return s, nil
	}
	// Token ids first, in one pass: a long list read as raw elements and
	// then element by element costs a hundred times its size.
	if ids, ok := tokenIDs(v); ok && len(ids) > 0 {
		return "", ids
	}
	var list []json.RawMessage
	if json.Unmarshal(v, &list) != nil {
		d.fail(Invalid("prompt", string(v), "a string, a list of strings or a list of token ids"))
		return "", nil
	}
	if len(list) == 0 {
		d.fail(Invalid("prompt", string(v), "a non-empty prompt"))
		return "", nil
	}
	if len(list) != 1 {
		d.fail(Invalid("prompt", "a list of "+strconv.Itoa(len(list))+" prompts", "one prompt (batched prompts are not served)"))
		return "", nil
	}
	if json.Unmarshal(list[0], &s) == nil {
		if s == "" {
			d.fail(Invalid("prompt", `[""]`, "a non-empty prompt"))
		}
		return s, nil
	}
	if ids, ok := tokenIDs(list[0]); ok && len(ids) > 0 {
		return "", ids
	}
	d.fail(Invalid("prompt[0]", string(list[0]), "a string or a non-empty list of token ids"))
	return "", nil
}

// tokenIDs reads a list of non-negative integers.
func tokenIDs(v json.RawMessage) ([]int, bool) {
	var nums []float64
	if json.Unmarshal(v, &nums) != nil {
		return nil, false
	}
	ids := make([]int, len(nums))
	for i, f := range nums {
		if f != math.Trunc(f) || f < 0 || f > maxInt {
			return nil, false
		}
		ids[i] = int(f)
	}
	return ids, true
}

// messages reads a chat conversation: a non-empty list of objects with a
// string role and a content that is a string, null, or a list of parts
// (text parts count; other part types are kept in Raw and add no text).
func (d *decoder) messages() []Message {
	v, ok := d.get("messages")
	if !ok {
		d.fail(Invalid("messages", "missing", "a non-empty list of messages"))
		return nil
	}
	var list []map[string]json.RawMessage
	if json.Unmarshal(v, &list) != nil {
		d.fail(Invalid("messages", string(v), "a list of message objects"))
		return nil
	}
	if len(list) == 0 {
		d.fail(Invalid("messages", "[]", "a non-empty list of messages"))
		return nil
	}
	out := make([]Message, len(list))
	for i, m := range list {
		field := "messages[" + strconv.Itoa(i) + "]"
		if m == nil {
			d.fail(Invalid(field, "null", "a message object"))
			return nil
		}
		role, ok := m["role"]
		if !ok || json.Unmarshal(role, &out[i].Role) != nil || out[i].Role == "" {
			d.fail(Invalid(field+".role", rawOr(role, "missing"), "a non-empty string"))
			return nil
		}
		c, ok := m["content"]
		if !ok || isNull(c) {
			continue
		}
		if json.Unmarshal(c, &out[i].Content) == nil {
			continue
		}
		var parts []map[string]json.RawMessage
		if json.Unmarshal(c, &parts) != nil {
			d.fail(Invalid(field+".content", string(c), "a string, a list of content parts, or null"))
			return nil
		}
		var b strings.Builder
		for j, p := range parts {
			pf := field + ".content[" + strconv.Itoa(j) + "]"
			var typ string
			if p == nil || json.Unmarshal(p["type"], &typ) != nil {
				d.fail(Invalid(pf+".type", rawOr(p["type"], "missing"), "a string such as \"text\""))
				return nil
			}
			if typ != "text" {
				continue
			}
			var text string
			if json.Unmarshal(p["text"], &text) != nil {
				d.fail(Invalid(pf+".text", rawOr(p["text"], "missing"), "a string"))
				return nil
			}
			b.WriteString(text)
		}
		out[i].Content = b.String()
	}
	return out
}

func rawOr(v json.RawMessage, missing string) string {
	if v == nil {
		return missing
	}
	return string(v)
}

// BlockHashes is the chain of hashes of r's full blocks of block tokens
// (n prompt tokens): over its token ids when it sent ids, else over its
// text, api.CharsPerToken bytes a token, as the stubs count tokens. Each
// hash covers its block and every block before it, as vLLM's block hashes
// chain on their parent's: equal hashes at k mean equal first k+1 blocks.
// The stubs' prefix caches and the router's prefix index use it.
func BlockHashes(r *Request, n, block int) []uint64 {
	full := n / block
	if full == 0 {
		return nil
	}
	out := make([]uint64, 0, full)
	var prev uint64
	if r.PromptIDs != nil {
		for b := 0; b < full && (b+1)*block <= len(r.PromptIDs); b++ {
			h := fnvWord(fnvOffset, prev)
			for _, id := range r.PromptIDs[b*block : (b+1)*block] {
				h = fnvWord(h, uint64(id))
			}
			prev = h
			out = append(out, h)
		}
		return out
	}
	text := r.Text()
	size := block * int(CharsPerToken)
	for b := 0; b < full && (b+1)*size <= len(text); b++ {
		h := fnvWord(fnvOffset, prev)
		for i := b * size; i < (b+1)*size; i++ {
			h = (h ^ uint64(text[i])) * fnvPrime
		}
		prev = h
		out = append(out, h)
	}
	return out
}

// FNV-1a, 64 bits (hash/fnv's, inline: no allocation per block).
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// fnvWord hashes v's eight bytes, little-endian, into h.
func fnvWord(h, v uint64) uint64 {
	for range 8 {
		h = (h ^ (v & 0xff)) * fnvPrime
		v >>= 8
	}
	return h
}
