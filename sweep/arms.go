package sweep

// ArmHelp is one line about each arm, in the order --help lists them.
var ArmHelp = []struct{ Arm, Help string }{
	{"static:kPmD", "a fixed split: k prefill and m decode engines, k+m = the fleet's size (static:3P5D)"},
	{"static:kPmD/alg1", "the same fixed split, with both legs placed by Algorithm 1 as adaptive and the oracles place them"},
	{"aggregated", "every engine runs prefill and decode in one batch (no disaggregation)"},
	{"hybrid:kPmM", "partly aggregated: k prefill engines, m engines taking both phases (the prefill engines' overflow), k+m = the fleet's size (hybrid:1P7M)"},
	{"adaptive", "the project's role controller: adjacent-split moves scored on projected SLO ratios"},
	{"arrow", "the Arrow paper's reactive Algorithms 1-3"},
	{"planner", "the Narwhal reference's target-state planner"},
	{"coldswap", "the planner, with each move taking the engine offline for 300 s (drain and reprovision)"},
	{"dynamo", "a model of NVIDIA Dynamo Planner (scales by starting workers; refusals and failures modelled)"},
	{"ray", "a model of Ray Serve LLM autoscaling (scales by starting workers)"},
	{"phase-oracle", "the best split per traffic phase, chosen in hindsight (moves free, at phase starts only)"},
	{"oracle", "the hindsight bound: the best split schedule per window found by search, or the best shipped arm where none beats it"},
}
