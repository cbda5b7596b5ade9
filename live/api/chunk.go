package api

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// Chunk is what one event of a streamed answer says: how many choices
// carry output (text, content, reasoning or a tool call), its finish reason (last seen; "" while none), its usage's
// completion tokens (-1 when it has no usage), and its error object when it
// is an error event (nil otherwise). Prompt is its usage's prompt tokens
// (-1 when it has no usage, or none there).
type Chunk struct {
	Tokens int
	Finish string
	Usage  int
	Prompt int
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
		CompletionTokens int  `json:"completion_tokens"`
		PromptTokens     *int `json:"prompt_tokens"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// The keys ReadChunk scans for, each at its index in chunkMarks.
const (
	mChoices = iota
	mError
	mText
	mContent
	mReasoning
	mReasoning2
	mToolCalls
	mFinish
	mUsage
	mPrompt
	nMarks
)

var chunkMarks = [nMarks][]byte{
	mChoices: []byte(`"choices":[`),
	mError:   []byte(`"error"`),
	mText:    []byte(`"text":"`),
	mContent: []byte(`"content":"`),
	// A reasoning model's thinking (vLLM's reasoning_content, newer
	// releases' reasoning) and a tool call are output tokens too: the
	// first of them is the first token.
	mReasoning:  []byte(`"reasoning_content":"`),
	mReasoning2: []byte(`"reasoning":"`),
	mToolCalls:  []byte(`"tool_calls":[`),
	mFinish:     []byte(`"finish_reason":"`),
	mUsage:      []byte(`"completion_tokens":`),
	mPrompt:     []byte(`"prompt_tokens":`),
}

// marks records where each of chunkMarks first occurs in a payload (-1:
// nowhere).
type marks [nMarks]int

// at tries the keys that may begin at p[i], a quote.
func (m *marks) at(p []byte, i int) {
	if i+1 >= len(p) {
		return
	}
	try := func(k int) {
		if m[k] < 0 && bytes.HasPrefix(p[i:], chunkMarks[k]) {
			m[k] = i
		}
	}
	switch p[i+1] {
	case 'c':
		try(mChoices)
		try(mContent)
		try(mUsage)
	case 'e':
		try(mError)
	case 't':
		try(mText)
		try(mToolCalls)
	case 'r':
		try(mReasoning)
		try(mReasoning2)
	case 'f':
		try(mFinish)
	case 'p':
		try(mPrompt)
	}
}

// ReadChunk reads one event's payload of an OpenAI stream; false when it
// is not JSON. vLLM writes compact JSON, so for its chunks a byte scan for
// the keys finds what a router needs without decoding the event (a JSON
// string cannot hold these keys unescaped, and n is always 1); anything
// else (another spacing, no choices list, an error) is decoded in full.
//
// One pass validates the event and finds the keys (scanJSON): a cut or
// garbled event is no token, whatever keys it holds. In valid JSON a key
// can begin only at a string's opening quote or at an escaped quote
// inside a string (a closing quote is followed by a separator), so the
// pass finds each key where bytes.Index would.
func ReadChunk(p []byte) (Chunk, bool) {
	c := Chunk{Usage: -1, Prompt: -1}
	at := marks{-1, -1, -1, -1, -1, -1, -1, -1, -1, -1}
	if !scanJSON(p, &at) {
		return c, false // as decodeChunk reads it
	}
	if at[mChoices] < 0 || at[mError] >= 0 {
		return decodeChunk(p)
	}
	for _, k := range [...]int{mText, mContent, mReasoning, mReasoning2} {
		if i := at[k] + len(chunkMarks[k]); at[k] >= 0 && i < len(p) && p[i] != '"' {
			c.Tokens = 1
		}
	}
	if i := at[mToolCalls] + len(chunkMarks[mToolCalls]); at[mToolCalls] >= 0 && i < len(p) && p[i] != ']' {
		c.Tokens = 1
	}
	if at[mFinish] >= 0 {
		rest := p[at[mFinish]+len(chunkMarks[mFinish]):]
		if j := bytes.IndexByte(rest, '"'); j >= 0 {
			c.Finish = string(rest[:j])
		}
	}
	c.Usage, c.Prompt = count(p, at[mUsage], mUsage), count(p, at[mPrompt], mPrompt)
	return c, true
}

// count is the non-negative integer after key k found at i in p (-1 when
// k was not found or no digits follow it).
func count(p []byte, i, k int) int {
	if i < 0 {
		return -1
	}
	rest := p[i+len(chunkMarks[k]):]
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	n, err := strconv.Atoi(string(rest[:j]))
	if err != nil {
		return -1
	}
	return n
}

// decodeChunk is ReadChunk by decoding the event in full.
func decodeChunk(p []byte) (Chunk, bool) {
	c := Chunk{Usage: -1, Prompt: -1}
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
	if v.Usage != nil && v.Usage.PromptTokens != nil && *v.Usage.PromptTokens >= 0 {
		c.Prompt = *v.Usage.PromptTokens
	}
	return c, true
}
