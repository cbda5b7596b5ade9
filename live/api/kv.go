package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
)

// KVTransferParams is vLLM's kv_transfer_params dict for the NIXL
// connector, with vLLM's exact field names (docs: vllm-pd-protocol §2-§4).
// Every field is a pointer: nil marshals as JSON null, so a marshalled
// value always carries every field, as a prefill engine's response does.
//
// A router never builds or edits a handoff: it forwards the prefill
// response's raw kv_transfer_params to the decode leg verbatim
// (DecodeBody). This type is for engines (the stub) and for inspection.
type KVTransferParams struct {
	DoRemoteDecode         *bool    `json:"do_remote_decode"`
	DoRemotePrefill        *bool    `json:"do_remote_prefill"`
	RemoteEngineID         *string  `json:"remote_engine_id"`
	RemoteBlockIDs         BlockIDs `json:"remote_block_ids"`
	RemoteRequestID        *string  `json:"remote_request_id"`
	RemoteHost             *string  `json:"remote_host"`
	RemotePort             *int     `json:"remote_port"`
	TPSize                 *int     `json:"tp_size"`
	DCPSize                *int     `json:"dcp_size"`
	PPSize                 *int     `json:"pp_size"`
	RemoteNumTokens        *int     `json:"remote_num_tokens"`
	RemoteBlocksExpiryTime *float64 `json:"remote_blocks_expiry_time"`
	TransferMode           *string  `json:"transfer_mode"`

	// Malformed is set by Decode when the dict had a field of the wrong
	// type; vLLM then treats the params as invalid (and recomputes).
	Malformed bool `json:"-"`
}

// BlockIDs is remote_block_ids: one list of block ids per KV-cache group.
// It also reads the older flat form ([1,2,3]) as one group. nil marshals
// as null.
type BlockIDs [][]int

// UnmarshalJSON reads a list of lists, or a flat list as one group.
func (b *BlockIDs) UnmarshalJSON(data []byte) error {
	if isNull(data) {
		*b = nil
		return nil
	}
	var groups [][]int
	if err := json.Unmarshal(data, &groups); err == nil {
		*b = groups
		return nil
	}
	var flat []int
	if err := json.Unmarshal(data, &flat); err != nil {
		return fmt.Errorf("remote_block_ids: expected a list of lists of ints")
	}
	*b = [][]int{flat}
	return nil
}

// WantsRemoteDecode reports a prefill leg: do_remote_decode is true.
func (p *KVTransferParams) WantsRemoteDecode() bool {
	return p != nil && !p.Malformed && p.DoRemoteDecode != nil && *p.DoRemoteDecode
}

// CanPull reports whether a decode engine would pull the KV: vLLM does
// only when do_remote_prefill is true and remote_engine_id,
// remote_request_id, remote_host and remote_port are all present;
// otherwise it logs "invalid KVTransferParams" and recomputes the prompt.
func (p *KVTransferParams) CanPull() bool {
	return p != nil && !p.Malformed && p.DoRemotePrefill != nil && *p.DoRemotePrefill &&
		p.RemoteEngineID != nil && p.RemoteRequestID != nil && p.RemoteHost != nil && p.RemotePort != nil
}

// WantsRemotePrefill reports do_remote_prefill true, valid or not.
func (p *KVTransferParams) WantsRemotePrefill() bool {
	return p != nil && p.DoRemotePrefill != nil && *p.DoRemotePrefill
}

// decodeKV reads kv_transfer_params: it must be an object (vLLM's
// pydantic type is a dict); a field of the wrong type marks it Malformed
// instead of failing the request, as vLLM only checks the fields when
// the connector reads them.
func decodeKV(v json.RawMessage, d *decoder) *KVTransferParams {
	if len(v) == 0 || v[0] != '{' {
		d.fail(Invalid("kv_transfer_params", string(v), "an object or null"))
		return nil
	}
	var p KVTransferParams
	if err := json.Unmarshal(v, &p); err != nil {
		var fields map[string]json.RawMessage
		if json.Unmarshal(v, &fields) != nil {
			d.fail(Invalid("kv_transfer_params", string(v), "an object or null"))
			return nil
		}
		// Keep what reads; mark the rest.
		p = KVTransferParams{Malformed: true}
		for k, fv := range fields {
			one, _ := json.Marshal(map[string]json.RawMessage{k: fv})
			_ = json.Unmarshal(one, &p)
		}
		p.Malformed = true
	}
	return &p
}

// PrefillKVParams is the kv_transfer_params a router sends on a prefill
// leg (protocol §2).
var PrefillKVParams = json.RawMessage(`{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)

var (
	jsonFalse = json.RawMessage(`false`)
	jsonOne   = json.RawMessage(`1`)
)

// PrefillBody is the prefill leg's body (protocol §2): the client's body
// with stream false, max_tokens 1 (and max_completion_tokens 1 when the
// client sent it), stream_options, min_tokens and min_completion_tokens
// removed, and kv_transfer_params set to PrefillKVParams. raw is not
// modified. Keys come out sorted.
func PrefillBody(raw map[string]json.RawMessage) ([]byte, error) {
	m := clone(raw)
	m["stream"] = jsonFalse
	m["max_tokens"] = jsonOne
	if _, ok := m["max_completion_tokens"]; ok {
		m["max_completion_tokens"] = jsonOne
	}
	delete(m, "stream_options")
	delete(m, "min_tokens")
	delete(m, "min_completion_tokens")
	m["kv_transfer_params"] = PrefillKVParams
	return encodeObject(m), nil
}

// WithUsage returns raw with stream_options set to {"include_usage":
// true}, so that a streamed answer ends with the engine's own token
// count: a chunk may carry several tokens, or none that a router sees as
// text. It is for a client that did not ask for usage, whose other stream
// options (continuous_usage_stats) do nothing without it in vLLM; the
// relay drops the usage chunk on the way back. raw is not modified.
func WithUsage(raw map[string]json.RawMessage) map[string]json.RawMessage {
	m := clone(raw)
	m["stream_options"] = json.RawMessage(`{"include_usage":true}`)
	return m
}

// DecodeBody is the decode leg's body (protocol §4): the client's body
// with kv_transfer_params replaced by the prefill engine's handoff,
// verbatim; with a nil or empty handoff the key is removed (PlainBody).
func DecodeBody(raw map[string]json.RawMessage, handoff json.RawMessage) ([]byte, error) {
	m := clone(raw)
	if len(bytes.TrimSpace(handoff)) == 0 {
		delete(m, "kv_transfer_params")
	} else {
		if !json.Valid(handoff) {
			return nil, fmt.Errorf("decode body: handoff is not valid JSON")
		}
		m["kv_transfer_params"] = handoff
	}
	return encodeObject(m), nil
}

// PlainBody is the body of one ordinary request (both phases on one
// engine): the client's body without kv_transfer_params.
func PlainBody(raw map[string]json.RawMessage) ([]byte, error) {
	m := clone(raw)
	delete(m, "kv_transfer_params")
	return encodeObject(m), nil
}

func clone(raw map[string]json.RawMessage) map[string]json.RawMessage {
	m := make(map[string]json.RawMessage, len(raw)+2)
	for k, v := range raw {
		m[k] = v
	}
	return m
}

// encodeObject writes m as a JSON object with sorted keys and every value
// byte for byte as it came (values come from a parsed body or are checked
// with json.Valid, so the object is valid JSON).
func encodeObject(m map[string]json.RawMessage) []byte {
	keys := make([]string, 0, len(m))
	n := 2
	for k, v := range m {
		keys = append(keys, k)
		n += len(k) + len(v) + 4
	}
	sort.Strings(keys)
	b := make([]byte, 0, n)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		kb, _ := json.Marshal(k)
		b = append(b, kb...)
		b = append(b, ':')
		v := bytes.TrimSpace(m[k])
		if len(v) == 0 {
			v = []byte("null")
		}
		b = append(b, v...)
	}
	return append(b, '}')
}
