package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// sseEvent is one ReadEvent result, kept for comparison.
type sseEvent struct {
	payload string
	done    bool
}

// readAllEvents reads r's events to the first error, which it returns
// with them. It fails t if the reader does not stop within bound calls.
func readAllEvents(t *testing.T, r io.Reader, bound int) ([]sseEvent, error) {
	t.Helper()
	sr := NewSSEReader(r)
	var out []sseEvent
	for k := 0; k <= bound; k++ {
		p, done, err := sr.ReadEvent()
		if err != nil {
			if p != nil || done {
				t.Fatalf("error %v with payload %q, done %v", err, p, done)
			}
			return out, err
		}
		if done && p != nil {
			t.Fatalf("done with payload %q", p)
		}
		out = append(out, sseEvent{string(p), done})
	}
	t.Fatalf("ReadEvent returned no error after %d calls", bound)
	return nil, nil
}

// FuzzReadEvent: an engine's stream, whatever its bytes, is read without a
// panic and to an end: io.EOF, a cut line (io.ErrUnexpectedEOF) or
// ErrEventTooLarge, never another error nor a loop. The payloads returned
// hold no more bytes, together, than the stream did; none is "[DONE]"
// (that is done=true). The events do not depend on how the bytes arrive
// (whole, or a byte per read). An event written by SSEWriter.SendRaw
// (one line) reads back as it was written, wherever it sits in the
// stream.
func FuzzReadEvent(f *testing.F) {
	long := `data: {"choices":[{"index":0,"text":"` + strings.Repeat("x", 5000) + `"}]}` + "\n\n"
	for _, s := range []string{
		// vLLM's completions and chat streams, with usage and the end.
		"data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\" Hi\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}],\"usage\":null}\n\n" +
			"data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"total_tokens\":7,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\n" +
			"data: [DONE]\n\n",
		"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n" +
			"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
		"data: {\"error\":{\"message\":\"m\",\"type\":\"BadRequestError\",\"param\":null,\"code\":400}}\n\ndata: [DONE]\n\n",
		": keep-alive\n\nevent: x\nid: 3\nretry: 10\ndata: a\ndata: b\n\n",
		"data:a\r\n\r\ndata: [DONE]\r\n\r\n", "data: x", "data: x\n", "data: [DONE]", "data:  [DONE] \n\n",
		"\n\n\n", "", "data", "data\n\n", ":\n", "data: \n\n", long, long[:3000],
	} {
		f.Add([]byte(s), []byte(`{"choices":[{"index":0,"text":"a"}]}`))
	}
	f.Add([]byte("data: x\n\n"), []byte(""))
	f.Add([]byte(""), []byte(" leading space"))
	f.Fuzz(func(t *testing.T, stream, payload []byte) {
		bound := len(stream) + 2
		whole, err := readAllEvents(t, bytes.NewReader(stream), bound)
		if err != io.EOF && !errors.Is(err, io.ErrUnexpectedEOF) && err != ErrEventTooLarge {
			t.Fatalf("%q: error %v", stream, err)
		}
		total := 0
		for _, e := range whole {
			total += len(e.payload)
			if strings.TrimSpace(e.payload) == "[DONE]" {
				t.Fatalf("%q: [DONE] returned as a payload", stream)
			}
		}
		if total > len(stream) {
			t.Fatalf("%q: %d payload bytes from a %d-byte stream", stream, total, len(stream))
		}
		bytewise, err2 := readAllEvents(t, iotest.OneByteReader(bytes.NewReader(stream)), bound)
		if !equalEvents(whole, bytewise) || (err == io.EOF) != (err2 == io.EOF) {
			t.Fatalf("%q: read whole: %v, %v; a byte at a time: %v, %v", stream, whole, err, bytewise, err2)
		}

		// SendRaw then ReadEvent: a one-line payload, after a whole stream
		// that ended at an event's end, reads back unchanged.
		if bytes.ContainsAny(payload, "\r\n") || bytes.Equal(bytes.TrimSpace(payload), doneMarker) {
			return
		}
		var buf bytes.Buffer
		w := NewSSEWriter(&buf)
		if err := w.SendRaw(payload); err != nil {
			t.Fatal(err)
		}
		if err := w.Done(); err != nil {
			t.Fatal(err)
		}
		got, err := readAllEvents(t, &buf, 4)
		if err != io.EOF || len(got) != 2 || got[0] != (sseEvent{string(payload), false}) || got[1] != (sseEvent{"", true}) {
			t.Fatalf("SendRaw(%q), Done: read back %v, %v", payload, got, err)
		}
	})
}

func equalEvents(a, b []sseEvent) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// FuzzHandoff: any prefill answer body is read without a panic; a
// handoff returned is a JSON object with at least one key, taken from a
// body that is a JSON object, and it is the top-level kv_transfer_params
// whenever that one is usable (the first choice's only otherwise).
func FuzzHandoff(f *testing.F) {
	kv := `{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[[1,2,3]],"remote_engine_id":"e0","remote_request_id":"cmpl-x-0-abcd","remote_host":"10.0.0.1","remote_port":5600,"tp_size":1,"remote_num_tokens":48,"remote_blocks_expiry_time":null,"transfer_mode":"pull"}`
	for _, s := range []string{
		`{"id":"cmpl-x","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"a","logprobs":null,"finish_reason":"length","stop_reason":null}],"usage":{"prompt_tokens":48,"total_tokens":49,"completion_tokens":1,"prompt_tokens_details":null},"kv_transfer_params":` + kv + `}`,
		`{"id":"chatcmpl-x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"a"},"finish_reason":"stop"}],"kv_transfer_params":null}`,
		`{"choices":[{"index":0,"text":"a","kv_transfer_params":` + kv + `}]}`,
		`{"kv_transfer_params":{},"choices":[{"kv_transfer_params":{"a":1}}]}`,
		`{"choices":{},"kv_transfer_params":{"a":1}}`, // a handoff was lost to the choices' shape
		`{"kv_transfer_params": { } }`, `{"kv_transfer_params":[1]}`, `{"kv_transfer_params":"x"}`,
		`{"choices":null}`, `{"choices":[null]}`, `[]`, `null`, `{`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		h := Handoff(body)
		var top map[string]json.RawMessage
		topErr := json.Unmarshal(body, &top)
		// encoding/json matches keys without regard to case: with two
		// spellings of the key, which one wins depends on their order.
		spellings := 0
		for k := range top {
			if strings.EqualFold(k, "kv_transfer_params") {
				spellings++
			}
		}
		oneKey := spellings == 1
		if h == nil {
			if topErr == nil && oneKey && usableRef(top["kv_transfer_params"]) {
				t.Fatalf("%q: no handoff, but its kv_transfer_params is an object with a key", body)
			}
			return
		}
		if topErr != nil || top == nil {
			t.Fatalf("%q: handoff %s from a body that is not a JSON object", body, h)
		}
		if !usableRef(h) {
			t.Fatalf("%q: handoff %s is not an object with a key", body, h)
		}
		if oneKey && usableRef(top["kv_transfer_params"]) && !bytes.Equal(h, top["kv_transfer_params"]) {
			t.Fatalf("%q: handoff %s, not the top-level %s", body, h, top["kv_transfer_params"])
		}
	})
}

// usableRef is usable by a full decode.
func usableRef(v json.RawMessage) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(v, &m) == nil && len(m) > 0
}
