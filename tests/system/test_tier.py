"""The tier model (docs/TIER.md): what it charges, counted exactly.

A real program (tests/progs/tier_io.c) makes a fixed mix of reads and
writes on a file on the tier; under `chell run` with a model, the tier's
counters in stats.file must equal the calls that moved bytes and the bytes
they moved, in every mode that charges them (the kernel path, direct
mode, cache mode's pool copies). No timing is checked here: scripts/bench_tier.py measures the
delivered latency and bandwidth.
"""
import json
import re

import pytest

from conftest import CHELL, PROGS, chell_cmd, fresh_manager, run


def expected(out):
    m = re.fullmatch(r"reads (\d+) read_bytes (\d+) writes (\d+) write_bytes (\d+)\n", out)
    assert m, out
    return dict(zip(["tier_reads", "tier_read_bytes", "tier_writes", "tier_write_bytes"],
                    map(int, m.groups())))


def run_io(mode, workdir, tmp_path, *sets):
    stats = tmp_path / "stats.%p.json"
    extra = ["--set", f"stats.file={stats}", "--set", f"tier.state={tmp_path}"]
    for s in sets:
        extra += ["--set", s]
    r = run(chell_cmd(mode, [workdir], [PROGS / "tier_io", workdir], extra))
    assert r.returncode == 0, r.stderr
    files = sorted(tmp_path.glob("stats.*.json"))
    assert len(files) == 1, files
    return expected(r.stdout.decode()), json.loads(files[0].read_text())


@pytest.mark.parametrize("mode", ["posix", "direct"])
@pytest.mark.parametrize("model", ["pcm", "optane"])
def test_counters_match_bytes_moved(mode, model, workdir, tmp_path):
    want, got = run_io(mode, workdir, tmp_path, f"tier.model={model}")
    assert got["tier_model"] == model
    assert {k: got[k] for k in want} == want
    assert got["tier_read_wait_ns"] >= 0 and got["tier_write_wait_ns"] > 0


def test_custom_model_and_stat_output(workdir, tmp_path):
    want, got = run_io("direct", workdir, tmp_path, "tier.model=custom", "tier.read_ns=200",
                       "tier.write_ns=900", "tier.read_gbps=4", "tier.write_gbps=1.5")
    assert got["tier_model"] == "custom"
    assert {k: got[k] for k in want} == want
    f = next(tmp_path.glob("stats.*.json"))
    table = run([CHELL, "stat", f]).stdout.decode()
    assert re.search(r"^tier_model +custom", table, re.M), table
    assert re.search(rf"^tier_write_bytes +{want['tier_write_bytes']} ", table, re.M), table
    js = json.loads(run([CHELL, "stat", "--json", f]).stdout)
    assert js["total"]["tier_read_bytes"] == want["tier_read_bytes"]


def test_files_off_the_tier_are_not_charged(workdir, tmp_path):
    """tier.paths names another directory: the same I/O costs nothing."""
    _, got = run_io("posix", workdir, tmp_path, "tier.model=pcm", f"tier.paths={tmp_path}/elsewhere")
    assert got["tier_reads"] == 0 and got["tier_writes"] == 0


def test_no_model_no_counters(workdir, tmp_path):
    _, got = run_io("direct", workdir, tmp_path)
    assert not any(k.startswith("tier_") for k in got)


@pytest.mark.parametrize("sets, message", [
    (["tier.model=custom", "tier.read_ns=1", "tier.write_ns=1", "tier.read_gbps=1"],
     "setting tier.write_gbps is required with tier.model = custom"),
    (["tier.model=pcm", "tier.read_gbps=0"], "setting tier.read_gbps: a bandwidth must be more than 0"),
    (["tier.model=pcm", "tier.write_ns=-3"], "for setting tier.write_ns"),
    (["tier.model=pcm", "tier.write_ns=1e3"], "expected a non-negative decimal number"),
    (["tier.model=flash"], "for setting tier.model"),
])
def test_bad_settings_are_named(sets, message, workdir, tmp_path):
    extra = ["--set", "on_error=abort"]
    for s in sets:
        extra += ["--set", s]
    r = run(chell_cmd("posix", [workdir], ["true"], extra))
    assert r.returncode != 0
    assert message in r.stderr.decode(), r.stderr.decode()


def test_cache_mode_charges_pool_copies(tmp_path):
    """Cache mode: every byte the client moved was a copy out of or into
    the pool (the tier): the bytes match; a request that crosses a chunk
    is two copies, so there may be more charged copies than calls."""
    with fresh_manager() as m:
        stats = tmp_path / "stats.%p.json"
        r = run(m.cmd([PROGS / "tier_io", m.backing],
                      ["--set", "tier.model=pcm", "--set", f"stats.file={stats}",
                       "--set", f"tier.state={tmp_path}"]))
        assert r.returncode == 0, r.stderr
        want = expected(r.stdout.decode())
        got = json.loads(next(tmp_path.glob("stats.*.json")).read_text())
    assert got["tier_read_bytes"] == want["tier_read_bytes"]
    assert got["tier_write_bytes"] == want["tier_write_bytes"]
    assert got["tier_reads"] >= want["tier_reads"] and got["tier_writes"] >= want["tier_writes"]


@pytest.mark.parametrize("mode", ["posix", "direct"])
def test_forked_child_counts_its_own(mode, workdir, tmp_path):
    """A child forked (no exec) after its parent's I/O writes only its own
    charges: the records of a process tree add up to the bytes moved."""
    f = workdir / "data"
    f.write_bytes(b"z" * 300000)
    prog = (f"import os\nopen({str(f)!r}, 'rb').read()\npid = os.fork()\n"
            f"if pid == 0:\n    open({str(f)!r}, 'rb').read(); os._exit(0)\nos.waitpid(pid, 0)\n")
    stats = tmp_path / "stats.%p.json"
    r = run(chell_cmd(mode, [workdir], ["python3", "-c", prog],
                      ["--set", "tier.model=pcm", "--set", f"stats.file={stats}",
                       "--set", f"tier.state={tmp_path}"]))
    assert r.returncode == 0, r.stderr
    recs = [json.loads(p.read_text()) for p in tmp_path.glob("stats.*.json")]
    assert len(recs) == 2
    assert sorted(rec["tier_read_bytes"] for rec in recs) == [300000, 300000]
