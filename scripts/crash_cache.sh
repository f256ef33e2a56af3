#!/usr/bin/env bash
# The long cache-mode crash run of the closing note: SIGKILL writers and the
# cache manager at random points, then verify every fsync'd byte through the
# cache, through the kernel after write-back, and through a restarted manager
# (tests/system/test_cache_crash.py, docs/CRASH_TESTING.md).
#
#   scripts/crash_cache.sh [KILLS] [SEED]      (defaults 1200 and 5)
#
# Needs a build in build/ (or $CHELL_BUILD_DIR). Prints the number of kill
# points, of manager kills and the checker's summary.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
case ${1:-} in -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
export CHELL_CACHE_KILLS=${1:-1200} CHELL_CACHE_SEED=${2:-5}
exec python3 -m pytest -q -s "$repo/tests/system/test_cache_crash.py" \
	-k every_fsynced_byte
