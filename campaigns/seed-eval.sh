#!/usr/bin/env bash
# Reproduce the structure of the published evaluation in simulation:
# chatdoc and mixed x prefix caching off and on x adaptive, Dynamo-model and
# Ray-model arms (12 runs). Writes journals, Parquet, reports and plots into
# OUTDIR (default out/seed-eval) and OUTDIR/evaluation.md. Resumable: a
# finished combination is skipped on a second run (--force reruns it).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-out/seed-eval}
shift || true
mkdir -p "$OUT"
NAME=seed-eval . campaigns/whole-campaign.sh "$@"
make -s build
echo "seed-eval: running experiments into $OUT" >&2
start=$(date +%s)
bin/narwhal-bench run "$@" --out "$OUT" experiments/seed-chatdoc.yaml experiments/seed-mixed.yaml > "$OUT/summary.md"
for dir in "$OUT"/seed-*/cache-*/seed-*; do
	[ -f "$dir/result.json" ] || continue
	if [ ! -f "$dir/report.md" ] || [ "$dir/result.json" -nt "$dir/report.md" ]; then
		echo "seed-eval: report $dir" >&2
		bin/narwhal-report "$dir/runs" --format markdown > "$dir/report.md.tmp"
		mv "$dir/report.md.tmp" "$dir/report.md"
		bin/narwhal-report "$dir/runs" --plots "$dir/plots" > /dev/null
	fi
done
campaigns/evaluation.sh "$OUT" > "$OUT/evaluation.md"
cat "$OUT/summary.md"
echo "seed-eval: done in $(( $(date +%s) - start )) s; see $OUT/evaluation.md" >&2
