#!/usr/bin/env bash
# bench/vs-python.sh: issue 12's side-by-side figure. Times, on this machine
# and back to back, the Python reference's demo sweep (athrael-soju/Narwhal's
# `python3 demo/run_demo.py`: 7 static splits, aggregated and Arrow on 8
# instances at 8 rates) and the same sweep here as a whole process
# (`narwhal-sim --trace demo --arms <the 9> --rates <the 8>`, the lean
# binary, and `narwhal-bench sim` with the same flags, alternately), and
# prints both tables, the wall and CPU times and the ratios.
#
#   NARWHAL_REF=/path/to/Narwhal bench/vs-python.sh     (or make bench-vs-python)
#
# NARWHAL_REF is a checkout of athrael-soju/Narwhal (it needs demo/run_demo.py
# and src/narwhal/). Nothing of it is copied into this repository. Knobs:
# BIN (default bin/narwhal-bench) and SIM (default bin/narwhal-sim), GO_RUNS
# (default 20 of each), PY_RUNS (default 1),
# PYTHON (default python3), ARMS_LAST (the controller arm, default adaptive;
# `arrow` is this project's Arrow-only controller).
set -eu

if [ -z "${NARWHAL_REF:-}" ]; then
	echo "bench/vs-python.sh: set NARWHAL_REF to a checkout of athrael-soju/Narwhal," >&2
	echo "  e.g. make bench-vs-python NARWHAL_REF=\$HOME/src/Narwhal" >&2
	exit 2
fi
if [ ! -f "$NARWHAL_REF/demo/run_demo.py" ] || [ ! -d "$NARWHAL_REF/src/narwhal" ]; then
	echo "bench/vs-python.sh: NARWHAL_REF=$NARWHAL_REF has no demo/run_demo.py and src/narwhal/;" >&2
	echo "  it must be a checkout of athrael-soju/Narwhal" >&2
	exit 2
fi

BIN=${BIN:-bin/narwhal-bench}
SIM=${SIM:-bin/narwhal-sim}
GO_RUNS=${GO_RUNS:-20}
PY_RUNS=${PY_RUNS:-1}
PYTHON=${PYTHON:-python3}
ARMS_LAST=${ARMS_LAST:-adaptive}
RATES=0.6,1.0,1.6,2.4,3.2,4.4,5.4,6.4
ARMS=static:1P7D,static:2P6D,static:3P5D,static:4P4D,static:5P3D,static:6P2D,static:7P1D,aggregated,$ARMS_LAST

for b in "$BIN" "$SIM"; do
	if [ ! -x "$b" ]; then
		echo "bench/vs-python.sh: $b not built (make build)" >&2
		exit 2
	fi
done
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
SIM=$(cd "$(dirname "$SIM")" && pwd)/$(basename "$SIM")

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Wall seconds to the microsecond (bash's EPOCHREALTIME around the command:
# one fork and exec, no subshell, inside the interval), then user and system seconds (bash's `time`, to the
# millisecond); the command's own output goes to $out.
TIMEFORMAT='%3U %3S'
timed() { # timed OUTFILE TIMESFILE CMD...
	local out=$1 times=$2 t0 t1 cpu
	shift 2
	t0=$EPOCHREALTIME
	{ time "$@" >"$out" 2>&1; } 2>"$times.last"
	t1=$EPOCHREALTIME
	read -r cpu <"$times.last"
	awk -v a="$t0" -v b="$t1" -v c="$cpu" 'BEGIN { printf "%.6f %s\n", b - a, c }' >>"$times"
}

# Least and median of column $1 of a file of numbers.
least() { awk -v c="$1" '{print $c}' "$2" | sort -g | head -n 1; }
median() {
	awk -v c="$1" '{print $c}' "$2" | sort -g | awk '{v[NR]=$1} END {
		if (NR % 2) print v[(NR+1)/2]; else printf "%.6f\n", (v[NR/2]+v[NR/2+1])/2 }'
}
cpu() { awk '{printf "%.3f\n", $2+$3}' "$1" >"$1.cpu"; }

ref_commit=$(git -C "$NARWHAL_REF" rev-parse --short HEAD 2>/dev/null || echo "not a git checkout: ${NARWHAL_REF_COMMIT:-commit unknown}")
echo "machine:   $(nproc 2>/dev/null || echo '?') cores, $(uname -sm); $(uptime | sed 's/.*load/load/')"
echo "reference: $NARWHAL_REF ($ref_commit), $("$PYTHON" --version 2>&1)"
echo "ours:      $BIN ($(git rev-parse --short HEAD 2>/dev/null || echo '?')), $(go version 2>/dev/null | awk '{print $3}' || true)"
echo

# The reference, whole process: it writes its profile files under runs/ of
# its own checkout, as it does when run by hand.
for _ in $(seq "$PY_RUNS"); do
	(cd "$NARWHAL_REF" && timed "$tmp/py.out" "$tmp/py.times" "$PYTHON" demo/run_demo.py)
done
echo "load after the reference: $(uptime | sed 's/.*load average: //')"
# This sweep, whole process, GO_RUNS times each way, alternately.
for _ in $(seq "$GO_RUNS"); do
	timed "$tmp/go.out" "$tmp/go.times" "$SIM" --trace demo --arms "$ARMS" --rates "$RATES"
	timed "$tmp/full.out" "$tmp/full.times" "$BIN" sim --trace demo --arms "$ARMS" --rates "$RATES"
done
if ! cmp -s "$tmp/go.out" "$tmp/full.out"; then
	echo "bench/vs-python.sh: narwhal-sim and narwhal-bench sim printed different tables" >&2
	exit 1
fi
echo "load after ours:          $(uptime | sed 's/.*load average: //')"
echo

echo "== reference: $PYTHON demo/run_demo.py"
cat "$tmp/py.out"
echo
echo "== ours: narwhal-sim --trace demo --arms $ARMS --rates $RATES (narwhal-bench sim printed the same)"
cat "$tmp/go.out"
echo

cpu "$tmp/py.times"
cpu "$tmp/go.times"
cpu "$tmp/full.times"
py_best=$(least 1 "$tmp/py.times")
py_med=$(median 1 "$tmp/py.times")
py_cpu=$(median 1 "$tmp/py.times.cpu")
go_best=$(least 1 "$tmp/go.times")
go_med=$(median 1 "$tmp/go.times")
go_cpu=$(median 1 "$tmp/go.times.cpu")
go_cpu_best=$(least 1 "$tmp/go.times.cpu")
full_best=$(least 1 "$tmp/full.times")
full_med=$(median 1 "$tmp/full.times")
full_cpu=$(median 1 "$tmp/full.times.cpu")

echo "== headline"
grep -E '^arrow sustains|^no static split' "$tmp/py.out" | sed 's/^/reference: /'
grep -E "^$ARMS_LAST sustains|^best static split" "$tmp/go.out" | sed 's/^/ours:      /'
echo
echo "== times (seconds; wall, and CPU = user + system)"
printf 'reference, %s run(s):  wall %s least, %s median; CPU %s median\n' "$PY_RUNS" "$py_best" "$py_med" "$py_cpu"
printf 'narwhal-sim, %s runs:   wall %s least, %s median; CPU %s least, %s median\n' "$GO_RUNS" "$go_best" "$go_med" "$go_cpu_best" "$go_cpu"
printf 'narwhal-bench sim, %s:  wall %s least, %s median; CPU %s median\n' "$GO_RUNS" "$full_best" "$full_med" "$full_cpu"
awk -v pb="$py_best" -v pm="$py_med" -v gb="$go_best" -v gm="$go_med" -v pc="$py_cpu" -v gc="$go_cpu" -v fb="$full_best" -v fm="$full_med" -v fc="$full_cpu" 'BEGIN {
	printf "ratio, wall, narwhal-sim:       %.0fx (least against least), %.0fx (median against median)\n", pb/gb, pm/gm
	printf "ratio, wall, narwhal-bench sim: %.0fx (least against least), %.0fx (median against median)\n", pb/fb, pm/fm
	printf "ratio, CPU:  %.0fx narwhal-sim, %.0fx narwhal-bench sim (median against median)\n", pc/gc, pc/fc
}'
