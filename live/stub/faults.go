package stub

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"

	"github.com/narwhal-bench/narwhal-bench/live/api"
)

// Faults are the failures a server injects. The zero value is healthy.
type Faults struct {
	// CrashAfter crashes the server when the (N+1)th inference request
	// since the faults were set arrives: the listener closes, every connection drops, pinned KV is
	// lost, and it stays down (0 = never).
	CrashAfter int `json:"crash_after,omitempty"`
	// Stall accepts every request but never answers (until the client
	// gives up or the server closes); /stub/faults still answers.
	Stall bool `json:"stall,omitempty"`
	// Slow multiplies every duration (2 = half speed; 0 or 1 = off).
	Slow float64 `json:"slow,omitempty"`
	// Refuse answers inference requests with 503 and Retry-After: 1.
	Refuse bool `json:"refuse,omitempty"`
	// BreakAfter drops the connection of an answer after this many
	// tokens were sent, when it has more (0 = never).
	BreakAfter int `json:"break_after,omitempty"`
	// NoHandoff returns prefill legs without kv_transfer_params (null), as
	// an engine without the NIXL connector does.
	NoHandoff bool `json:"no_handoff,omitempty"`
	// RestartAfterMs restarts a server that CrashAfter crashed this many
	// milliseconds later, as a supervisor restarting the engine would: the
	// same address, a new process start time, no KV, healthy (0 = it stays
	// down).
	RestartAfterMs int `json:"restart_after_ms,omitempty"`
	// SideChannel, "HOST:PORT", is the KV side channel the handoffs name
	// instead of the server's own, as a vLLM engine advertises whatever
	// VLLM_NIXL_SIDE_CHANNEL_HOST and _PORT say (localhost:5600 when
	// unset): a decode engine's pull from it fails, and with
	// kv_load_failure_policy recompute the decode leg recomputes the
	// prompt and answers as if nothing went wrong.
	SideChannel string `json:"side_channel,omitempty"`
}

// SetFaults replaces the server's faults.
func (s *Server) SetFaults(f Faults) {
	s.mu.Lock()
	s.faults, s.served = f, 0
	s.mu.Unlock()
}

func (s *Server) getFaults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// serveFaults is GET (read) and POST (replace) /stub/faults.
func (s *Server) serveFaults(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		var f Faults
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			api.WriteVLLMError(w, api.BadRequest("faults: "+err.Error()))
			return
		}
		if f.CrashAfter < 0 || f.BreakAfter < 0 || f.Slow < 0 || f.RestartAfterMs < 0 {
			api.WriteVLLMError(w, api.BadRequest("faults: crash_after, break_after, slow and restart_after_ms must be >= 0"))
			return
		}
		if f.SideChannel != "" {
			if _, _, err := splitSideChannel(f.SideChannel); err != nil {
				api.WriteVLLMError(w, api.BadRequest("faults: side_channel: "+err.Error()))
				return
			}
		}
		s.SetFaults(f)
	}
	writeJSON(w, http.StatusOK, s.getFaults())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// splitSideChannel reads a side channel "HOST:PORT".
func splitSideChannel(hp string) (string, int, error) {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, fmt.Errorf("%q: expected HOST:PORT", hp)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 || host == "" {
		return "", 0, fmt.Errorf("%q: expected HOST:PORT with a port from 0 to 65535", hp)
	}
	return host, p, nil
}
