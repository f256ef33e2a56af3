#!/usr/bin/env bash
# Build the persistence core's fuzz target with clang + libFuzzer and run it
# for a bounded time.
#
#   scripts/fuzz.sh [--seconds N] [--target NAME] [--build-only]
#
#   --seconds N   how long to fuzz (default 60)
#   --target      fuzz target in tests/fuzz: region_open (default),
#                 cache_pool (meta.pool images and chunk control pages) or
#                 warp_patterns (WARP's patterns file)
#                 pvm_pool (pVM pool images)
#                 modes_state (chelld's modes.state)
#   --build-only  build out/fuzz/fuzz_<target> and stop
#
# The library is compiled by CMake into build-fuzz/ with
# -fsanitize=fuzzer-no-link,address,undefined (coverage for libFuzzer, ASan,
# UBSan), the target is linked with -fsanitize=fuzzer. It starts from the
# committed seeds (tests/fuzz/corpus/<target>/, never written to) and keeps
# what it discovers in out/fuzz/corpus-<target>/; a finding is written to
# out/fuzz/crash-* (add it to the seed directory once fixed: the ctest
# regression runner then replays it in every CI run).
#
# Exit: libFuzzer's status (0: no finding within the time), 2 on usage or
# build errors. The last line says how many inputs were executed.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
seconds=60
target=region_open
build_only=0
while [[ $# -gt 0 ]]; do
	case $1 in
	--seconds) seconds=${2:?--seconds needs a number}; shift ;;
	--target) target=${2:?--target needs a name}; shift ;;
	--build-only) build_only=1 ;;
	-h | --help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "fuzz.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
	esac
	shift
done
[[ $seconds =~ ^[0-9]+$ && $seconds -gt 0 ]] || { echo "fuzz.sh: --seconds needs a positive number" >&2; exit 2; }
src=$repo/tests/fuzz/fuzz_$target.c
seeds=$repo/tests/fuzz/corpus/$target
[[ -f $src ]] || { echo "fuzz.sh: no target $src" >&2; exit 2; }
command -v clang >/dev/null || { echo "fuzz.sh: clang not found (scripts/setup.sh installs it)" >&2; exit 2; }

out=$repo/out/fuzz
bdir=$repo/build-fuzz
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
mkdir -p "$out"

# The libraries each target needs, in link order, and its include dirs.
libs=(chell_pmem)
incs=()
if [[ $target == cache_pool ]]; then
	libs=(chell_cache_verify chelld_pool chell_cachemeta chell_cachepolicy chell_pmem)
	incs=(-I"$repo/src/cli" -I"$repo/src/cache/meta")
elif [[ $target == warp_patterns ]]; then
	libs=(chell_warp_brain chell_pmem)
	incs=(-I"$repo/src/handlers/warp")
elif [[ $target == pvm_pool ]]; then
	libs=(chell_pvm_static chell_pmem)
elif [[ $target == modes_state ]]; then
	libs=(chelld_modes_state)
fi
echo "fuzz.sh: building ${libs[*]} with clang in $bdir" >&2
if ! { cmake -S "$repo" -B "$bdir" -G Ninja -DCMAKE_C_COMPILER=clang \
	-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHELL_TESTS=OFF \
	-DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link $san" >"$out/cmake.log" 2>&1 &&
	ninja -C "$bdir" "${libs[@]}" >"$out/ninja.log" 2>&1; }; then
	echo "fuzz.sh: build failed, see $out/cmake.log and $out/ninja.log" >&2
	tail -20 "$out/ninja.log" >&2 || true
	exit 2
fi
bin=$out/fuzz_$target
archives=()
for l in "${libs[@]}"; do archives+=("$bdir/lib/lib$l.a"); done
# shellcheck disable=SC2086 # $san is a list of flags
clang -g -O1 -std=gnu11 -D_GNU_SOURCE -fsanitize=fuzzer $san \
	-I"$repo/include" -I"$repo/src" "${incs[@]}" "$src" "${archives[@]}" \
	-lpthread -lm -o "$bin" ||
	{ echo "fuzz.sh: linking $bin failed" >&2; exit 2; }
[[ $build_only == 1 ]] && { echo "$bin"; exit 0; }

work=$out/corpus-$target
mkdir -p "$work"
log=$out/fuzz_$target.log
echo "fuzz.sh: fuzzing $target for ${seconds}s (seeds: ${seeds#$repo/}, log: ${log#$repo/})" >&2
set +e
# halt_on_error/abort_on_error: a sanitizer report is a finding libFuzzer
# records (crash-* file) and stops on. detect_leaks stays on.
ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:halt_on_error=1} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
	"$bin" -max_total_time="$seconds" -timeout=10 -print_final_stats=1 \
	-artifact_prefix="$out/" "$work" "$seeds" >"$log" 2>&1
rc=$?
set -e
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
if [[ $rc -ne 0 ]]; then
	echo "fuzz.sh: libFuzzer exited $rc; the end of its log:" >&2
	tail -40 "$log" >&2
fi
echo "fuzz.sh: $target: ${execs:-0} executions in ${seconds}s, exit $rc," \
	"corpus $(find "$work" -type f | wc -l) files in ${work#$repo/}"
exit $rc
