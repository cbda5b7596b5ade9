package stub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/timing"
)

// Why a pull failed.
var (
	ErrUnknownHandoff = errors.New("no such handoff")
	ErrTakenHandoff   = errors.New("handoff already taken")
	ErrExpiredHandoff = errors.New("handoff lease expired")
	ErrWrongEngine    = errors.New("handoff names another engine")
)

// BlockTokens is the tokens per KV block in a handoff's remote_block_ids.
const BlockTokens = 16

// handoffs is a prefill engine's table of pinned KV: one entry per
// finished prefill leg, held under a lease until a decode engine takes it
// or the lease expires. Taken and expired entries stay as tombstones for
// a while, so a second take says "taken" rather than "unknown".
type handoffs struct {
	mu      sync.Mutex
	lease   time.Duration
	entries map[string]*handoff
	pinned  int64 // tokens held by live entries
	link    timing.Link
	kv      timing.KV
	epoch   time.Time
	nextBlk int
	// queue holds every expiry time set, in the order set (time order up
	// to the jitter of concurrent callers); sweep pops the due ones, so a
	// request costs O(1) amortised however many handoffs are held. An
	// item whose entry's expiry changed since is stale and skipped.
	queue []expiry
	head  int
	// byPrompt names the held handoff of each prompt (promptKey), for a
	// request that continues here from its own prefill (takeLocal).
	byPrompt map[uint64]string
}

type expiry struct {
	id string
	at time.Time
}

// expireAt sets e's expiry and queues it.
func (h *handoffs) expireAt(id string, e *handoff, at time.Time) {
	e.expires = at
	h.queue = append(h.queue, expiry{id: id, at: at})
}

type handoff struct {
	tokens  int
	prompt  uint64 // promptKey of its request
	expires time.Time
	state   uint8 // held, taken, expired
}

const (
	held uint8 = iota
	taken
	expired
)

func newHandoffs(lease time.Duration, kv timing.KV, epoch time.Time) *handoffs {
	return &handoffs{lease: lease, kv: kv, epoch: epoch, entries: map[string]*handoff{}, byPrompt: map[uint64]string{}}
}

// unlist forgets id as its prompt's held handoff. h.mu is held.
func (h *handoffs) unlist(id string, e *handoff) {
	if h.byPrompt[e.prompt] == id {
		delete(h.byPrompt, e.prompt)
	}
}

// pin holds tokens of KV for request id, whose prompt is prompt
// (promptKey), and returns its block ids.
func (h *handoffs) pin(id string, tokens int, prompt uint64, now time.Time) [][]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweep(now)
	if old, ok := h.entries[id]; ok && old.state == held {
		h.pinned -= int64(old.tokens)
		h.unlist(id, old)
	}
	e := &handoff{tokens: tokens, prompt: prompt}
	h.entries[id] = e
	h.byPrompt[prompt] = id
	h.expireAt(id, e, now.Add(h.lease))
	h.pinned += int64(tokens)
	n := (tokens + BlockTokens - 1) / BlockTokens
	blocks := make([]int, n)
	for i := range blocks {
		h.nextBlk++
		blocks[i] = h.nextBlk
	}
	return [][]int{blocks}
}

// held returns id's handoff while its blocks are still pinned, or why
// they are not (unknown, taken, expired). h.mu is held.
func (h *handoffs) held(id string, now time.Time) (*handoff, error) {
	h.sweep(now)
	e, ok := h.entries[id]
	switch {
	case !ok:
		return nil, ErrUnknownHandoff
	case e.state == taken:
		return nil, ErrTakenHandoff
	case e.state == expired || now.After(e.expires):
		return nil, ErrExpiredHandoff
	}
	return e, nil
}

// take claims a handoff for a pull: it frees the blocks and returns the
// KV's size and how long its transfer takes on this engine's egress link
// (model seconds, before any time scale).
func (h *handoffs) take(id string, now time.Time) (tokens int, delay float64, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, err := h.held(id, now)
	if err != nil {
		return 0, 0, err
	}
	e.state = taken
	h.unlist(id, e)
	h.expireAt(id, e, now.Add(h.lease))
	h.pinned -= int64(e.tokens)
	at := event.Time(now.Sub(h.epoch))
	ready := h.link.Transfer(h.kv, at, int64(e.tokens))
	return e.tokens, (ready - at).Seconds(), nil
}

// holdsPrompt reports whether this engine pins a handoff of prompt
// (promptKey): a request for that prompt finds its KV here, as vLLM's
// prefix cache finds the pinned blocks (shared, not claimed: the pin
// stays for the decode it was made for, until taken or expired).
func (h *handoffs) holdsPrompt(prompt uint64, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweep(now)
	id, ok := h.byPrompt[prompt]
	if !ok {
		return false
	}
	_, err := h.held(id, now)
	return err == nil
}

// renew extends a held handoff's lease from now.
func (h *handoffs) renew(id string, now time.Time) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, err := h.held(id, now)
	if err != nil {
		return err
	}
	h.expireAt(id, e, now.Add(h.lease))
	return nil
}

// sweep expires held entries past their lease and forgets tombstones a
// lease after they were made.
func (h *handoffs) sweep(now time.Time) {
	for h.head < len(h.queue) && now.After(h.queue[h.head].at) {
		q := h.queue[h.head]
		h.queue[h.head] = expiry{}
		h.head++
		e, ok := h.entries[q.id]
		if !ok || !e.expires.Equal(q.at) {
			continue // stale: the entry changed since
		}
		if e.state == held {
			e.state = expired
			h.unlist(q.id, e)
			h.pinned -= int64(e.tokens)
			h.expireAt(q.id, e, now.Add(h.lease))
			continue
		}
		delete(h.entries, q.id)
	}
	if h.head > 1024 && 2*h.head > len(h.queue) {
		n := copy(h.queue, h.queue[h.head:])
		h.queue, h.head = h.queue[:n], 0
	}
}

// pinnedTokens is the KV tokens held for handoffs now.
func (h *handoffs) pinnedTokens(now time.Time) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweep(now)
	return h.pinned
}

// clear drops every handoff (the engine crashed).
func (h *handoffs) clear() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.entries = map[string]*handoff{}
	h.byPrompt = map[uint64]string{}
	h.queue, h.head = nil, 0
	h.pinned = 0
}

// pullRequest is the body of the internal pull and renew routes.
type pullRequest struct {
	EngineID  string `json:"engine_id"`
	RequestID string `json:"request_id"`
}

type pullResponse struct {
	Tokens int     `json:"tokens"`
	DelayS float64 `json:"delay_s"`
}

// Puller fetches a handoff's KV from the engine that holds it.
type Puller interface {
	Pull(ctx context.Context, engineID, requestID, host string, port int) (tokens int, delay float64, err error)
}

// fleetPuller pulls from a server of the same process when the engine id
// is one of them, and over HTTP from the side channel otherwise.
type fleetPuller struct {
	mu     sync.RWMutex
	local  map[string]*Server
	client *http.Client
}

func (p *fleetPuller) add(s *Server) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.local == nil {
		p.local = map[string]*Server{}
	}
	p.local[s.id] = s
}

func (p *fleetPuller) Pull(ctx context.Context, engineID, requestID, host string, port int) (int, float64, error) {
	p.mu.RLock()
	s := p.local[engineID]
	p.mu.RUnlock()
	if s != nil {
		// In-process only when the handoff names that server's own side
		// channel; a wrong one is dialled, and fails, as vLLM's would.
		if h, pt := s.ownSideChannel(); h != host || pt != port {
			s = nil
		}
	}
	if s != nil {
		if s.crashed.Load() {
			return 0, 0, fmt.Errorf("engine %s: down", engineID)
		}
		return s.handoffs.take(requestID, time.Now())
	}
	body, _ := json.Marshal(pullRequest{EngineID: engineID, RequestID: requestID})
	url := "http://" + net.JoinHostPort(host, strconv.Itoa(port)) + PullPath
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("pull from %s: %w", url, err)
	}
	defer resp.Body.Close()
	var out pullResponse
	switch {
	case resp.StatusCode == http.StatusOK:
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return 0, 0, fmt.Errorf("pull from %s: %w", url, err)
		}
		return out.Tokens, out.DelayS, nil
	case resp.StatusCode == http.StatusNotFound:
		return 0, 0, ErrUnknownHandoff
	case resp.StatusCode == http.StatusConflict:
		return 0, 0, ErrTakenHandoff
	case resp.StatusCode == http.StatusGone:
		return 0, 0, ErrExpiredHandoff
	case resp.StatusCode == http.StatusMisdirectedRequest:
		return 0, 0, ErrWrongEngine
	}
	return 0, 0, fmt.Errorf("pull from %s: status %d", url, resp.StatusCode)
}

// Internal routes of the KV side channel (served on the engine's HTTP
// listener, whose host and port the handoff names).
const (
	PullPath  = "/stub/kv/pull"
	RenewPath = "/stub/kv/renew"
)

func pullStatus(err error) int {
	switch {
	case errors.Is(err, ErrUnknownHandoff):
		return http.StatusNotFound
	case errors.Is(err, ErrTakenHandoff):
		return http.StatusConflict
	case errors.Is(err, ErrExpiredHandoff):
		return http.StatusGone
	case errors.Is(err, ErrWrongEngine):
		return http.StatusMisdirectedRequest
	}
	return http.StatusInternalServerError
}
