package event

import "strconv"

// Kind says what a Record reports. The meaning of a Record's generic fields
// (Tokens, Ref, Peer, Cause) depends on its Kind, as documented per constant.
type Kind uint8

// Kinds of records. A request's life is Arrival, then either Refuse or
// Admit ... PrefillStart, PrefillDone (its first token), optionally
// KVStart/KVDone when its decode runs on another instance, DecodeStart, and
// exactly one terminal record: Finish, Refuse, Expire or Fail.
const (
	KindNone Kind = iota
	// KindRunMeta opens a run. Text holds the run metadata as JSON.
	KindRunMeta
	// KindArrival: a request reached the system. Ref = scheduled send time,
	// Tokens = prompt tokens, Want = output tokens it may produce (the
	// trace's answer length, or its output cap when lower), Class = request
	// class, Text = the trace's reference answer when it has one (empty
	// otherwise), which the report scores responses against (event.Row's
	// Reference).
	KindArrival
	// KindAdmit: the request was placed for prefill on Inst.
	KindAdmit
	// KindQueue: the request waits for admission; Tokens = queue depth.
	KindQueue
	// KindRefuse: terminal. The request was refused; Cause says why.
	KindRefuse
	// KindExpire: terminal. The request did not end before a deadline
	// (queue timeout, or the simulator's drain limit); Cause says which.
	// Tokens = output tokens produced before it expired.
	KindExpire
	// KindPrefillStart: the first chunk of the prompt ran on Inst.
	// Tokens = prompt tokens served from the prefix cache.
	KindPrefillStart
	// KindPrefillDone: the prompt finished on Inst; this is the first
	// output token's time. Tokens = prompt tokens served from the prefix
	// cache when the driver learns it only then (the live router, from a
	// prefill leg's usage.prompt_tokens_details); 0 when unknown or
	// already given by KindPrefillStart.
	KindPrefillDone
	// KindKVStart: KV transfer from Inst to Peer began; Tokens = context
	// tokens moved.
	KindKVStart
	// KindKVDone: KV transfer from Inst to Peer finished.
	KindKVDone
	// KindDecodeStart: the decode leg was placed on Inst (Peer = prefill
	// instance). Cause is CauseCrossed when the KV had to move.
	KindDecodeStart
	// KindFinish: terminal. The last token was produced on Inst.
	// Tokens = output tokens produced (the first token included);
	// Cause = the finish reason (stop, length, cancel); Text = the response
	// text when the driver has it (live runs; empty in simulations),
	// folded into event.Row's Response; Want = prompt tokens served from
	// the prefix cache when the driver learns them only at the end (the
	// live router, a streamed request one engine served whole: its usage
	// comes last), 0 otherwise.
	KindFinish
	// KindFail: terminal. The request failed; Cause says why; Tokens =
	// output tokens produced before the failure.
	KindFail
	// KindRoleMove: Inst changed role From -> To. An instance's opening
	// role is a role move from RoleNone with no cause, at time 0 (see
	// Opening); RoleNone otherwise means an idle engine (no worker). Cause = what moved it,
	// Tokens = resident decode tokens at the move, Ref = resident prefill
	// work at the move in nanoseconds of profile time, Text = the reason.
	KindRoleMove
	// KindDecision: a controller decision. Text holds the candidates with
	// their scores, the choice and why (JSON).
	KindDecision
	// KindHealth: Inst's health changed; Tokens = process generation,
	// Cause = the new state.
	KindHealth
	// KindPreempt: Inst preempted the request's decode stream because the
	// KV its streams hold passed the engine's capacity (vLLM's recompute
	// preemption: freed, to be computed again). Tokens = the context freed
	// (prompt plus answer so far). Not terminal; simulations only (a live
	// router does not see inside its engines).
	KindPreempt
	kindCount
)

var kindNames = [...]string{
	"none", "run_meta", "arrival", "admit", "queue", "refuse", "expire",
	"prefill_start", "prefill_done", "kv_start", "kv_done", "decode_start",
	"finish", "fail", "role_move", "decision", "health", "preempt",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Terminal reports whether k ends a request's life.
func (k Kind) Terminal() bool {
	return k == KindFinish || k == KindRefuse || k == KindExpire || k == KindFail
}

// Cause qualifies a Record: a finish reason, a refusal or failure cause, or
// what moved a role.
type Cause uint8

// Causes.
const (
	CauseNone Cause = iota
	// Finish reasons.
	CauseStop   // the answer ended naturally
	CauseLength // the answer reached its output cap
	CauseCancel // the client cancelled
	// Refusal causes.
	CauseNoCapacity // reserved: no driver writes it (kept: journals store causes by number, so removing it would renumber the rest)
	CauseOverload   // the queue bound was reached (HTTP 529)
	CausePrompt     // the prompt alone cannot meet the TTFT SLO
	// Expiry causes.
	CauseDrainLimit   // the simulator stopped draining before it ended
	CauseQueueTimeout // it waited in the admission queue too long
	// Failure causes.
	CauseEngineError // the engine failed the request
	CauseUnavailable // no replica could take it (HTTP 503)
	// Decode placement.
	CauseCrossed // the decode leg runs on another instance than its prefill
	// Role-move reasons.
	CauseController // a role controller moved it
	CauseInline     // Algorithm 1 flipped it inline to place a request
	CauseOperator   // an operator moved it, or cordoned or uncordoned it (KindHealth)
	// Engine health (KindHealth) and live failures.
	CauseEngineDown // the engine stopped answering (connection refused, crash, failed probe)
	CauseEngineUp   // the engine answers again (Tokens = its process generation)
	CauseNoHandoff  // a prefill leg returned no KV handoff the decode leg can use
	CauseTimeout    // an upstream leg or the request's own deadline passed
	CauseBadGateway // an engine answered with an error or broke its stream
	// Prefill placement.
	CauseSpilled // the prompt runs on a decode engine no prefill engine could start it in time on (burst spill)
	// Decode placement.
	CauseWhole // the request runs whole on the engine that prefilled it: it asks for its prompt's logprobs, which a decode engine fed the KV cannot compute
	causeCount
)

var causeNames = [...]string{
	"", "stop", "length", "cancel",
	"no_capacity", "overload", "prompt",
	"drain_limit", "queue_timeout",
	"engine_error", "unavailable",
	"crossed",
	"controller", "inline", "operator",
	"engine_down", "engine_up", "no_handoff", "timeout", "bad_gateway",
	"spilled",
	"whole",
}

func (c Cause) String() string {
	if int(c) < len(causeNames) {
		return causeNames[c]
	}
	return "cause(" + strconv.Itoa(int(c)) + ")"
}

// Record is one observable fact. Seq orders records within a run; At is
// when the fact happened. Fields a Kind does not use are zero (Inst and
// Peer are NoInstance).
type Record struct {
	Seq    uint64
	At     Time
	Kind   Kind
	Cause  Cause
	From   Role
	To     Role
	Inst   Instance
	Peer   Instance
	Req    RequestID
	Tokens int64
	Want   int64
	Ref    Time
	Class  string
	Text   string
	// Epoch is the high-availability election epoch the record was
	// written under (the leader key's etcd revision, serve --ha); 0 when
	// the router runs alone and in every simulation.
	Epoch uint64
	// PrefixGroup and PrefixTokens, on an arrival the live router priced
	// with prefix caching (--prefix-cache), are the prefix group and
	// length it gave the core (its prompt's first block, and the blocks
	// it shares with earlier prompts: live/prefix.go), so that sim
	// --replay prices the prompts the same way; 0 otherwise (every
	// simulated arrival).
	PrefixGroup  int64
	PrefixTokens int64
}

// Opening reports whether r records an instance's opening role (a role
// move from RoleNone with no cause, at the start of a run) rather than a
// move. A move from RoleNone with a cause starts an idle engine.
func (r *Record) Opening() bool {
	return r.Kind == KindRoleMove && r.From == RoleNone && r.Cause == CauseNone
}

// Recorder receives records in the order they happen. Drivers stamp Seq.
type Recorder interface {
	Record(r *Record)
}

// Discard is a Recorder that drops everything.
var Discard Recorder = discard{}

type discard struct{}

func (discard) Record(*Record) {}

// Tee is a Recorder that forwards each record to every recorder in order.
type Tee []Recorder

// Record forwards r to each member.
func (t Tee) Record(r *Record) {
	for _, x := range t {
		x.Record(r)
	}
}
