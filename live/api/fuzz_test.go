package api

import (
	"encoding/json"
	"testing"
)

// FuzzDecode: Decode never panics, every error is a 4xx *Error, and a
// decoded request's legs re-encode to bodies that decode again.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","prompt":"hello","max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}`,
		`{"prompt":[1,2,3],"stop":["a"],"min_tokens":1}`,
		`{"prompt":[[1,2]],"n":1,"max_tokens":2.0}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"max_completion_tokens":3}`,
		`{"prompt":"x","kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"e","remote_request_id":"r","remote_host":"h","remote_port":1,"remote_block_ids":[[1]]}}`,
		`{"prompt":"x","kv_transfer_params":{"remote_port":"p"}}`,
		`{"prompt":"x","max_tokens":1e300}`,
		`{"prompt":null}`, `[]`, `{`, ``, `"x"`, `{"messages":[null]}`,
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		r, e := Decode(body, chat)
		if e != nil {
			if r != nil || e.Status < 400 || e.Status > 499 || e.Message == "" || e.Type == "" {
				t.Fatalf("error %+v with request %v", e, r)
			}
			return
		}
		_ = r.PromptTokens()
		if r.OutputLimit() < 1 || r.N != 1 {
			t.Fatalf("limit %d, n %d", r.OutputLimit(), r.N)
		}
		for _, edit := range []func(map[string]json.RawMessage) ([]byte, error){
			PrefillBody, PlainBody,
			func(m map[string]json.RawMessage) ([]byte, error) { return DecodeBody(m, json.RawMessage(`{"a":1}`)) },
		} {
			b, err := edit(r.Raw)
			if err != nil || !json.Valid(b) {
				t.Fatalf("edit: %v: %q", err, b)
			}
			if _, e := Decode(b, chat); e != nil {
				t.Fatalf("edited body %s no longer decodes: %v", b, e)
			}
		}
	})
}

// FuzzReadChunk: an engine's stream event, whatever its bytes, is read
// without a panic; it is read (ok) only when it is JSON, its token
// count is 0 or more and its usage -1 (none) or more. (The byte scan's
// agreement with a full decode on vLLM's compact events is
// TestReadChunk's.)
func FuzzReadChunk(f *testing.F) {
	for _, s := range []string{
		`{"id":"c","object":"text_completion","choices":[{"index":0,"text":" a","finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}`,
		`{"choices":[{"index":0,"delta":{"reasoning_content":"t"}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"1"}]}}]}`,
		`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":7}}`,
		`{"error":{"message":"m","type":"t","code":500}}`,
		`{"choices":[`, `[DONE]`, ``, `{"choices": [ {"text":"a"} ]}`,
		`{"usage":{"completion_tokens":-3}}`, `{"choices":[{"index":0,"text":"a`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		c, ok := ReadChunk(p)
		if ok && !json.Valid(p) {
			t.Fatalf("%q: read as a chunk, but it is not JSON", p)
		}
		if !ok {
			return
		}
		if c.Tokens < 0 || c.Usage < -1 {
			t.Fatalf("%q: chunk %+v", p, c)
		}
	})
}

// FuzzParseError: any error body is read without a panic; what it returns
// keeps the status it was given.
func FuzzParseError(f *testing.F) {
	for _, s := range []string{
		`{"error":{"message":"m","type":"BadRequestError","param":null,"code":400}}`,
		`{"object":"error","message":"m","type":"t","param":"p","code":400}`,
		`{"error":{"message":"m","code":"model_not_found"}}`,
		`{"error":null}`, `{"error":{"message":null}}`, `[]`, `{`, ``,
	} {
		f.Add(400, []byte(s))
	}
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		if e := ParseError(status, body); e != nil && e.Status != status {
			t.Fatalf("%q: status %d, want %d", body, e.Status, status)
		}
	})
}
