package api

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// validCases are JSON texts at the edges of the grammar, each taken or
// refused by json.Valid.
var validCases = []string{
	``, ` `, `{}`, `[]`, ` {} `, "\t[\n]\r", `{`, `}`, `[`, `]`, `[}`, `{]`, `{}}`, `[]]`, `{} {}`, `{},`,
	`""`, `"a`, `"\"`, `"\\"`, `"\/\b\f\n\r\t"`, `"\u00e9\u12Ab"`, `"\u00g0"`, `"\u00e"`, `"\x"`, "\"\x1f\"", "\"\x7f\"",
	"\"\xff\xfe\"", "\"é\"", `"\"text\":\"x"`,
	`0`, `-0`, `01`, `-`, `-a`, `1.`, `1.5`, `.5`, `1e5`, `1E+5`, `1e-05`, `1e`, `1e+`, `-1.5e3`, `1.5.3`, `0x1`, `+1`, `1 2`, ` 7 `,
	`true`, `false`, `null`, `tru`, `truex`, `nul`, `nulll`, `True`, `[true,false,null]`, `[true false]`,
	`{"a":1}`, `{"a" : 1 , "b" : [ 2 , 3 ] }`, `{"a":}`, `{"a"}`, `{"a":1,}`, `[1,]`, `[,1]`, `{,}`, `{1:2}`, `{"a":1 "b":2}`,
	`[[[[]]]]`, `[[[[]]]`, `{"a":{"b":{"c":[1,{"d":null}]}}}`,
	`{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":" a","finish_reason":null}],"usage":null}`,
	`{"choices":[{"index":0,"text":"a`,
}

func TestValidJSON(t *testing.T) {
	cases := append([]string(nil), validCases...)
	// encoding/json's depth bound: 10,000 levels are taken, 10,001 not.
	for _, d := range []int{maxJSONDepth, maxJSONDepth + 1} {
		cases = append(cases, strings.Repeat("[", d)+strings.Repeat("]", d),
			strings.Repeat(`{"a":`, d)+"1"+strings.Repeat("}", d))
	}
	for _, c := range cases {
		if got, want := validJSON([]byte(c)), json.Valid([]byte(c)); got != want {
			t.Errorf("%.60q: validJSON %v, json.Valid %v", c, got, want)
		}
	}
}

// FuzzValidJSON: validJSON takes exactly what json.Valid takes.
func FuzzValidJSON(f *testing.F) {
	for _, c := range validCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		if got, want := validJSON(p), json.Valid(p); got != want {
			t.Fatalf("%q: validJSON %v, json.Valid %v", p, got, want)
		}
	})
}

// readChunkBefore is ReadChunk as it was before one pass both validated
// an event and found its keys (json.Valid, then bytes.Index per key):
// FuzzReadChunkSame holds ReadChunk to it.
func readChunkBefore(p []byte) (Chunk, bool) {
	if !bytes.Contains(p, chunkMarks[mChoices]) || bytes.Contains(p, chunkMarks[mError]) {
		return decodeChunk(p)
	}
	c := Chunk{Usage: -1}
	if !json.Valid(p) {
		return c, false
	}
	for _, k := range []int{mText, mContent, mReasoning, mReasoning2} {
		m := chunkMarks[k]
		if i := bytes.Index(p, m); i >= 0 && i+len(m) < len(p) && p[i+len(m)] != '"' {
			c.Tokens = 1
		}
	}
	if m := chunkMarks[mToolCalls]; bytes.Index(p, m) >= 0 && bytes.Index(p, m)+len(m) < len(p) && p[bytes.Index(p, m)+len(m)] != ']' {
		c.Tokens = 1
	}
	if i := bytes.Index(p, chunkMarks[mFinish]); i >= 0 {
		rest := p[i+len(chunkMarks[mFinish]):]
		if j := bytes.IndexByte(rest, '"'); j >= 0 {
			c.Finish = string(rest[:j])
		}
	}
	if i := bytes.Index(p, chunkMarks[mUsage]); i >= 0 {
		rest := p[i+len(chunkMarks[mUsage]):]
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

// FuzzReadChunkSame: ReadChunk reads every event as it read it before its
// one pass (readChunkBefore), keys inside strings and escaped quotes
// included.
func FuzzReadChunkSame(f *testing.F) {
	for _, s := range []string{
		`{"id":"c","object":"text_completion","choices":[{"index":0,"text":" a","finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}],"usage":{"completion_tokens":7}}`,
		`{"choices":[{"index":0,"delta":{"reasoning_content":"t","reasoning":""}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[]}}]}`, `{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"1"}]}}]}`,
		`{"choices":[],"a\"text":"x"}`, `{"choices":[],"a":"\"text\":\"x"}`, `{"choices":[],"x":"\"error\""}`,
		`{"choices":[],"a\"finish_reason":"q\"","b\"completion_tokens":3}`, `{"a\"choices":[1]}`,
		`{"error":{"message":"m","type":"t","code":500}}`, `{"choices":[{"text":"a"}],"error":null}`,
		`{"choices": [ {"text":"a"} ]}`, `{"choices":[{"index":0,"text":"a`, `[DONE]`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		got, ok := ReadChunk(p)
		want, wantOK := readChunkBefore(p)
		if ok != wantOK || got.Tokens != want.Tokens || got.Finish != want.Finish || got.Usage != want.Usage || string(got.Err) != string(want.Err) {
			t.Fatalf("%q: ReadChunk %+v, %v; before %+v, %v", p, got, ok, want, wantOK)
		}
	})
}

var benchChunk = []byte(`{"id":"cmpl-8f2a9c0e6b1d4e7f9a3b5c7d9e1f2a4b","object":"text_completion","created":1733500000,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"text":" the","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}`)

// BenchmarkReadChunk: one vLLM completion chunk (the router and the load
// generator read one per streamed token); before is the reading it
// replaced.
func BenchmarkReadChunk(b *testing.B) {
	for name, read := range map[string]func([]byte) (Chunk, bool){"now": ReadChunk, "before": readChunkBefore} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				read(benchChunk)
			}
		})
	}
}
