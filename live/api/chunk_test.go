package api

import (
	"encoding/json"
	"testing"
)

// The byte scan of a streamed event agrees with decoding it in full, on
// the shapes vLLM and the stubs write, and falls back to decoding for
// anything else.
func TestReadChunk(t *testing.T) {
	enc := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	fin := "length"
	word := " engine"
	empty := ""
	cases := map[string]string{
		"completion token":  enc(Response{ID: "cmpl-1", Object: ObjectCompletion, Choices: []Choice{TextChoice(word, "")}}),
		"completion finish": enc(Response{ID: "cmpl-1", Object: ObjectCompletion, Choices: []Choice{TextChoice(word, fin)}}),
		"empty text":        enc(Response{ID: "cmpl-1", Object: ObjectCompletion, Choices: []Choice{{Text: &empty}}}),
		"chat role only":    enc(Response{ID: "c", Object: ObjectChatChunk, Choices: []Choice{DeltaChoice("assistant", "", "")}}),
		"chat token":        enc(Response{ID: "c", Object: ObjectChatChunk, Choices: []Choice{DeltaChoice("", word, "")}}),
		"chat finish":       enc(Response{ID: "c", Object: ObjectChatChunk, Choices: []Choice{DeltaChoice("", word, "stop")}}),
		"usage":             enc(Response{ID: "c", Object: ObjectChatChunk, Choices: []Choice{}, Usage: NewUsage(12, 345)}),
		"escaped quote":     `{"id":"x","choices":[{"index":0,"text":"say \"text\":\"hi\"","finish_reason":null}]}`,
		"vllm completion":   `{"id":"cmpl-abc","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" the","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}`,
		"vllm chat":         `{"id":"chatcmpl-abc","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" the"},"logprobs":null,"finish_reason":null}]}`,
		"spaced":            `{"id": "x", "choices": [{"index": 0, "text": " spaced", "finish_reason": "stop"}]}`,
		"error event":       `{"error": {"object": "error", "message": "boom", "type": "InternalServerError", "code": 500}}`,
		"reasoning":         `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"reasoning_content":"Let"},"logprobs":null,"finish_reason":null}]}`,
		"reasoning, newer":  `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"reasoning":"Let"},"logprobs":null,"finish_reason":null}]}`,
		"tool call":         `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a"}}]},"logprobs":null,"finish_reason":null}]}`,
		"no tool calls":     `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"","tool_calls":[]},"logprobs":null,"finish_reason":null}]}`,
		"empty reasoning":   `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"reasoning_content":""},"logprobs":null,"finish_reason":null}]}`,
	}
	// Reasoning and tool calls are output: each such event is one token.
	for name, want := range map[string]int{"reasoning": 1, "reasoning, newer": 1, "tool call": 1, "no tool calls": 0, "empty reasoning": 0} {
		if c, _ := ReadChunk([]byte(cases[name])); c.Tokens != want {
			t.Errorf("%s: %d tokens, want %d", name, c.Tokens, want)
		}
	}
	for name, p := range cases {
		fast, ok1 := ReadChunk([]byte(p))
		slow, ok2 := decodeChunk([]byte(p))
		if !ok1 || !ok2 || fast.Tokens != slow.Tokens || fast.Finish != slow.Finish || fast.Usage != slow.Usage || fast.Prompt != slow.Prompt || string(fast.Err) != string(slow.Err) {
			t.Errorf("%s: scan %+v (%v), decode %+v (%v)\n%s", name, fast, ok1, slow, ok2, p)
		}
	}
	// The usage's prompt tokens, as the server counted them; not the
	// details' cached count.
	if c, _ := ReadChunk([]byte(cases["usage"])); c.Prompt != 12 || c.Usage != 345 {
		t.Errorf("usage read as %+v: expected 12 prompt and 345 completion tokens", c)
	}
	if c, _ := ReadChunk([]byte(`{"choices":[],"usage":{"prompt_tokens_details":{"cached_tokens":7},"completion_tokens":2}}`)); c.Prompt != -1 {
		t.Errorf("usage without prompt_tokens read as %+v: expected prompt -1", c)
	}
	if _, ok := ReadChunk([]byte("not json")); ok {
		t.Error("a payload that is not JSON read as a chunk")
	}
	// An event cut short holds the keys the scan looks for, but is no
	// token; a negative usage is none.
	if c, ok := ReadChunk([]byte(`{"choices":[{"index":0,"text":"a`)); ok || c.Tokens != 0 {
		t.Errorf("a cut event read as %+v, %v: expected not a chunk", c, ok)
	}
	if c, ok := ReadChunk([]byte(`{"usage":{"completion_tokens":-3}}`)); !ok || c.Usage != -1 {
		t.Errorf("a negative usage read as %+v, %v: expected usage -1 (none)", c, ok)
	}
}

// An error event's object comes back whole.
func TestReadChunkError(t *testing.T) {
	c, ok := ReadChunk([]byte(`{"error": {"message": "boom", "code": 500}}`))
	if !ok || string(c.Err) != `{"message": "boom", "code": 500}` {
		t.Fatalf("chunk %+v, %v", c, ok)
	}
}
