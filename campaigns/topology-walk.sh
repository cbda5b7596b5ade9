#!/usr/bin/env bash
# Every arm on demo, chatdoc, mixed and the Azure 2023 traces played code
# then conversation (a phase shift nobody here designed), on a rate grid,
# with the hindsight oracle. Writes journals, Parquet, reports and plots
# into OUTDIR (default out/topology-walk). Resumable.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-out/topology-walk}
shift || true
mkdir -p "$OUT"
NAME=topology-walk . campaigns/whole-campaign.sh "$@"
make -s build
start=$(date +%s)
bin/narwhal-bench run "$@" --out "$OUT" experiments/topology-demo.yaml experiments/topology-chatdoc.yaml \
	experiments/topology-mixed.yaml experiments/topology-azure.yaml > "$OUT/summary.md"
for dir in "$OUT"/topology-*/cache-*/seed-*; do
	[ -f "$dir/result.json" ] || continue
	if [ ! -f "$dir/report.md" ] || [ "$dir/result.json" -nt "$dir/report.md" ]; then
		echo "topology-walk: report $dir" >&2
		bin/narwhal-report "$dir/runs" --format markdown > "$dir/report.md.tmp"
		mv "$dir/report.md.tmp" "$dir/report.md"
		bin/narwhal-report "$dir/runs" --plots "$dir/plots" > /dev/null
	fi
	echo "== $dir" ; cat "$dir/table.txt"
done
echo "topology-walk: done in $(( $(date +%s) - start )) s" >&2
