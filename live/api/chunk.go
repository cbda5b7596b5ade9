package api

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// Chunk is what one event of a streamed answer says: how many choices
// carry output (text, content, reasoning or a tool call), its finish reason (last seen; "" while none), its usage's
// completion tokens (-1 when it has no usage), and its error object when it
// is an error event (nil otherwise).
type Chunk struct {
	Tokens int
	Finish string
	Usage  int
	Err    json.RawMessage
}

// chunkView is the part of a chunk ReadChunk decodes when it must.
type chunkView struct {
	Choices []struct {
		Text  *string `json:"text"`
		Delta *struct {
			Content          *string           `json:"content"`
			ReasoningContent *string           `json:"reasoning_content"`
			Reasoning        *string           `json:"reasoning"`
			ToolCalls        []json.RawMessage `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

var (
	markText    = []byte(`"text":"`)
	markContent = []byte(`"content":"`)
	// A reasoning model's thinking (vLLM's reasoning_content, newer
	// releases' reasoning) and a tool call are output tokens too: the
	// first of them is the first token.
	markReasoning  = []byte(`"reasoning_content":"`)
	markReasoning2 = []byte(`"reasoning":"`)
	markToolCalls  = []byte(`"tool_calls":[`)
	markFinish     = []byte(`"finish_reason":"`)
	markUsage      = []byte(`"completion_tokens":`)
	markError      = []byte(`"error"`)
	markChoices    = []byte(`"choices":[`)
)

// ReadChunk reads one event's payload of an OpenAI stream; false when it
// is not JSON. vLLM writes compact JSON, so for its chunks a byte scan for
// the keys finds what a router needs without decoding the event (a JSON
// string cannot hold these keys unescaped, and n is always 1); anything
// else (another spacing, no choices list, an error) is decoded in full.
func ReadChunk(p []byte) (Chunk, bool) {
	if !bytes.Contains(p, markChoices) || bytes.Contains(p, markError) {
		return decodeChunk(p)
	}
	c := Chunk{Usage: -1}
	if !json.Valid(p) {
		// A cut or garbled event is no token, whatever keys it holds
		// (validating costs a fraction of decoding).
		return c, false
	}
	for _, m := range [][]byte{markText, markContent, markReasoning, markReasoning2} {
		if i := bytes.Index(p, m); i >= 0 && i+len(m) < len(p) && p[i+len(m)] != '"' {
			c.Tokens = 1
		}
	}
	if i := bytes.Index(p, markToolCalls); i >= 0 && i+len(markToolCalls) < len(p) && p[i+len(markToolCalls)] != ']' {
		c.Tokens = 1
	}
	if i := bytes.Index(p, markFinish); i >= 0 {
		rest := p[i+len(markFinish):]
		if j := bytes.IndexByte(rest, '"'); j >= 0 {
			c.Finish = string(rest[:j])
		}
	}
	if i := bytes.Index(p, markUsage); i >= 0 {
		rest := p[i+len(markUsage):]
		j := 0
		for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
			j++
		}
		if n, err := strconv.Atoi(string(rest[:j])); err == nil {
			c.Usage = n
		}
	}
	return c, true
}

// decodeChunk is ReadChunk by decoding the event in full.
func decodeChunk(p []byte) (Chunk, bool) {
	c := Chunk{Usage: -1}
	var v chunkView
	if json.Unmarshal(p, &v) != nil {
		return c, false
	}
	if len(v.Error) > 0 && string(v.Error) != "null" {
		c.Err = v.Error
		return c, true
	}
	for _, ch := range v.Choices {
		nonEmpty := func(p *string) bool { return p != nil && *p != "" }
		if nonEmpty(ch.Text) || (ch.Delta != nil && (nonEmpty(ch.Delta.Content) || nonEmpty(ch.Delta.ReasoningContent) ||
			nonEmpty(ch.Delta.Reasoning) || len(ch.Delta.ToolCalls) > 0)) {
			c.Tokens++
		}
		if ch.FinishReason != nil {
			c.Finish = *ch.FinishReason
		}
	}
	if v.Usage != nil && v.Usage.CompletionTokens >= 0 {
		c.Usage = v.Usage.CompletionTokens // a negative count is none
	}
	return c, true
}
