#!/usr/bin/env bash
# Run every benchmark driver that exists, one after the other (never in
# parallel: each one times things on a 2-core machine), into one output dir.
#
#   scripts/bench.sh [--quick] [--build build] [--out out/bench]
#
# Drivers: scripts/bench_overhead.py (interposition cost, out/overhead.*) and
# scripts/bench_direct.py (direct mode vs kernel vs memcpy, out/direct.*) and
# scripts/bench_pmem.py (transaction commit latency vs libpmemobj, out/pmem.*)
# and, as root, scripts/bench_cache.py (cache mode vs the page cache of a
# loop-mounted slow device, out/cache.*).
# --quick shortens each of them (fewer repetitions, no callgrind counts).
# Timing targets are reported by the drivers, never enforced: the exit
# status is non-zero only if a driver itself failed (or the build is missing).
set -uo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
build=$repo/build
out=$repo/out/bench
quick=0
while [[ $# -gt 0 ]]; do
	case $1 in
	--quick) quick=1 ;;
	--build) build=${2:?--build needs a directory}; shift ;;
	--out) out=${2:?--out needs a directory}; shift ;;
	-h|--help) sed -n '2,14p' "$0"; exit 0 ;;
	*) echo "usage: $0 [--quick] [--build DIR] [--out DIR]" >&2; exit 2 ;;
	esac
	shift
done

if [[ ! -x $build/bin/chell || ! -e $build/lib/libchell.so ]]; then
	echo "bench.sh: $build has no chell build (cmake -S . -B build -G Ninja && ninja -C build)" >&2
	exit 2
fi
mkdir -p "$out"

declare -a ran=() failed=()
run() { # name, command...
	local name=$1; shift
	echo "=== $name: $*" >&2
	local t0=$SECONDS
	if "$@"; then
		ran+=("$name ($((SECONDS - t0)) s)")
	else
		failed+=("$name (exit $?)")
	fi
}

if [[ -f $repo/scripts/bench_overhead.py ]]; then
	args=(--build "$build" --out "$out")
	((quick)) && args+=(--reps 3 --batches 5 --no-instructions)
	run overhead python3 "$repo/scripts/bench_overhead.py" "${args[@]}"
fi
if [[ -f $repo/scripts/bench_direct.py ]]; then
	args=(--build "$build" --out "$out")
	((quick)) && args+=(--quick)
	run direct python3 "$repo/scripts/bench_direct.py" "${args[@]}"
fi
if [[ -f $repo/scripts/bench_pmem.py ]]; then
	args=(--build "$build" --out "$out")
	((quick)) && args+=(--quick)
	run pmem python3 "$repo/scripts/bench_pmem.py" "${args[@]}"
fi

if [[ -f $repo/scripts/bench_cache.py && $(id -u) -eq 0 ]]; then
	args=(--build "$build" --out "$out")
	((quick)) && args+=(--quick)
	run cache python3 "$repo/scripts/bench_cache.py" "${args[@]}"
fi

echo "=== bench.sh: ran: ${ran[*]:-none}; failed: ${failed[*]:-none}; results in $out" >&2
[[ ${#failed[@]} -eq 0 ]]
