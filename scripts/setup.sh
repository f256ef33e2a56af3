#!/usr/bin/env bash
# Install what building and testing Chell needs on a fresh Debian 12 machine.
#
# Idempotent: every package is checked first (dpkg -s, a Python import), so a
# second run makes no network access and takes well under a second.
#
#   scripts/setup.sh            install what is missing
#   scripts/setup.sh --check    only report what is missing (exit 1 if anything is)
set -euo pipefail

CHECK_ONLY=0
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
	sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
	exit 0
elif [[ ${1:-} == --check ]]; then
	CHECK_ONLY=1
elif [[ $# -gt 0 ]]; then
	echo "usage: $0 [--check]" >&2
	exit 2
fi

# Build: cmake, ninja, gcc (the default compiler; its libasan/libubsan serve
# the sanitizer build), clang (second compiler), pkg-config (checks chell.pc),
# make (builds examples/upper against an installed Chell, test_registry.py).
# Tests: libcmocka-dev (C unit tests); the programs the system tests run
# (coreutils, tar, gzip, sqlite3), strace (counts system calls in test_cache.py);
# fio for the storage benchmarks.
# Workload suite and WARP (issue 11): postmark, dbench and sysbench are real
# programs the suite runs; liburing-dev for io_uring device I/O.
# pVM (issue 12): libjemalloc-dev (the tiered heap's allocator), libnuma-dev
# (CPU-less NUMA nodes as the slow tier), libleveldb-dev and libsnappy-dev
# (the key-value and Snappy baselines).
# Cache mode at scale (issue 13): glusterfs-server (glusterd, a brick and the
# FUSE client on loopback: the distributed backing store, scripts/gluster.sh).
# Benchmark: valgrind (callgrind instruction counts in scripts/bench_overhead.py;
# without it the script skips that column) and git (records the commit).
APT_PACKAGES=(
	cmake ninja-build gcc clang pkg-config make libcmocka-dev
	coreutils tar gzip sqlite3 fio valgrind git strace
	libsqlite3-dev libdb-dev libpmemobj-dev libclang-rt-14-dev python3
	postmark dbench sysbench liburing-dev
	libjemalloc-dev libnuma-dev libleveldb-dev libsnappy-dev
	glusterfs-server
)
# pytest runs the system tests; matplotlib draws the benchmark plots.
PY_MODULES=(pytest matplotlib)

missing_apt=()
for p in "${APT_PACKAGES[@]}"; do
	# "install ok installed" only: a removed package leaves "deinstall ok config-files".
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing_apt+=("$p")
	fi
done

if ! command -v python3 >/dev/null 2>&1; then
	missing_apt+=(python3 python3-pip)
	PY=""
else
	PY=python3
fi

missing_py=()
if [[ -n $PY ]]; then
	for m in "${PY_MODULES[@]}"; do
		# find_spec, not import: importing matplotlib costs a second or two.
		if ! "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$m') is None)" >/dev/null 2>&1; then
			missing_py+=("$m")
		fi
	done
else
	missing_py=("${PY_MODULES[@]}")
fi

if [[ $CHECK_ONLY == 1 ]]; then
	[[ ${#missing_apt[@]} -eq 0 ]] || echo "missing packages: ${missing_apt[*]}"
	[[ ${#missing_py[@]} -eq 0 ]] || echo "missing python modules: ${missing_py[*]}"
	[[ ${#missing_apt[@]} -eq 0 && ${#missing_py[@]} -eq 0 ]]
	exit
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
	SUDO=(sudo)
fi

if [[ ${#missing_apt[@]} -gt 0 ]]; then
	echo "setup: installing ${missing_apt[*]}"
	export DEBIAN_FRONTEND=noninteractive
	"${SUDO[@]}" apt-get update -qq
	"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing_apt[@]}" >/dev/null
	PY=python3
fi

if [[ ${#missing_py[@]} -gt 0 ]]; then
	echo "setup: installing python modules ${missing_py[*]}"
	# python3 -m pip: the interpreter that runs the tests gets the modules
	# (on this machine that is pyenv's python, not Debian's).
	"$PY" -m pip install --quiet "${missing_py[@]}"
fi

echo "setup: build and test dependencies present"
