#!/usr/bin/env bash
# Chell in action: build, then run unmodified programs (sh, cp, sort) under
#   1. trace mode   - every file operation on the data directory, logged;
#   2. shadow mode  - the same pipeline checked operation by operation against
#                     a shadow copy, then a real divergence caught and reported;
#   3. direct mode  - sort and sqlite3 on tmpfs through memory mappings, with the
#                     handler's counters (chell stat);
#   4. cache mode   - a pool on tmpfs caching a directory on the disk: chelld,
#                     sqlite3 with fsync served by the pool, chell cache stat,
#                     flush and check;
#   5. the benchmark report: interposition overhead (scripts/bench_overhead.py),
#      direct mode against the kernel and raw memcpy (scripts/bench_direct.py),
#      and, as root, cache mode against the page cache of a loop-mounted ext4
#      device (scripts/bench_cache.py).
#
#   scripts/demo.sh              everything (the benchmarks take ~20 minutes)
#   scripts/demo.sh --quick      benchmark with fewer repetitions, no instruction counts
#   scripts/demo.sh --no-bench   skip the benchmark
set -euo pipefail

cd "$(dirname "$0")/.."
REPO=$PWD
BENCH=full
for a in "$@"; do
	case $a in
	--quick) BENCH=quick ;;
	--no-bench) BENCH=none ;;
	-h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "demo.sh: unknown option '$a' (see --help)" >&2; exit 2 ;;
	esac
done

if [[ -t 1 ]]; then B=$'\033[1m' N=$'\033[0m'; else B="" N=""; fi
say() { printf '\n%s== %s%s\n' "$B" "$*" "$N"; }
show() { printf '$ %s\n' "$*"; }
indent() { sed 's/^/    /'; }

say "setup and build (scripts/setup.sh; cmake + ninja in build/)"
scripts/setup.sh
cmake -S . -B build -G Ninja >/dev/null
ninja -C build | tail -1
CHELL=$REPO/build/bin/chell
"$CHELL" version

# Everything happens in a fresh directory on tmpfs, removed at exit.
BASE=$(mktemp -d "${TMPDIR_DEMO:-/dev/shm}/chell-demo-XXXXXX")
trap 'rm -rf "$BASE"' EXIT
DATA=$BASE/data
mkdir -p "$DATA"
# 3000 numbers in a fixed pseudo-random order (awk's seeded generator).
awk 'BEGIN { srand(42); for (i = 1; i <= 3000; i++) print int(rand() * 1000000) }' >"$DATA/numbers.txt"
PIPELINE="cp numbers.txt copy.txt && sort -n copy.txt > sorted.txt && head -n 3 sorted.txt"

# ------------------------------------------------------------------- trace
say "1. trace mode: an unmodified shell pipeline, every operation on $DATA logged"
echo "The pipeline: $PIPELINE"
cd "$DATA"
show "chell run --mode trace --path $DATA --trace-file trace.log -- sh -c '$PIPELINE'"
"$CHELL" run --mode trace --path "$DATA" --trace-file "$BASE/trace.log" -- sh -c "$PIPELINE" | indent
echo "The trace (pid/tid, call, result, time in the handler stack):"
indent <"$BASE/trace.log"
echo "($(wc -l <"$BASE/trace.log") lines; files outside $DATA - the shell, libraries, locales - are not handled and not traced)"

# The result must be what the same pipeline gives without Chell.
sort -n numbers.txt >"$BASE/expected.txt"
cmp "$BASE/expected.txt" sorted.txt
echo "sorted.txt is identical to a plain 'sort -n' run: OK"

# ------------------------------------------------------------------ shadow
say "2. shadow mode: the same pipeline, every operation checked against a shadow copy"
rm -f copy.txt sorted.txt
SHADOW=$BASE/shadow
show "chell run --mode shadow --path $DATA --shadow-dir $SHADOW -- sh -c '$PIPELINE'"
"$CHELL" run --mode shadow --path "$DATA" --shadow-dir "$SHADOW" -- sh -c "$PIPELINE" | indent
echo "exit status 0, no divergence report. Shadow copies (names are the mangled paths):"
for f in numbers.txt copy.txt sorted.txt; do
	copy=$SHADOW/$(printf '%s' "$DATA/$f" | sed 's/%/%25/g; s|/|%2F|g; s/#/%23/g')
	cmp "$DATA/$f" "$copy"
	echo "    $(basename "$copy")  identical to $f ($(wc -c <"$copy") bytes)"
done

say "2b. shadow mode catching a divergence"
cat <<EOF
The shell opens notes.txt under shadow mode and reads its first line. Then a
plain process changes one byte of the *shadow copy* behind Chell's back (the
shadow directory is never routed), so the file and its copy disagree: the
next read sees different bytes, and Chell aborts with a report.
EOF
printf 'first line\nsecond line\n' >notes.txt
NOTES_COPY=$SHADOW/$(printf '%s' "$DATA/notes.txt" | sed 's/%/%25/g; s|/|%2F|g; s/#/%23/g')
SCRIPT="exec 3< notes.txt; read a <&3; echo \"read: \$a\"
printf X | dd of='$NOTES_COPY' bs=1 seek=12 conv=notrunc status=none
read b <&3; echo \"read: \$b\""
show "chell run --mode shadow --path $DATA --shadow-dir $SHADOW -- sh -c '...'"
# Through an inner bash: a shell reports a child killed by a signal
# ("Aborted") on its own stderr, which then lands in div.err, not on screen.
rc=0
bash -c '"$@"; exit $?' demo "$CHELL" run --mode shadow --path "$DATA" --shadow-dir "$SHADOW" \
	-- sh -c "$SCRIPT" >"$BASE/div.out" 2>"$BASE/div.err" || rc=$?
indent <"$BASE/div.out"
echo "exit status $rc (134 = 128 + SIGABRT)"
report=$(ls "$SHADOW"/divergence.*.txt 2>/dev/null | head -1)
if [[ $rc -eq 134 && -n $report ]]; then
	echo "The report ($(basename "$report")), first lines:"
	head -n 14 "$report" | indent
else
	echo "UNEXPECTED: the divergence was not reported; stderr:" >&2
	cat "$BASE/div.err" >&2
	exit 1
fi
cd "$REPO"

# -------------------------------------------------------------- direct mode
say "3. direct mode: the same tools on memory mappings, no system call per read/write"
DDIR=$(mktemp -d /dev/shm/chell-demo-direct.XXXXXX)
trap 'rm -rf "$BASE" "$DDIR"' EXIT
seq 200000 -1 1 > "$DDIR/numbers"
show "chell run --mode direct --path $DDIR --set stats.file=$DDIR/stats.%p.json -- sh -c 'sort -n numbers > sorted; sqlite3 db ...'"
"$REPO/build/bin/chell" run --mode direct --path "$DDIR" --set "stats.file=$DDIR/stats.%p.json" -- \
	sh -c "cd '$DDIR' && sort -n numbers > sorted && sqlite3 db 'create table t(x); insert into t select value from generate_series(1,20000); select count(*), sum(x) from t;'" | indent
cmp -s "$DDIR/sorted" <(sort -n "$DDIR/numbers") && echo "sorted output identical to a plain sort"
show "chell stat $DDIR/stats.*.json"
"$REPO/build/bin/chell" stat "$DDIR"/stats.*.json | indent

# --------------------------------------------------------------- cache mode
say "4. cache mode: a pool on tmpfs in front of a directory on the disk, managed by chelld"
POOL=$(mktemp -d /dev/shm/chell-demo-pool.XXXXXX)
BACK=$(mktemp -d /var/tmp/chell-demo-back.XXXXXX)
trap '"$CHELL" cache stop --pool "$POOL" >/dev/null 2>&1 || true; rm -rf "$BASE" "$DDIR" "$POOL" "$BACK"' EXIT
show "chell cache start --pool $POOL --size 64M --backing $BACK"
"$CHELL" cache start --pool "$POOL" --size 64M --backing "$BACK" | indent
seq 200000 -1 1 > "$BACK/numbers"
SQL="pragma synchronous=full; create table t(x); insert into t select value from generate_series(1,20000); select count(*), sum(x) from t;"
show "chell run --mode cache --set cache.pool=$POOL -- sh -c 'sort -n numbers > sorted; sqlite3 db \"$SQL\"'"
"$CHELL" run --mode cache --set "cache.pool=$POOL" -- \
	sh -c "cd '$BACK' && sort -n numbers > sorted && sqlite3 db '$SQL'" | indent
echo "Hits were memcpy on mapped cache chunks; misses and fsync went to chelld, not to the disk:"
show "chell cache stat --pool $POOL"
"$CHELL" cache stat --pool "$POOL" | indent
show "chell cache flush --pool $POOL      # write the dirty blocks back to $BACK"
"$CHELL" cache flush --pool "$POOL" | indent
cmp -s "$BACK/sorted" <(sort -n "$BACK/numbers") && echo "the backing file now holds the sorted output, identical to a plain sort"
show "chell cache stop --pool $POOL && chell cache check --pool $POOL"
"$CHELL" cache stop --pool "$POOL" | indent
"$CHELL" cache check --pool "$POOL" | indent

# --------------------------------------------------------------- benchmark
case $BENCH in
none)
	say "5. benchmarks: skipped (--no-bench)"
	;;
*)
	ARGS=() DARGS=()
	[[ $BENCH == quick ]] && ARGS=(--reps 3 --no-instructions) && DARGS=(--quick)
	say "5a. interposition overhead (scripts/bench_overhead.py ${ARGS[*]})"
	echo "Cheap calls timed with and without libchell.so preloaded; the table is on stdout,"
	echo "progress on stderr. Results: out/bench/overhead.json and out/bench/overhead.png."
	python3 scripts/bench_overhead.py "${ARGS[@]}"
	say "5b. direct mode against the kernel and raw memcpy (scripts/bench_direct.py ${DARGS[*]})"
	echo "Results: out/bench/direct.json, out/bench/direct.md and out/bench/direct.png."
	python3 scripts/bench_direct.py "${DARGS[@]}"
	if [[ $(id -u) -eq 0 ]]; then
		say "5c. cache mode against the page cache of a slow device (scripts/bench_cache.py ${DARGS[*]})"
		echo "Results: out/bench/cache.json, out/bench/cache.md and out/bench/cache.png."
		python3 scripts/bench_cache.py --out out/bench "${DARGS[@]}"
	else
		say "5c. cache-mode benchmark skipped: it needs root (loop device, cgroups)"
	fi
	;;
esac

say "done"
