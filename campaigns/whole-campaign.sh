# Sourced by the campaign scripts that run a whole campaign and write its
# report (seed-eval.sh, topology-walk.sh): refuse run's flags for a part of
# one. Expects NAME (the script's name) and the script's arguments.
for arg in "$@"; do
	case "$arg" in
	--shard | --shard=* | --summary-only | --summary-only=*)
		echo "$NAME: $arg: this script runs the whole campaign and writes its report; for shards, run bin/narwhal-bench run --shard I/N per task (docs/experiments.md), then this script over the merged output" >&2
		exit 2
		;;
	esac
done
