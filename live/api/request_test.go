package api

import "testing"

// PromptLogprobs reads echo and logprobs as vLLM's lax parsing does.
func TestPromptLogprobs(t *testing.T) {
	for body, want := range map[string]bool{
		`{"prompt":"p","prompt_logprobs":0}`:         true,
		`{"prompt":"p","prompt_logprobs":null}`:      false,
		`{"prompt":"p","echo":true,"logprobs":1}`:    true,
		`{"prompt":"p","echo":"true","logprobs":0}`:  true,
		`{"prompt":"p","echo":1,"logprobs":false}`:   true,
		`{"prompt":"p","echo":true}`:                 false,
		`{"prompt":"p","echo":false,"logprobs":1}`:   false,
		`{"prompt":"p","echo":"no","logprobs":1}`:    false,
		`{"prompt":"p","echo":true,"logprobs":null}`: false,
		`{"prompt":"p","logprobs":5}`:                false,
	} {
		req, e := Decode([]byte(body), false)
		if e != nil {
			t.Fatalf("%s: %v", body, e)
		}
		if got := req.PromptLogprobs(); got != want {
			t.Errorf("%s: PromptLogprobs %v, want %v", body, got, want)
		}
	}
	// vLLM's chat request echoing asks for the prompt's top_logprobs (0
	// by default) whatever logprobs says.
	for body, want := range map[string]bool{
		`{"messages":[{"role":"user","content":"m"}],"echo":true}`:                  true,
		`{"messages":[{"role":"user","content":"m"}],"echo":true,"logprobs":false}`: true,
		`{"messages":[{"role":"user","content":"m"}],"logprobs":true}`:              false,
		`{"messages":[{"role":"user","content":"m"}],"echo":false,"logprobs":true}`: false,
		`{"messages":[{"role":"user","content":"m"}],"prompt_logprobs":2}`:          true,
	} {
		chat, e := Decode([]byte(body), true)
		if e != nil {
			t.Fatalf("%s: %v", body, e)
		}
		if got := chat.PromptLogprobs(); got != want {
			t.Errorf("chat %s: PromptLogprobs %v, want %v", body, got, want)
		}
	}
}
