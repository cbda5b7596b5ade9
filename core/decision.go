package core

import (
	"math"
	"strconv"
)

// The controllers' decision records: typed payloads the core journals as
// JSON (View.Decide), one struct per controller. Field names are the JSON
// keys the report and users read; Controller comes first in each.

// Ratio is a score, load or rate in a decision record: written with four
// decimals, infinities and NaN as 1e9 (JSON has no infinity).
type Ratio float64

// MarshalJSON implements json.Marshaler.
func (r Ratio) MarshalJSON() ([]byte, error) {
	x := float64(r)
	if math.IsInf(x, 0) || math.IsNaN(x) {
		return []byte("1e9"), nil
	}
	return strconv.AppendFloat(nil, x, 'f', 4, 64), nil
}

// splitName spells p prefill and d decode instances as "pPdD".
func splitName(p, d int) string {
	return strconv.Itoa(p) + "P" + strconv.Itoa(d) + "D"
}

// AdaptiveDecision is one pass of the adaptive controller: the demand it
// read, the neighbouring splits it scored, and what it chose.
type AdaptiveDecision struct {
	Controller  string `json:"controller"`
	Split       string `json:"split"`
	Rate        Ratio  `json:"rate"`
	PrefillLoad Ratio  `json:"prefill_load"`
	DecodeSteps Ratio  `json:"decode_steps"`
	ShortWindow bool   `json:"short_window"`
	// Candidates are the splits scored (p-1, p, p+1), empty in warm-up.
	Candidates []SplitCandidate `json:"candidates"`
	// Choice is "stay", "propose kPmD" or "move kPmD".
	Choice string `json:"choice"`
	Why    string `json:"why"`
}

// SplitCandidate is one split's projected SLO ratios.
type SplitCandidate struct {
	P     int   `json:"p"`
	TTFT  Ratio `json:"ttft"`
	TPOT  Ratio `json:"tpot"`
	Score Ratio `json:"score"`
}

// ArrowDecision is one monitoring pass of Arrow's Algorithm 2.
type ArrowDecision struct {
	Controller  string `json:"controller"`
	PrefillLoad Ratio  `json:"prefill_load"`
	DecodeLoad  Ratio  `json:"decode_load"`
	Sustained   int    `json:"sustained"`
	Split       string `json:"split"`
	Choice      string `json:"choice"`
}

// PlannerDecision is one plan of the target-state planner (and coldswap).
type PlannerDecision struct {
	Controller    string `json:"controller"`
	Split         string `json:"split"`
	PrefillDemand Ratio  `json:"prefill_demand"`
	DecodeDemand  Ratio  `json:"decode_demand"`
	// Want is the prefill pool size asked for, 0 for none.
	Want int    `json:"want"`
	Why  string `json:"why"`
}

// ScheduleDecision is one step of a fixed schedule (the oracle).
type ScheduleDecision struct {
	Controller string `json:"controller"`
	Split      string `json:"split"`
	Want       string `json:"want"`
	Why        string `json:"why"`
}

// DynamoDecision is one throughput-mode plan of the Dynamo Planner model.
type DynamoDecision struct {
	Controller string `json:"controller"`
	Mode       string `json:"mode"`
	Split      string `json:"split"`
	Want       int    `json:"want"`
	Why        string `json:"why"`
}

// RayDecision is one autoscaling pass of the Ray Serve LLM model over one
// deployment.
type RayDecision struct {
	Controller string `json:"controller"`
	Deployment string `json:"deployment"`
	Replicas   int    `json:"replicas"`
	OngoingAvg Ratio  `json:"ongoing_avg"`
	Desired    int    `json:"desired"`
}
