package event

// Check names the first qualification check a request failed.
type Check uint8

// Checks, in the order Qualify applies them.
const (
	CheckOK        Check = iota
	CheckNotDone         // refused, expired or failed
	CheckLength          // finished at its output cap
	CheckCancelled       // cancelled by the client
	CheckTooShort        // fewer than two output tokens (no TPOT to judge)
	CheckTTFT            // TTFT above its SLO
	CheckTPOT            // TPOT above its SLO
	checkCount
)

// NumChecks is the number of Check values, for arrays indexed by Check.
const NumChecks = int(checkCount)

var checkNames = [...]string{"ok", "not_completed", "length", "cancelled", "too_short", "ttft", "tpot"}

func (c Check) String() string {
	if int(c) < len(checkNames) {
		return checkNames[c]
	}
	return "check?"
}

// SLO is the pair of objectives a request is judged by.
type SLO struct {
	TTFT Time
	TPOT Time
}

// Qualify applies the project's qualification rule to one request: it
// finished naturally (not at the output cap, not cancelled), produced at
// least two tokens, its TTFT measured from the scheduled send time is at or
// below the TTFT SLO, and its TPOT (mean gap after the first token) is at or
// below the TPOT SLO. It returns CheckOK or the first check that failed.
// The rule lives here, beside Row, so the Parquet export and the report
// apply exactly the same one.
func Qualify(r *Row, slo SLO) Check {
	switch {
	case r.Terminal != KindFinish:
		return CheckNotDone
	case r.Cause == CauseLength:
		return CheckLength
	case r.Cause == CauseCancel:
		return CheckCancelled
	case r.OutputTokens < 2:
		return CheckTooShort
	case r.TTFT() > slo.TTFT:
		return CheckTTFT
	case r.TPOT() > slo.TPOT:
		return CheckTPOT
	}
	return CheckOK
}
