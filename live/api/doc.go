// Package api is the OpenAI wire format the live router and the stub
// engines share: request decoding (Decode, strict on the fields it
// models, the rest kept raw for forwarding), OpenAI error bodies (Error,
// WriteError), vLLM's kv_transfer_params (KVTransferParams), the body
// edits of the two prefill/decode legs (PrefillBody, DecodeBody,
// PlainBody: docs/stub.md and the vLLM P/D protocol notes), response and
// stream-chunk types (Response), and server-sent events both ways
// (SSEWriter, SSEReader).
//
// It holds no state and does no I/O beyond the writer or reader it is
// given.
package api
