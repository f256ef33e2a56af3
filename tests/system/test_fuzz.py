"""scripts/fuzz.sh: the libFuzzer builds of fuzz_region_open and
fuzz_cache_pool run, starting from the committed seeds, for a bounded time
without a finding.

Short (20 s of fuzzing plus the clang build of the library) because it runs
in every CI pass; longer campaigns are `scripts/fuzz.sh --seconds N`. The
seed corpora themselves are replayed by ctest (fuzz_*_corpus).
"""
import re
import subprocess

from conftest import REPO

SECONDS = 20


def test_fuzz_region_open_runs_clean():
    r = subprocess.run([str(REPO / "scripts" / "fuzz.sh"), "--seconds", str(SECONDS)],
                       capture_output=True, text=True, timeout=SECONDS + 240)
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    m = re.search(r"region_open: (\d+) executions in", r.stdout)
    assert m, r.stdout + r.stderr[-2000:]
    assert int(m.group(1)) > 0


CACHE_POOL_SECONDS = 10


def test_fuzz_cache_pool_runs_clean():
    """meta.pool images and chunk control pages (`chell cache check`'s code)."""
    r = subprocess.run([str(REPO / "scripts" / "fuzz.sh"), "--target", "cache_pool", "--seconds",
                        str(CACHE_POOL_SECONDS)],
                       capture_output=True, text=True, timeout=CACHE_POOL_SECONDS + 240)
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    m = re.search(r"cache_pool: (\d+) executions in", r.stdout)
    assert m, r.stdout + r.stderr[-2000:]
    assert int(m.group(1)) > 0


WARP_PATTERNS_SECONDS = 10


def test_fuzz_warp_patterns_runs_clean():
    """WARP's patterns file (opener, loads, stores: src/handlers/warp/patterns.c)."""
    r = subprocess.run([str(REPO / "scripts" / "fuzz.sh"), "--target", "warp_patterns", "--seconds",
                        str(WARP_PATTERNS_SECONDS)],
                       capture_output=True, text=True, timeout=WARP_PATTERNS_SECONDS + 240)
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    m = re.search(r"warp_patterns: (\d+) executions in", r.stdout)
    assert m, r.stdout + r.stderr[-2000:]
    assert int(m.group(1)) > 0


MODES_STATE_SECONDS = 5


def test_fuzz_modes_state_runs_clean():
    """chelld's modes.state (the run-time mode switches and pins: loader,
    save, load again; src/chelld/modes_state.c)."""
    r = subprocess.run([str(REPO / "scripts" / "fuzz.sh"), "--target", "modes_state", "--seconds",
                        str(MODES_STATE_SECONDS)],
                       capture_output=True, text=True, timeout=MODES_STATE_SECONDS + 240)
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    m = re.search(r"modes_state: (\d+) executions in", r.stdout)
    assert m, r.stdout + r.stderr[-2000:]
    assert int(m.group(1)) > 0
