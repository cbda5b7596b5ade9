package api

import (
	"bytes"
	"encoding/json"
)

// Object names of the four response shapes.
const (
	ObjectCompletion = "text_completion" // completions, streamed or not
	ObjectChat       = "chat.completion"
	ObjectChatChunk  = "chat.completion.chunk"
)

// Finish reasons.
const (
	FinishLength = "length"
	FinishStop   = "stop"
)

// Response is a completions or chat completions response, whole or one
// streamed chunk:
//   - completion: Object "text_completion", choices carry Text;
//   - chat completion: Object "chat.completion", choices carry Message;
//   - chat chunk: Object "chat.completion.chunk", choices carry Delta;
//   - completions chunk: Object "text_completion", choices carry Text;
//   - the final usage chunk of a stream with include_usage: no choices
//     (an empty list) and Usage set.
//
// KVTransferParams is the top-level handoff of a prefill response (raw,
// to forward verbatim); it is null on ordinary responses, as in vLLM.
type Response struct {
	ID               string          `json:"id"`
	Object           string          `json:"object"`
	Created          int64           `json:"created"`
	Model            string          `json:"model"`
	Choices          []Choice        `json:"choices"`
	Usage            *Usage          `json:"usage,omitempty"`
	KVTransferParams json.RawMessage `json:"kv_transfer_params,omitempty"`
	// PromptLogprobs is vLLM's prompt_logprobs of a chat answer (top
	// level there; a completions choice carries its own).
	PromptLogprobs json.RawMessage `json:"prompt_logprobs,omitempty"`
}

// Choice is one choice of a response or chunk. Text is set for
// completions, Message for chat answers, Delta for chat chunks.
type Choice struct {
	Index   int          `json:"index"`
	Text    *string      `json:"text,omitempty"`
	Message *ChatMessage `json:"message,omitempty"`
	Delta   *ChatDelta   `json:"delta,omitempty"`
	// Logprobs is the choice's logprobs object as the server wrote it
	// (completions' or chat's shape); null when none was asked.
	Logprobs json.RawMessage `json:"logprobs"`
	// PromptLogprobs is vLLM's prompt_logprobs of a completions choice:
	// per prompt token (the first null) its id's logprob, rank and text,
	// and the alternatives asked for.
	PromptLogprobs json.RawMessage `json:"prompt_logprobs,omitempty"`
	FinishReason   *string         `json:"finish_reason"` // null until the last chunk
	// StopReason is vLLM's: the stop string that ended the answer, null
	// otherwise (an end of sequence, the length limit, every chunk but
	// the last).
	StopReason *string `json:"stop_reason"`
	// KVTransferParams is where older vLLM builds put the handoff; new
	// ones put it top level. Routers read both (Handoff).
	KVTransferParams json.RawMessage `json:"kv_transfer_params,omitempty"`
}

// ChatMessage is a whole chat answer.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatDelta is one chunk of a streamed chat answer.
type ChatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// Usage counts a request's tokens.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
	// PromptTokensDetails is vLLM's with --enable-prompt-tokens-details
	// (and OpenAI's): the prompt tokens served from the prefix cache.
	PromptTokensDetails *PromptTokensDetails `json:"prompt_tokens_details,omitempty"`
}

// PromptTokensDetails breaks down a usage's prompt tokens.
type PromptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// NewUsage fills TotalTokens.
func NewUsage(prompt, completion int) *Usage {
	return &Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
}

// WithStop sets the choice's stop_reason to the stop string that ended
// the answer ("" leaves it null).
func (c Choice) WithStop(stop string) Choice {
	if stop != "" {
		c.StopReason = &stop
	}
	return c
}

// Ptr returns a pointer to v (for the optional fields above).
func Ptr[T any](v T) *T { return &v }

// TextChoice is a completions choice (finish "" = null).
func TextChoice(text, finish string) Choice {
	return Choice{Text: &text, FinishReason: finishPtr(finish)}
}

// MessageChoice is a whole chat answer's choice.
func MessageChoice(content, finish string) Choice {
	return Choice{Message: &ChatMessage{Role: "assistant", Content: content}, FinishReason: finishPtr(finish)}
}

// DeltaChoice is a chat chunk's choice; role "" leaves it out.
func DeltaChoice(role, content, finish string) Choice {
	d := &ChatDelta{Role: role}
	if role != "" || content != "" {
		d.Content = &content
	}
	return Choice{Delta: d, FinishReason: finishPtr(finish)}
}

func finishPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Handoff returns a prefill response's kv_transfer_params, raw: the
// top-level field, else the first choice's (older builds); nil when
// neither is there or both are null or empty objects. The top-level field
// is read whatever shape the choices have.
func Handoff(body []byte) json.RawMessage {
	var r struct {
		KV      json.RawMessage `json:"kv_transfer_params"`
		Choices json.RawMessage `json:"choices"`
	}
	if json.Unmarshal(body, &r) != nil {
		return nil
	}
	if usable(r.KV) {
		return r.KV
	}
	var choices []struct {
		KV json.RawMessage `json:"kv_transfer_params"`
	}
	if json.Unmarshal(r.Choices, &choices) != nil {
		return nil
	}
	if len(choices) > 0 && usable(choices[0].KV) {
		return choices[0].KV
	}
	return nil
}

// usable reports whether v (already valid JSON: it came out of a decoded
// body) is an object with at least one key, without decoding it again: an
// object whose first non-space byte after '{' is not '}' has a key.
func usable(v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	if len(v) < 2 || v[0] != '{' {
		return false
	}
	return bytes.TrimSpace(v[1:])[0] != '}'
}
