package live

import (
	"encoding/json"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/live/api"
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
		"completion token":  enc(api.Response{ID: "cmpl-1", Object: api.ObjectCompletion, Choices: []api.Choice{api.TextChoice(word, "")}}),
		"completion finish": enc(api.Response{ID: "cmpl-1", Object: api.ObjectCompletion, Choices: []api.Choice{api.TextChoice(word, fin)}}),
		"empty text":        enc(api.Response{ID: "cmpl-1", Object: api.ObjectCompletion, Choices: []api.Choice{{Text: &empty}}}),
		"chat role only":    enc(api.Response{ID: "c", Object: api.ObjectChatChunk, Choices: []api.Choice{api.DeltaChoice("assistant", "", "")}}),
		"chat token":        enc(api.Response{ID: "c", Object: api.ObjectChatChunk, Choices: []api.Choice{api.DeltaChoice("", word, "")}}),
		"chat finish":       enc(api.Response{ID: "c", Object: api.ObjectChatChunk, Choices: []api.Choice{api.DeltaChoice("", word, "stop")}}),
		"usage":             enc(api.Response{ID: "c", Object: api.ObjectChatChunk, Choices: []api.Choice{}, Usage: api.NewUsage(12, 345)}),
		"escaped quote":     `{"id":"x","choices":[{"index":0,"text":"say \"text\":\"hi\"","finish_reason":null}]}`,
		"vllm completion":   `{"id":"cmpl-abc","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" the","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}`,
		"vllm chat":         `{"id":"chatcmpl-abc","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" the"},"logprobs":null,"finish_reason":null}]}`,
		"spaced":            `{"id": "x", "choices": [{"index": 0, "text": " spaced", "finish_reason": "stop"}]}`,
		"error event":       `{"error": {"object": "error", "message": "boom", "type": "InternalServerError", "code": 500}}`,
	}
	for name, p := range cases {
		fast, ok1 := readChunk([]byte(p))
		slow, ok2 := slowChunk([]byte(p))
		if !ok1 || !ok2 || fast != slow {
			t.Errorf("%s: scan %+v (%v), decode %+v (%v)\n%s", name, fast, ok1, slow, ok2, p)
		}
	}
	if _, ok := readChunk([]byte("not json")); ok {
		t.Error("a payload that is not JSON read as a chunk")
	}
}
