package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestDecodeGood(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chat   bool
		body   string
		check  func(*Request) bool
		tokens int
		limit  int
	}{
		{name: "minimal", body: `{"model":"m","prompt":"abcdefgh"}`, tokens: 2, limit: DefaultMaxTokens,
			check: func(r *Request) bool { return r.Model == "m" && !r.Stream && r.N == 1 && r.KVTransfer == nil }},
		{name: "no model", body: `{"prompt":"x"}`, tokens: 1, limit: 16,
			check: func(r *Request) bool { return r.Model == "" }},
		{name: "integral float", body: `{"prompt":"x","max_tokens":5.0,"n":1}`, tokens: 1, limit: 5},
		{name: "nulls are absent", body: `{"prompt":"x","max_tokens":null,"stop":null,"stream":null,"n":null,"kv_transfer_params":null,"stream_options":null}`,
			tokens: 1, limit: 16, check: func(r *Request) bool { return r.MaxTokens == nil && r.Stop == nil && r.KVTransfer == nil }},
		{name: "stream and usage", body: `{"prompt":"x","stream":true,"stream_options":{"include_usage":true}}`, tokens: 1, limit: 16,
			check: func(r *Request) bool { return r.Stream && r.IncludeUsage }},
		// vLLM: include_usage defaults to true inside stream_options.
		{name: "usage by default", body: `{"prompt":"x","stream":true,"stream_options":{}}`, tokens: 1, limit: 16,
			check: func(r *Request) bool { return r.IncludeUsage }},
		{name: "usage null", body: `{"prompt":"x","stream":true,"stream_options":{"include_usage":null}}`, tokens: 1, limit: 16,
			check: func(r *Request) bool { return !r.IncludeUsage }},
		{name: "continuous usage", body: `{"prompt":"x","stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`, tokens: 1, limit: 16,
			check: func(r *Request) bool { return r.IncludeUsage && r.ContinuousUsage }},
		{name: "continuous usage null", body: `{"prompt":"x","stream":true,"stream_options":{"continuous_usage_stats":null}}`, tokens: 1, limit: 16,
			check: func(r *Request) bool { return r.IncludeUsage && !r.ContinuousUsage }},
		{name: "empty options without stream", body: `{"prompt":"x","stream_options":{}}`, tokens: 1, limit: 16,
			check: func(r *Request) bool { return !r.Stream }},
		{name: "completion tokens win", chat: true, body: `{"messages":[{"role":"user","content":"x"}],"max_tokens":9,"max_completion_tokens":3,"min_tokens":2}`, tokens: 1, limit: 3,
			check: func(r *Request) bool { return r.MinTokens == 2 }},
		// vLLM's completions request has no max_completion_tokens: it is
		// ignored there, as vLLM ignores any field it does not know.
		{name: "completion tokens are chat's", body: `{"prompt":"x","max_tokens":9,"max_completion_tokens":3}`, tokens: 1, limit: 9,
			check: func(r *Request) bool { return r.MaxCompletionTokens == nil }},
		{name: "completion tokens alone on completions", body: `{"prompt":"x","max_completion_tokens":0}`, tokens: 1, limit: 16,
			check: func(r *Request) bool { return !r.LimitSet() }},
		{name: "stop string", body: `{"prompt":"x","stop":"end"}`, tokens: 1, limit: 16,
			check: func(r *Request) bool { return len(r.Stop) == 1 && r.Stop[0] == "end" }},
		{name: "stop list drops empties", body: `{"prompt":"x","stop":["a","","b"]}`, tokens: 1, limit: 16,
			check: func(r *Request) bool { return strings.Join(r.Stop, ",") == "a,b" }},
		{name: "token ids", body: `{"prompt":[1,2,3,4,5]}`, tokens: 5, limit: 16,
			check: func(r *Request) bool { return len(r.PromptIDs) == 5 && r.Prompt == "" }},
		{name: "one nested token list", body: `{"prompt":[[7,8,9]]}`, tokens: 3, limit: 16},
		{name: "list of one string", body: `{"prompt":["abcdefghij"]}`, tokens: 3, limit: 16,
			check: func(r *Request) bool { return r.Prompt == "abcdefghij" }},
		{name: "chat string content", chat: true, body: `{"model":"m","messages":[{"role":"system","content":"abcd"},{"role":"user","content":"efgh"}]}`,
			tokens: 2, limit: 16, check: func(r *Request) bool { return r.Text() == "abcd\nefgh" && r.Messages[1].Role == "user" }},
		{name: "chat parts", chat: true, body: `{"messages":[{"role":"user","content":[{"type":"text","text":"ab"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"cd"}]},{"role":"assistant","content":null}]}`,
			tokens: 1, limit: 16, check: func(r *Request) bool { return r.Messages[0].Content == "abcd" }},
		{name: "kv prefill leg", body: `{"prompt":"x","kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}}`,
			tokens: 1, limit: 16, check: func(r *Request) bool { return r.KVTransfer.WantsRemoteDecode() && !r.KVTransfer.CanPull() }},
		{name: "kv decode leg", body: `{"prompt":"x","kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"e0","remote_request_id":"r","remote_host":"h","remote_port":1,"remote_block_ids":[[1,2]]}}`,
			tokens: 1, limit: 16, check: func(r *Request) bool { return r.KVTransfer.CanPull() && len(r.KVTransfer.RemoteBlockIDs[0]) == 2 }},
		{name: "kv flat block ids", body: `{"prompt":"x","kv_transfer_params":{"remote_block_ids":[1,2,3]}}`,
			tokens: 1, limit: 16, check: func(r *Request) bool { return len(r.KVTransfer.RemoteBlockIDs) == 1 && !r.KVTransfer.Malformed }},
		{name: "kv wrong field type is malformed, not an error", body: `{"prompt":"x","kv_transfer_params":{"do_remote_prefill":true,"remote_port":"eighty","remote_engine_id":"e0"}}`,
			tokens: 1, limit: 16, check: func(r *Request) bool {
				k := r.KVTransfer
				return k.Malformed && !k.CanPull() && k.WantsRemotePrefill() && *k.RemoteEngineID == "e0"
			}},
		// vLLM's request models read fields in pydantic's lax mode: a
		// number as a string, a boolean as a word or 0/1.
		{name: "lax numbers and booleans", body: `{"prompt":"x","max_tokens":" 7 ","min_tokens":"2","n":"1","stream":"yes","stream_options":{"include_usage":"on","continuous_usage_stats":0}}`,
			tokens: 1, limit: 7, check: func(r *Request) bool { return r.Stream && r.IncludeUsage && !r.ContinuousUsage && r.MinTokens == 2 }},
		{name: "lax false", body: `{"prompt":"x","stream":"False"}`, tokens: 1, limit: 16,
			check: func(r *Request) bool { return !r.Stream }},
		{name: "lax integer forms", body: `{"prompt":"x","max_tokens":"+1_000.00","min_tokens":true}`, tokens: 1, limit: 1000,
			check: func(r *Request) bool { return r.MinTokens == 1 }},
		// Echo with max_tokens 0: the prompt alone (vLLM runs one token).
		{name: "echo only", body: `{"prompt":"x","echo":true,"max_tokens":0}`, tokens: 1, limit: 1,
			check: func(r *Request) bool { return r.EchoOnly() && r.Echo() && *r.MaxTokens == 0 }},
		{name: "echo as a word", body: `{"prompt":"x","echo":"yes","max_tokens":"0"}`, tokens: 1, limit: 1,
			check: func(r *Request) bool { return r.EchoOnly() }},
		{name: "echo with tokens", body: `{"prompt":"x","echo":true,"max_tokens":3}`, tokens: 1, limit: 3,
			check: func(r *Request) bool { return !r.EchoOnly() && r.Echo() }},
		{name: "unknown fields kept raw", body: `{"prompt":"x","temperature":0.5,"logit_bias":{"1":2}}`, tokens: 1, limit: 16,
			check: func(r *Request) bool { return string(r.Raw["temperature"]) == "0.5" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, e := Decode([]byte(tc.body), tc.chat)
			if e != nil {
				t.Fatalf("Decode: %v", e)
			}
			if got := r.PromptTokens(); got != tc.tokens {
				t.Errorf("PromptTokens = %d, want %d", got, tc.tokens)
			}
			if got := r.OutputLimit(); got != tc.limit {
				t.Errorf("OutputLimit = %d, want %d", got, tc.limit)
			}
			if tc.check != nil && !tc.check(r) {
				t.Errorf("decoded %+v", r)
			}
		})
	}
}

func TestDecodeBad(t *testing.T) {
	for _, tc := range []struct {
		chat        bool
		body, param string
		msg         string
	}{
		{body: ``, param: "body", msg: "body: empty: expected a JSON object"},
		{body: `[1]`, param: "body", msg: "body: [1]: expected a JSON object"},
		{body: `{"prompt":`, msg: "body: not valid JSON"},
		{body: `{"prompt":"x","model":7}`, param: "model", msg: "model: 7: expected a string"},
		{body: `{"prompt":"x","stream":"maybe"}`, param: "stream", msg: `stream: "maybe": expected a boolean`},
		{body: `{"prompt":"x","stream":2}`, param: "stream", msg: `stream: 2: expected a boolean`},
		{body: `{"prompt":"x","stream_options":[]}`, param: "stream_options", msg: "expected an object or null"},
		{body: `{"prompt":"x","stream":true,"stream_options":{"include_usage":2}}`, param: "stream_options.include_usage"},
		{body: `{"prompt":"x","stream":true,"stream_options":{"continuous_usage_stats":"maybe"}}`, param: "stream_options.continuous_usage_stats", msg: "expected a boolean"},
		{body: `{"prompt":"x","stream":false,"stream_options":{"include_usage":true}}`, param: "stream_options", msg: "expected only with stream true"},
		{body: `{"prompt":"x","max_tokens":0}`, param: "max_tokens", msg: "max_tokens: 0: expected an integer from 1 to"},
		{body: `{"prompt":"x","max_tokens":-3}`, param: "max_tokens"},
		{body: `{"prompt":"x","max_tokens":2.5}`, param: "max_tokens"},
		{body: `{"prompt":"x","max_tokens":"ten"}`, param: "max_tokens", msg: `max_tokens: "ten": expected an integer`},
		{body: `{"prompt":"x","max_tokens":"2.5"}`, param: "max_tokens"},
		{body: `{"prompt":"x","max_tokens":"1__000"}`, param: "max_tokens"},
		{body: `{"prompt":"x","max_tokens":"_5"}`, param: "max_tokens"},
		{body: `{"prompt":"x","max_tokens":"5."}`, param: "max_tokens"},
		{body: `{"prompt":"x","stream":" yes "}`, param: "stream"},
		{body: `{"prompt":"x","echo":false,"max_tokens":0}`, param: "max_tokens", msg: "max_tokens: 0: expected an integer from 1 to"},
		{body: `{"prompt":"x","echo":true,"max_tokens":-1}`, param: "max_tokens", msg: "max_tokens: -1: expected an integer from 0 to"},
		{chat: true, body: `{"messages":[{"role":"user","content":"x"}],"echo":true,"max_tokens":0}`, param: "max_tokens"},
		{body: `{"prompt":"x","echo":true,"max_tokens":0,"min_tokens":2}`, param: "min_tokens", msg: "expected at most the output limit 1"},
		{chat: true, body: `{"messages":[{"role":"user","content":"x"}],"max_completion_tokens":0}`, param: "max_completion_tokens"},
		{body: `{"prompt":""}`, param: "prompt", msg: "expected a non-empty prompt"},
		{body: `{"prompt":[""]}`, param: "prompt", msg: "expected a non-empty prompt"},
		{body: `{"prompt":"x","min_tokens":-1}`, param: "min_tokens"},
		{body: `{"prompt":"x","max_tokens":4,"min_tokens":5}`, param: "min_tokens", msg: "min_tokens: 5: expected at most the output limit 4"},
		{body: `{"prompt":"x","n":2}`, param: "n", msg: "n: 2: expected 1"},
		{body: `{"prompt":"x","stop":5}`, param: "stop"},
		{body: `{"prompt":"x","stop":["a",1]}`, param: "stop"},
		{body: `{"model":"m"}`, param: "prompt", msg: "prompt: missing: expected"},
		{body: `{"prompt":null}`, param: "prompt"},
		{body: `{"prompt":[]}`, param: "prompt"},
		{body: `{"prompt":["a","b"]}`, param: "prompt", msg: "prompt: a list of 2 prompts: expected one prompt"},
		{body: `{"prompt":[1,-2]}`, param: "prompt"},
		{body: `{"prompt":{"a":1}}`, param: "prompt"},
		{body: `{"prompt":"x","kv_transfer_params":"yes"}`, param: "kv_transfer_params"},
		{chat: true, body: `{"prompt":"x"}`, param: "messages", msg: "messages: missing"},
		{chat: true, body: `{"messages":[]}`, param: "messages"},
		{chat: true, body: `{"messages":"hi"}`, param: "messages"},
		{chat: true, body: `{"messages":[{"content":"hi"}]}`, param: "messages[0].role", msg: "messages[0].role: missing"},
		{chat: true, body: `{"messages":[{"role":"user","content":5}]}`, param: "messages[0].content"},
		{chat: true, body: `{"messages":[{"role":"user","content":[{"text":"a"}]}]}`, param: "messages[0].content[0].type"},
		{chat: true, body: `{"messages":[{"role":"user","content":[{"type":"text","text":3}]}]}`, param: "messages[0].content[0].text"},
		{chat: true, body: `{"messages":[null]}`, param: "messages[0]"},
	} {
		_, e := Decode([]byte(tc.body), tc.chat)
		if e == nil {
			t.Errorf("%s: no error", tc.body)
			continue
		}
		if e.Status != 400 || e.Type != TypeInvalidRequest || e.Param != tc.param || !strings.Contains(e.Message, tc.msg) {
			t.Errorf("%s: got %d %s param %q %q; want 400 param %q containing %q", tc.body, e.Status, e.Type, e.Param, e.Message, tc.param, tc.msg)
		}
	}
}

func TestWriteError(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteError(rec, RateLimited("queue full", 1500*time.Millisecond))
	if rec.Code != 429 || rec.Header().Get("Retry-After") != "2" || rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("status %d, headers %v", rec.Code, rec.Header())
	}
	want := `{"error":{"message":"queue full","type":"rate_limit_error","param":null,"code":"rate_limit_exceeded"}}` + "\n"
	if rec.Body.String() != want {
		t.Errorf("body %s, want %s", rec.Body, want)
	}
	e := ParseError(429, rec.Body.Bytes())
	if e == nil || e.Message != "queue full" || e.Code != "rate_limit_exceeded" || e.Param != "" {
		t.Errorf("ParseError = %+v", e)
	}
	rec = httptest.NewRecorder()
	WriteError(rec, ModelNotFound("gpt", []string{"stub"}))
	if rec.Code != 404 || rec.Header().Get("Retry-After") != "" || !strings.Contains(rec.Body.String(), `"param":"model"`) {
		t.Errorf("404: %d %s", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	WriteError(rec, Unavailable("down", time.Second))
	if rec.Code != 503 || rec.Header().Get("Retry-After") != "1" {
		t.Errorf("503: %d %v", rec.Code, rec.Header())
	}
	var err error = Invalid("n", "2", "1")
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != 400 {
		t.Errorf("errors.As: %v", err)
	}
	// vLLM's chat default is the rest of the context: min_tokens is not
	// bounded by 16 there, and the limit depends on the engine's context.
	if r, e := Decode([]byte(`{"messages":[{"role":"user","content":"abcdefgh"}],"min_tokens":50}`), true); e != nil {
		t.Errorf("chat without a limit, min_tokens 50: %v", e)
	} else if r.LimitSet() || r.OutputLimitIn(100) != 98 || r.OutputLimitIn(0) != 0 || r.OutputLimitIn(2) != 1 {
		t.Errorf("chat default: set %v, in 100: %d, unknown: %d, in 2: %d", r.LimitSet(), r.OutputLimitIn(100), r.OutputLimitIn(0), r.OutputLimitIn(2))
	}
	if r, e := Decode([]byte(`{"prompt":"abcdefgh"}`), false); e != nil || r.OutputLimitIn(100) != DefaultMaxTokens {
		t.Errorf("completions default: %v %v", r, e)
	}
	if _, e := Decode([]byte(`{"prompt":"x","min_tokens":50}`), false); e == nil || e.Param != "min_tokens" {
		t.Errorf("completions without a limit, min_tokens 50: %v", e)
	}
	if ParseError(500, []byte("boom")) != nil {
		t.Error("ParseError read a non-JSON body")
	}
	// vLLM's shapes: nested with an integer code (0.10.1 and later), and
	// flat (before): the message comes through, the integer code is the
	// status already.
	for _, body := range []string{
		`{"error":{"message":"This model's maximum context length is 100 tokens.","type":"BadRequestError","param":null,"code":400}}`,
		`{"object":"error","message":"This model's maximum context length is 100 tokens.","type":"BadRequestError","param":null,"code":400}`,
	} {
		e := ParseError(400, []byte(body))
		if e == nil || e.Message != "This model's maximum context length is 100 tokens." || e.Type != "BadRequestError" || e.Code != "" || e.Status != 400 {
			t.Errorf("ParseError(%s) = %+v", body, e)
		}
	}
	if e := ParseError(400, []byte(`{"object":"list","data":[]}`)); e != nil {
		t.Errorf("ParseError read a body that is not an error: %+v", e)
	}
	// The stubs answer as vLLM does.
	rec = httptest.NewRecorder()
	WriteVLLMError(rec, ModelNotFound("gpt-4", []string{"stub"}))
	if got := rec.Body.String(); rec.Code != 404 || !strings.Contains(got, `"type":"NotFoundError"`) || !strings.Contains(got, `"code":404`) || !strings.Contains(got, `"param":"model"`) {
		t.Errorf("WriteVLLMError: %d %s", rec.Code, got)
	}
}

// fields decodes a JSON object into its top-level keys for comparison.
func fields(t *testing.T, b []byte) map[string]string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	out := map[string]string{}
	for k, v := range m {
		out[k] = string(v)
	}
	return out
}

func diff(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for k, w := range want {
		if g, ok := got[k]; !ok {
			t.Errorf("%s: %s missing, want %s", what, k, w)
		} else if g != w {
			t.Errorf("%s: %s = %s, want %s", what, k, g, w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected %s = %s", what, k, g)
		}
	}
}

const clientChat = `{"model":"m","messages":[{"role":"user","content":"hi <b>"}],"stream":true,` +
	`"stream_options":{"include_usage":true},"max_tokens":40,"max_completion_tokens":30,"min_tokens":5,` +
	`"min_completion_tokens":5,"temperature":0.7,"stop":["x"],"kv_transfer_params":{"junk":1}}`

// The prefill leg, field by field (protocol §2).
func TestPrefillBody(t *testing.T) {
	r, e := Decode([]byte(clientChat), true)
	if e != nil {
		t.Fatal(e)
	}
	before := len(r.Raw)
	b, err := PrefillBody(r.Raw)
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "chat prefill", fields(t, b), map[string]string{
		"model":                 `"m"`,
		"messages":              `[{"role":"user","content":"hi <b>"}]`,
		"stream":                `false`,
		"max_tokens":            `1`,
		"max_completion_tokens": `1`,
		"temperature":           `0.7`,
		"stop":                  `["x"]`,
		"kv_transfer_params":    `{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`,
	})
	if len(r.Raw) != before || string(r.Raw["stream"]) != "true" {
		t.Error("PrefillBody changed its input")
	}
	// Without max_completion_tokens it is not added.
	r, _ = Decode([]byte(`{"prompt":"p","max_tokens":9}`), false)
	b, _ = PrefillBody(r.Raw)
	diff(t, "completions prefill", fields(t, b), map[string]string{
		"prompt": `"p"`, "stream": `false`, "max_tokens": `1`, "kv_transfer_params": string(PrefillKVParams),
	})
	// The prefill leg decodes as a prefill leg.
	pr, e := Decode(b, false)
	if e != nil || !pr.KVTransfer.WantsRemoteDecode() || pr.OutputLimit() != 1 || pr.Stream {
		t.Errorf("prefill body decodes to %+v %v", pr, e)
	}
}

// The decode leg: the client's body, the handoff verbatim (protocol §4).
func TestDecodeBody(t *testing.T) {
	r, _ := Decode([]byte(clientChat), true)
	handoff := json.RawMessage(`{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[[1,2,3]],"remote_engine_id":"e0","remote_request_id":"cmpl-r1-0","remote_host":"10.0.0.1","remote_port":7480,"tp_size":1,"dcp_size":1,"pp_size":1,"remote_num_tokens":3,"remote_blocks_expiry_time":null,"transfer_mode":"pull"}`)
	b, err := DecodeBody(r.Raw, handoff)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"model":                 `"m"`,
		"messages":              `[{"role":"user","content":"hi <b>"}]`,
		"stream":                `true`,
		"stream_options":        `{"include_usage":true}`,
		"max_tokens":            `40`,
		"max_completion_tokens": `30`,
		"min_tokens":            `5`,
		"min_completion_tokens": `5`,
		"temperature":           `0.7`,
		"stop":                  `["x"]`,
		"kv_transfer_params":    string(handoff),
	}
	diff(t, "decode", fields(t, b), want)
	if !bytes.Contains(b, handoff) || !bytes.Contains(b, []byte("hi <b>")) {
		t.Errorf("handoff or text not verbatim: %s", b)
	}
	dr, e := Decode(b, true)
	if e != nil || !dr.KVTransfer.CanPull() || *dr.KVTransfer.RemoteRequestID != "cmpl-r1-0" {
		t.Errorf("decode body decodes to %+v %v", dr.KVTransfer, e)
	}
	// No handoff: the key goes.
	b, _ = DecodeBody(r.Raw, nil)
	delete(want, "kv_transfer_params")
	diff(t, "decode without handoff", fields(t, b), want)
	b, _ = PlainBody(r.Raw)
	diff(t, "plain", fields(t, b), want)
	if _, err := DecodeBody(r.Raw, json.RawMessage(`{bad`)); err == nil {
		t.Error("DecodeBody took invalid JSON")
	}
}

// A stub prefill response's handoff carries every §3 field, nulls included.
func TestKVMarshalEveryField(t *testing.T) {
	p := KVTransferParams{DoRemotePrefill: Ptr(true), DoRemoteDecode: Ptr(false), RemoteBlockIDs: BlockIDs{{4, 5}},
		RemoteEngineID: Ptr("e1"), RemoteRequestID: Ptr("cmpl-x-0"), RemoteHost: Ptr("127.0.0.1"), RemotePort: Ptr(9),
		TPSize: Ptr(1), DCPSize: Ptr(1), PPSize: Ptr(1), RemoteNumTokens: Ptr(20), TransferMode: Ptr("pull")}
	b, _ := json.Marshal(&p)
	diff(t, "handoff", fields(t, b), map[string]string{
		"do_remote_prefill": "true", "do_remote_decode": "false", "remote_block_ids": "[[4,5]]",
		"remote_engine_id": `"e1"`, "remote_request_id": `"cmpl-x-0"`, "remote_host": `"127.0.0.1"`, "remote_port": "9",
		"tp_size": "1", "dcp_size": "1", "pp_size": "1", "remote_num_tokens": "20",
		"remote_blocks_expiry_time": "null", "transfer_mode": `"pull"`,
	})
	resp := Response{ID: "cmpl-1", Object: ObjectCompletion, Choices: []Choice{TextChoice("a", FinishLength)}, KVTransferParams: b}
	rb, _ := json.Marshal(resp)
	if got := Handoff(rb); !bytes.Equal(got, b) {
		t.Errorf("Handoff = %s, want %s", got, b)
	}
	// Older builds: in the choice. Missing, null or {}: none.
	if got := Handoff([]byte(`{"choices":[{"kv_transfer_params":{"a":1}}]}`)); string(got) != `{"a":1}` {
		t.Errorf("choice handoff = %s", got)
	}
	for _, body := range []string{`{"choices":[]}`, `{"kv_transfer_params":null}`, `{"kv_transfer_params":{}}`, `{"kv_transfer_params":{ }}`, `{"kv_transfer_params":"x"}`, `{"kv_transfer_params":[1]}`, `nope`} {
		if got := Handoff([]byte(body)); got != nil {
			t.Errorf("Handoff(%s) = %s, want nil", body, got)
		}
	}
}

func TestResponseShapes(t *testing.T) {
	for _, tc := range []struct {
		r    Response
		want string
	}{
		{Response{ID: "c", Object: ObjectCompletion, Model: "m", Choices: []Choice{TextChoice("", FinishLength)}, Usage: NewUsage(3, 1)},
			`{"id":"c","object":"text_completion","created":0,"model":"m","choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"length","stop_reason":null}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`},
		{Response{ID: "c", Object: ObjectChat, Model: "m", Choices: []Choice{MessageChoice("hi", FinishStop)}},
			`{"id":"c","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"logprobs":null,"finish_reason":"stop","stop_reason":null}]}`},
		{Response{ID: "c", Object: ObjectChatChunk, Model: "m", Choices: []Choice{DeltaChoice("assistant", "", "")}},
			`{"id":"c","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null,"stop_reason":null}]}`},
		{Response{ID: "c", Object: ObjectChatChunk, Model: "m", Choices: []Choice{DeltaChoice("", " a", "")}},
			`{"id":"c","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,"delta":{"content":" a"},"logprobs":null,"finish_reason":null,"stop_reason":null}]}`},
		// vLLM's stop_reason: the stop string that ended the answer.
		{Response{ID: "c", Object: ObjectCompletion, Model: "m", Choices: []Choice{TextChoice("a", FinishStop).WithStop("END")}},
			`{"id":"c","object":"text_completion","created":0,"model":"m","choices":[{"index":0,"text":"a","logprobs":null,"finish_reason":"stop","stop_reason":"END"}]}`},
		{Response{ID: "c", Object: ObjectChatChunk, Model: "m", Choices: []Choice{}, Usage: NewUsage(1, 2)},
			`{"id":"c","object":"chat.completion.chunk","created":0,"model":"m","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`},
	} {
		b, _ := json.Marshal(tc.r)
		if string(b) != tc.want {
			t.Errorf("got  %s\nwant %s", b, tc.want)
		}
	}
}

type flushRecorder struct {
	bytes.Buffer
	flushes int
}

func (f *flushRecorder) Flush() { f.flushes++ }

func TestSSERoundTrip(t *testing.T) {
	var buf flushRecorder
	w := NewSSEWriter(&buf)
	_ = w.Send(map[string]int{"a": 1})
	_ = w.SendRaw([]byte(`{"b":2}`))
	_ = w.Done()
	if buf.String() != "data: {\"a\":1}\n\ndata: {\"b\":2}\n\ndata: [DONE]\n\n" || buf.flushes != 3 {
		t.Fatalf("wrote %q with %d flushes", buf.String(), buf.flushes)
	}
	// A reader skips comments and other fields, joins data lines, takes CRLF.
	in := ": keepalive\r\n\r\nevent: x\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\n" + buf.String()
	r := NewSSEReader(strings.NewReader(in))
	var got []string
	for {
		p, done, err := r.ReadEvent()
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		if done {
			break
		}
		got = append(got, string(p))
	}
	if strings.Join(got, "|") != "{\"a\":\n1}|{\"a\":1}|{\"b\":2}" {
		t.Errorf("events %q", got)
	}
	if _, _, err := r.ReadEvent(); err != io.EOF {
		t.Errorf("after [DONE]: %v, want io.EOF", err)
	}
	// A stream cut inside a line.
	r = NewSSEReader(strings.NewReader("data: {\"a\":1}\n\ndata: {\"tr"))
	if p, _, err := r.ReadEvent(); err != nil || string(p) != `{"a":1}` {
		t.Fatalf("%s %v", p, err)
	}
	if _, _, err := r.ReadEvent(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut stream: %v", err)
	}
	// A long line crosses the reader's buffer.
	long := strings.Repeat("x", 200<<10)
	r = NewSSEReader(strings.NewReader("data: " + long + "\n\n"))
	if p, _, err := r.ReadEvent(); err != nil || string(p) != long {
		t.Errorf("long event: %d bytes, %v", len(p), err)
	}
}

func TestSSEHeaders(t *testing.T) {
	h := http.Header{}
	SetSSEHeaders(h)
	if h.Get("Content-Type") != "text/event-stream" {
		t.Error(h)
	}
}

// A stream that cannot finish ends as vLLM ends one: an error event in
// OpenAI's shape, param included, then [DONE].
func TestEndWithError(t *testing.T) {
	var b strings.Builder
	if err := NewSSEWriter(&b).EndWithError("the engine went down", TypeServer, 502); err != nil {
		t.Fatal(err)
	}
	want := `data: {"error":{"code":502,"message":"the engine went down","param":null,"type":"server_error"}}` + "\n\ndata: [DONE]\n\n"
	if b.String() != want {
		t.Fatalf("got %q\nwant %q", b.String(), want)
	}
	if c, ok := ReadChunk([]byte(`{"error":{"code":502,"message":"the engine went down","param":null,"type":"server_error"}}`)); !ok || c.Err == nil {
		t.Fatalf("ReadChunk does not see the error: %+v", c)
	}
}

// A prompt of token ids is read in one pass: a long list costs a small
// multiple of its size, not one decode per element (a 2 MB body of a
// million ids cost about 100 times its size before).
func TestTokenListDecodeBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"model":"m","max_tokens":1,"prompt":[`)
	for i := 0; i < 1_000_000; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('7')
	}
	b.WriteString(`]}`)
	body := []byte(b.String())
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	req, e := Decode(body, false)
	runtime.ReadMemStats(&after)
	if e != nil || len(req.PromptIDs) != 1_000_000 {
		t.Fatalf("decode: %v", e)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 50*uint64(len(body)) {
		t.Errorf("decoding a %d-byte list of token ids allocated %d bytes: expected under 50 times its size", len(body), alloc)
	}
}
