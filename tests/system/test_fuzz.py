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


def fuzz_runs_clean(target, seconds):
    """scripts/fuzz.sh on one target: no finding, and inputs were run."""
    argv = [str(REPO / "scripts" / "fuzz.sh"), "--seconds", str(seconds)]
    if target != "region_open":
        argv += ["--target", target]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 240)
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    m = re.search(rf"{target}: (\d+) executions in", r.stdout)
    assert m, r.stdout + r.stderr[-2000:]
    assert int(m.group(1)) > 0


def test_fuzz_region_open_runs_clean():
    fuzz_runs_clean("region_open", SECONDS)


def test_fuzz_cache_pool_runs_clean():
    """meta.pool images and chunk control pages (`chell cache check`'s code)."""
    fuzz_runs_clean("cache_pool", 10)


def test_fuzz_warp_patterns_runs_clean():
    """WARP's patterns file (opener, loads, stores: src/handlers/warp/patterns.c)."""
    fuzz_runs_clean("warp_patterns", 10)


def test_fuzz_modes_state_runs_clean():
    """chelld's modes.state (the run-time mode switches and pins: loader,
    save, load again; src/chelld/modes_state.c)."""
    fuzz_runs_clean("modes_state", 5)
