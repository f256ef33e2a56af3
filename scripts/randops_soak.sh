#!/usr/bin/env bash
# Long random-operation soak of one Chell mode against the kernel (outside CI).
#
#   scripts/randops_soak.sh --mode direct|cache|posix|trace|shadow --ops N
#                           [--seed S] [--segment N] [--max-divergences D]
#                           [--under-test direct|cache|trace|warp]
#                           [--keep] [-- GENERATOR ARGS]
#
#   --mode M     the mode under test (direct and cache are what issue 9 asks for)
#   --under-test U  with --mode shadow: the stack the shadow checks (every
#                operation also runs on a kernel copy and must agree), as
#                `chell run --shadow-under-test U`; cache starts a chelld
#   --ops N      operations in total (e.g. 1000000); K and M suffixes work
#   --seed S     first seed (default 1); segment i runs seed S+i
#   --segment N  operations per generator run (default 100000): a divergence
#                ends its run (the generator stops at the first one), the
#                soak goes on with the next seed, so one finding does not
#                hide the others
#   --max-divergences D  stop after D failed segments (default 10)
#   --keep       keep the data directories (default: removed on success)
#   after --     extra chell_randops arguments, e.g. --no-rwf --files 8
#
# Each segment runs tests/progs/chell_randops under `chell run --mode M` on
# its own directory: /dev/shm for posix, trace, shadow and direct; under the
# backing directory of a private chelld (pool in /dev/shm, 8M, so chunks are
# evicted; backing in /tmp) for cache. The generator checks every operation
# against its own model of the kernel; its RWF answers come from a plain
# `chell_randops --probe` in the same directory (Chell cannot be escaped
# from inside: it re-adds itself to every exec).
#
# Output: a progress line per 10% of each segment, one line per segment
# (ok, or FAIL with the generator's message and a reproducer), and at the
# end "randops soak: mode=M ops=DONE divergences=D". Exit 0 iff D == 0.
# Uses $CHELL_BUILD_DIR or <repo>/build.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
build=${CHELL_BUILD_DIR:-$repo/build}
chell=$build/bin/chell
gen=$build/bin/chell_randops
mode=
ops=
seed=1
segment=100000
maxdiv=10
under=
keep=0
extra=()

num() { # 20000, 20K, 1M
	local v=$1
	case $v in
	*K) v=$((${v%K} * 1000)) ;;
	*M) v=$((${v%M} * 1000000)) ;;
	esac
	[[ $v =~ ^[0-9]+$ && $v -gt 0 ]] || { echo "randops_soak.sh: '$1' is not a positive number" >&2; exit 2; }
	echo "$v"
}

while [[ $# -gt 0 ]]; do
	case $1 in
	--mode) mode=${2:?--mode needs a mode}; shift ;;
	--ops) ops=$(num "${2:?--ops needs a number}"); shift ;;
	--seed) seed=$(num "${2:?--seed needs a number}"); shift ;;
	--segment) segment=$(num "${2:?--segment needs a number}"); shift ;;
	--max-divergences) maxdiv=$(num "${2:?--max-divergences needs a number}"); shift ;;
	--under-test) under=${2:?--under-test needs a stack}; shift ;;
	--keep) keep=1 ;;
	--) shift; extra=("$@"); break ;;
	-h | --help) sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "randops_soak.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
	esac
	shift
done
case $mode in
posix | trace | shadow | direct | cache) ;;
*) echo "randops_soak.sh: --mode must be one of posix, trace, shadow, direct, cache" >&2; exit 2 ;;
esac
case $under in
'') ;;
direct | cache | trace | warp) [[ $mode == shadow ]] || { echo "randops_soak.sh: --under-test goes with --mode shadow" >&2; exit 2; } ;;
*) echo "randops_soak.sh: --under-test must be one of direct, cache, trace, warp" >&2; exit 2 ;;
esac
[[ -n $ops ]] || { echo "randops_soak.sh: --ops is required" >&2; exit 2; }
[[ -x $chell && -x $gen ]] || { echo "randops_soak.sh: $chell or $gen not built" >&2; exit 2; }

work=$(mktemp -d /dev/shm/chell-soak-XXXXXX)
pool= backing=
cleanup() {
	if [[ -n $pool ]]; then
		"$chell" cache stop --pool "$pool" >/dev/null 2>&1 || true
		rm -rf "$pool"
	fi
	if [[ $keep == 0 ]]; then
		rm -rf "$work"
		[[ -n $backing ]] && rm -rf "$backing"
	fi
	return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cli=()
uses_cache=0
[[ $mode == cache || $under == cache ]] && uses_cache=1
if ((uses_cache)); then
	pool=$(mktemp -d /dev/shm/chell-soak-pool-XXXXXX)
	backing=$(mktemp -d /tmp/chell-soak-back-XXXXXX)
	"$chell" cache start --pool "$pool" --size 8M --backing "$backing" >/dev/null
	cli=(--set "cache.pool=$pool" --set "cache.backing=$backing")
fi

done_ops=0
div=0
i=0
echo "randops soak: mode=$mode${under:+ under-test=$under} ops=$ops seed=$seed segment=$segment${extra[*]:+ extra: ${extra[*]}}"
while ((done_ops < ops)); do
	s=$((seed + i))
	n=$((ops - done_ops < segment ? ops - done_ops : segment))
	if ((uses_cache)); then
		data=$backing/s$s
	else
		data=$work/s$s
	fi
	mkdir -p "$data"
	run=(--mode "$mode" --path "$data")
	[[ $mode == shadow ]] && mkdir -p "$work/shadow$s" && run+=(--shadow-dir "$work/shadow$s")
	[[ -n $under ]] && run+=(--shadow-under-test "$under")
	[[ $mode == trace ]] && mkdir -p "$work/trace$s" && run+=(--trace-file "$work/trace$s/trace.%p")
	kernel=$("$gen" --probe --dir "$data")
	args=(--seed "$s" --ops "$n" --dir "$data" --progress $(((n + 9) / 10)) "${extra[@]}")
	argv=("$gen" "${args[@]}" --kernel "$kernel")
	log=$work/seg$s.log
	set +e
	: >"$log" # before tail opens it: the job's own redirection may come later (a loaded machine)
	"$chell" run "${run[@]}" "${cli[@]}" -- "${argv[@]}" >"$log.out" 2>"$log" &
	pid=$!
	# the generator's progress lines, as they come
	tail -n +1 -f --pid=$pid "$log" 2>/dev/null | grep --line-buffered '^randops: progress' |
		sed -u "s/^randops: progress/  seed $s: progress/"
	wait $pid
	rc=$?
	set -e
	summary=$(grep -E '^randops: seed=.* done=' "$log.out" || true)
	if [[ $rc == 0 && -n $summary ]] && ! grep -q DIVERGENCE "$log"; then
		got=$(sed -E 's/.* done=([0-9]+).*/\1/' <<<"$summary")
		echo "  seed $s: ok, $got operations"
	else
		div=$((div + 1))
		# the failing operation's number: where this segment stopped
		got=$(grep -oE 'FAIL \[[^]]* op [0-9]+\]' "$log" | head -1 | grep -oE '[0-9]+\]$' | tr -d ']' || true)
		got=${got:-0}
		msg=$(grep -E 'randops: FAIL \[|DIVERGENCE' "$log" | head -1 || true)
		echo "  seed $s: DIVERGENCE after $got operations (exit $rc): ${msg:-see $log}"
		cmd=$(printf '%q ' "$chell" run "${run[@]}" "${cli[@]}" -- "$gen" "${args[@]}")
		echo "    reproduce${pool:+ (with a chelld serving $pool in front of $backing)}:"
		echo "      rm -rf $data && mkdir -p $data && $cmd--kernel \"\$($gen --probe --dir $data)\""
		keep=1
	fi
	done_ops=$((done_ops + got))
	if ((got == 0 && rc != 0)); then
		done_ops=$((done_ops + 1)) # never loop on a segment that fails at once
	fi
	i=$((i + 1))
	if ((div >= maxdiv && done_ops < ops)); then
		echo "randops soak: stopping after $div divergences (--max-divergences)"
		break
	fi
done
echo "randops soak: mode=$mode${under:+ under-test=$under} ops=$done_ops divergences=$div"
[[ $div == 0 ]]
