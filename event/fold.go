package event

import "fmt"

// Row is one offered request folded from its records. Times are Never
// when the request never reached that point.
type Row struct {
	Req          RequestID
	Class        string
	Scheduled    Time     // when the trace scheduled it to be sent
	Arrival      Time     // when it reached the system
	Admit        Time     // when it was first placed for prefill (a re-placed request keeps its first)
	FirstToken   Time     // when its prefill finished (first output token)
	End          Time     // when it ended (finish, refuse, expire, fail)
	PrefillInst  Instance // NoInstance when never placed
	DecodeInst   Instance // NoInstance when never placed for decode
	Crossed      bool     // decode ran on another instance than prefill
	Spilled      bool     // its prompt ran on a decode engine (burst spill: admit cause spilled)
	InputTokens  int64
	WantOutput   int64  // output tokens the trace asked for
	OutputTokens int64  // output tokens produced, first token included
	CachedTokens int64  // prompt tokens served from the prefix cache
	Preemptions  int64  // times its decode stream was preempted (KindPreempt)
	Terminal     Kind   // KindFinish, KindRefuse, KindExpire, KindFail; KindNone while open
	Cause        Cause  // finish reason or refusal/expiry/failure cause
	Reference    string // the trace's reference answer (KindArrival Text); empty when none
	Response     string // the response text (KindFinish Text); empty when the driver has none
}

// Completed reports whether the request finished (naturally or at its cap).
func (r *Row) Completed() bool { return r.Terminal == KindFinish }

// TTFT is the time to first token measured from the scheduled send time, or
// Never when no first token exists.
func (r *Row) TTFT() Time {
	if r.FirstToken == Never {
		return Never
	}
	return r.FirstToken - r.Scheduled
}

// TPOT is the mean gap between output tokens after the first, or Never when
// the request produced fewer than two tokens or did not finish.
func (r *Row) TPOT() Time {
	if r.Terminal != KindFinish || r.OutputTokens < 2 || r.FirstToken == Never {
		return Never
	}
	return (r.End - r.FirstToken) / Time(r.OutputTokens-1)
}

// Fold turns a run's records into one Row per offered request. Request IDs
// are expected to be dense (1..N), as both drivers assign them.
//
// While folding it keeps rows without pointers (classes by index, texts
// aside), in chunks of a fixed size, so a run of millions of requests
// grows without copying and scans cheaply; Rows builds the []Row once
// (Each streams them instead). A run's driver that needs only outcomes
// folds with StreamFold, which keeps the requests in flight alone.
type Fold struct {
	rows [][]foldRow // chunks of foldChunk rows; request i is rows[i/foldChunk][i%foldChunk]
	n    int         // rows folded
	// gone is how many rows Release let go (a multiple of foldChunk):
	// their chunks are nil, and a record for one of them is a record
	// after its end.
	gone  int
	ct    classTable
	texts map[int]texts // reference and response texts by row, when any
	out   []Row         // the rows last built by Rows
	built bool          // out matches rows
	err   error
}

// classTable numbers class names, so folded rows hold no strings.
type classTable struct {
	classes   []string          // class names by index; 0 is ""
	classIdx  map[string]uint32 // class name -> index
	lastClass uint32            // index of the class last looked up
}

// foldRow is a Row being folded: the same fields, its class as an index.
type foldRow struct {
	scheduled, arrival, admit, first, end Time
	prefill, decode                       Instance
	crossed                               bool
	spilled                               bool
	preempt                               int32
	terminal                              Kind
	cause                                 Cause
	class                                 uint32
	input, want, output, cached           int64
}

type texts struct{ reference, response string }

func newFoldRow() foldRow {
	return foldRow{scheduled: Never, arrival: Never, admit: Never, first: Never, end: Never,
		prefill: NoInstance, decode: NoInstance}
}

// Record folds one record. Violations of the request life cycle (a second
// terminal record, a record before the arrival) are kept as the first
// error, reported by Err.
func (f *Fold) Record(rec *Record) {
	if rec.Req <= 0 {
		return
	}
	f.built = false
	i := int(rec.Req - 1)
	if i < f.gone {
		// Released: it had ended (Release takes ended rows only).
		f.fail(fmt.Errorf("request %d: %s at %v after it ended", rec.Req, rec.Kind, rec.At))
		return
	}
	if i >= f.n {
		f.extend(i + 1)
	}
	applied, err := f.row(i).apply(rec, &f.ct)
	if err != nil {
		f.fail(err)
	}
	if applied && rec.Text != "" {
		switch rec.Kind {
		case KindArrival:
			f.setText(i, func(t *texts) { t.reference = rec.Text })
		case KindFinish:
			f.setText(i, func(t *texts) { t.response = rec.Text })
		}
	}
}

// foldChunk is how many rows a chunk of a Fold holds (about 1.5 MB).
const foldChunk = 1 << 14

// row is request i's row; i < f.n.
func (f *Fold) row(i int) *foldRow { return &f.rows[i/foldChunk][i%foldChunk] }

// extend starts the rows below n, adding chunks as needed (a chunk kept
// by Reset is reused).
func (f *Fold) extend(n int) {
	for len(f.rows)*foldChunk < n {
		f.rows = append(f.rows, make([]foldRow, foldChunk))
	}
	for k := f.n / foldChunk; k*foldChunk < n; k++ {
		if f.rows[k] == nil { // released before a Reset
			f.rows[k] = make([]foldRow, foldChunk)
		}
	}
	for j := f.n; j < n; j++ {
		*f.row(j) = newFoldRow()
	}
	f.n = n
}

// apply folds rec into r: whether it was applied (not after the request
// ended), and the first life-cycle violation it shows.
func (r *foldRow) apply(rec *Record, ct *classTable) (applied bool, err error) {
	if rec.Kind != KindArrival && r.arrival == Never {
		err = fmt.Errorf("request %d: %s at %v before its arrival", rec.Req, rec.Kind, rec.At)
	}
	if r.terminal != KindNone {
		if err == nil {
			err = fmt.Errorf("request %d: %s at %v after it ended with %s", rec.Req, rec.Kind, rec.At, r.terminal)
		}
		return false, err
	}
	switch rec.Kind {
	case KindArrival:
		if r.arrival != Never && err == nil {
			err = fmt.Errorf("request %d arrived twice", rec.Req)
		}
		r.arrival, r.scheduled = rec.At, rec.Ref
		r.input, r.want, r.class = rec.Tokens, rec.Want, ct.classOf(rec.Class)
	case KindAdmit:
		// A request re-placed after a failed leg (the live router) is
		// admitted again: its queue wait ends at its first admission, its
		// prefill engine is the last, and it spilled if any admission did.
		if r.admit == Never {
			r.admit = rec.At
		}
		r.prefill = rec.Inst
		r.spilled = r.spilled || rec.Cause == CauseSpilled
	case KindPrefillStart:
		r.cached = rec.Tokens
	case KindPrefillDone:
		r.first = rec.At
		r.output = 1
		if rec.Tokens > 0 {
			r.cached = rec.Tokens
		}
	case KindPreempt:
		r.preempt++
	case KindDecodeStart:
		r.decode = rec.Inst
		r.crossed = rec.Cause == CauseCrossed
	case KindFinish, KindExpire, KindFail, KindRefuse:
		r.terminal, r.cause, r.end = rec.Kind, rec.Cause, rec.At
		if rec.Kind != KindRefuse {
			r.output = rec.Tokens
		}
		if rec.Kind == KindFinish && rec.Want > 0 {
			r.cached = rec.Want // learned from the answer's last chunk
		}
	}
	return true, err
}

// build writes the row of request id into o (its texts left empty).
func (r *foldRow) build(id RequestID, ct *classTable, o *Row) {
	*o = Row{Req: id, Scheduled: r.scheduled, Arrival: r.arrival, Admit: r.admit,
		FirstToken: r.first, End: r.end, PrefillInst: r.prefill, DecodeInst: r.decode, Crossed: r.crossed, Spilled: r.spilled,
		InputTokens: r.input, WantOutput: r.want, OutputTokens: r.output, CachedTokens: r.cached,
		Preemptions: int64(r.preempt), Terminal: r.terminal, Cause: r.cause}
	if r.class != 0 {
		o.Class = ct.classes[r.class]
	}
}

func (ct *classTable) classOf(name string) uint32 {
	if name == "" {
		return 0
	}
	if ct.lastClass != 0 && name == ct.classes[ct.lastClass] {
		return ct.lastClass // runs of one class are common
	}
	if k, ok := ct.classIdx[name]; ok {
		ct.lastClass = k
		return k
	}
	if ct.classIdx == nil {
		ct.classIdx = map[string]uint32{}
		ct.classes = append(ct.classes[:0], "")
	}
	k := uint32(len(ct.classes))
	ct.classes = append(ct.classes, name)
	ct.classIdx[name] = k
	ct.lastClass = k
	return k
}

func (f *Fold) setText(i int, set func(*texts)) {
	if f.texts == nil {
		f.texts = map[int]texts{}
	}
	t := f.texts[i]
	set(&t)
	f.texts[i] = t
}

func (f *Fold) fail(err error) {
	if f.err == nil {
		f.err = err
	}
}

// Release lets the rows below n go, whole chunks of them, to bound the
// memory of a consumer that streams rows out as they end (the Parquet
// export): every row below n must have ended and been taken. Rows, Each
// and RowAt then serve only rows from Released on; a later record for a
// released row is a violation (Err), as any record after a request's end
// is.
func (f *Fold) Release(n int) {
	for n = min(n, f.n); f.gone+foldChunk <= n; f.gone += foldChunk {
		k := f.gone / foldChunk
		f.rows[k] = nil
		for i := f.gone; i < f.gone+foldChunk; i++ {
			delete(f.texts, i)
		}
	}
}

// Released is how many rows Release let go: RowAt serves rows from it on.
func (f *Fold) Released() int { return f.gone }

// Rows returns the folded rows, indexed by RequestID-1. The slice is the
// fold's own until the next Record or Reset.
func (f *Fold) Rows() []Row {
	if f.gone > 0 {
		panic("event: Fold.Rows after Release")
	}
	if f.built {
		return f.out
	}
	if cap(f.out) < f.n {
		f.out = make([]Row, f.n)
	}
	f.out = f.out[:f.n]
	for i := range f.n {
		f.RowAt(i, &f.out[i])
	}
	f.built = true
	return f.out
}

// Ended reports whether row i (RequestID i+1) has ended: it is final, and
// a streaming consumer may take it with RowAt.
func (f *Fold) Ended(i int) bool {
	return i >= 0 && (i < f.gone || i < f.n && f.row(i).terminal != KindNone)
}

// Each calls fn with each folded row in RequestID order, without building
// the whole slice (for streaming a large run out); it stops at fn's first
// error. The row is reused between calls.
func (f *Fold) Each(fn func(*Row) error) error {
	var o Row
	for i := f.gone; i < f.n; i++ {
		f.RowAt(i, &o)
		if err := fn(&o); err != nil {
			return err
		}
	}
	return nil
}

// Len is the number of requests folded so far.
func (f *Fold) Len() int { return f.n }

// RowAt builds row i (RequestID i+1) into o.
func (f *Fold) RowAt(i int, o *Row) {
	f.row(i).build(RequestID(i+1), &f.ct, o)
	if t, ok := f.texts[i]; ok {
		o.Reference, o.Response = t.reference, t.response
	}
}

// Err returns the first life-cycle violation seen, or an error naming the
// first request that never ended, or nil.
func (f *Fold) Err() error {
	if f.err != nil {
		return f.err
	}
	for i := f.gone; i < f.n; i++ { // released rows had ended
		r := f.row(i)
		if r.arrival == Never {
			return fmt.Errorf("request %d: records but no arrival", i+1)
		}
		if r.terminal == KindNone {
			return fmt.Errorf("request %d: never ended", i+1)
		}
	}
	return nil
}

// Violation returns the first life-cycle violation seen, or an error
// naming the first request with records but no arrival, or nil. Unlike Err
// it accepts requests that have not ended yet, as a run cut short (a
// partial journal) has.
func (f *Fold) Violation() error {
	if f.err != nil {
		return f.err
	}
	for i := f.gone; i < f.n; i++ {
		if f.row(i).arrival == Never {
			return fmt.Errorf("request %d: records but no arrival", i+1)
		}
	}
	return nil
}

// Reset empties the fold for reuse, keeping its memory.
func (f *Fold) Reset() {
	f.n, f.gone = 0, 0
	f.out = f.out[:0]
	f.built = false
	f.texts = nil
	f.err = nil
}
