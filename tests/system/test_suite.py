"""The workload suite (issue 11): build/bin/chell_filebench and
scripts/bench_suite.py.

The generator runs briefly (well under 2 s per personality) plainly, under
posix and under direct; each run must complete, verify every byte it read
against what it wrote, and print the JSON the runner reads. A preloaded shim
that corrupts one byte of one read proves the verification catches a wrong
byte. The runner itself runs in its --smoke configuration. No timing
thresholds anywhere: only completion, verification and the shape of the output.
"""
import json
import os
import subprocess
import sys

import pytest

from conftest import BUILD, REPO, chell_cmd, run

GEN = BUILD / "bin" / "chell_filebench"
RUNNER = REPO / "scripts" / "bench_suite.py"
PERSONALITIES = ["fileserver", "webserver", "webproxy", "varmail"]
MODES = ["plain", "posix", "direct"]

# The flowops of each personality, by filebench's own names (workloads/*.f).
FLOWOPS = {
    "fileserver": ["createfile1", "wrtfile1", "closefile1", "openfile1", "appendfilerand1", "closefile2",
                   "openfile2", "readfile1", "closefile3", "deletefile1", "statfile1"],
    "webserver": [f"{op}{i}" for i in range(1, 11) for op in ("openfile", "readfile", "closefile")] + ["appendlog"],
    "webproxy": ["deletefile1", "createfile1", "appendfilerand1", "closefile1"]
                + [f"{op}{i}" for i in range(2, 7) for op in ("openfile", "readfile", "closefile")],
    "varmail": ["deletefile1", "createfile2", "appendfilerand2", "fsyncfile2", "closefile2", "openfile3",
                "readfile3", "appendfilerand3", "fsyncfile3", "closefile3", "openfile4", "readfile4", "closefile4"],
}
LAT_KEYS = {"count", "mean", "p50", "p90", "p99", "p999", "max"}


@pytest.fixture(autouse=True)
def _need_generator():
    if not GEN.exists():
        pytest.fail(f"{GEN} is not built (bench/CMakeLists.txt builds it)")


def gen_run(mode, workdir, args, env=None):
    argv = [GEN, *args, "--dir", workdir / "data"]
    if mode != "plain":
        argv = chell_cmd(mode, [workdir], argv)
    res = run(argv, timeout=120, env=env)
    out = res.stdout.decode()
    try:
        data = json.loads(out)
    except ValueError:
        pytest.fail(f"no JSON from chell_filebench (exit {res.returncode}):\n{out[-2000:]}\n{res.stderr.decode()[-2000:]}")
    return res, data


def check_common(res, data):
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    assert data["tool"] == "chell_filebench" and data["schema"] == 1
    assert data["ok"] is True and data["errors"] == 0 and data["first_error"] is None
    assert data["verify"]["mode"] == "full" and data["verify"]["mismatches"] == 0
    assert data["verify"]["bytes_checked"] > 0
    assert data["ops"] > 0 and data["ops_s"] > 0 and data["seconds"] > 0
    assert {"published", "effective"} <= set(data["params"])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("workload", PERSONALITIES)
def test_personality(workload, mode, workdir):
    res, data = gen_run(mode, workdir, [workload, "--seconds", "0.6", "--seed", "3"])
    check_common(res, data)
    assert data["workload"] == workload
    assert [f["name"] for f in data["flowops"]] == FLOWOPS[workload]
    for f in data["flowops"]:
        assert set(f["latency_us"]) == LAT_KEYS
    assert set(data["latency_us"]) == LAT_KEYS
    assert data["read_ops"] > 0 and data["write_ops"] > 0 and data["mb_s"] > 0
    eff = data["params"]["effective"]
    assert eff["nfiles"] == max(1, round(data["params"]["published"]["nfiles"] * 0.1))
    # the fileset is removed at the end; the directory it lived in stays
    assert not any((workdir / "data").iterdir())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("workload", ["seqread", "randwrite"])
def test_sweep(workload, mode, workdir):
    sizes = [4096, 65536, 1 << 20]
    res, data = gen_run(mode, workdir, [workload, "--seconds", "0.15", "--file-size", "8m",
                                        "--iosize", ",".join(map(str, sizes))])
    check_common(res, data)
    assert [s["iosize"] for s in data["sweep"]] == sizes
    for s in data["sweep"]:
        assert s["ops"] > 0 and s["mb_s"] > 0 and set(s["latency_us"]) == LAT_KEYS
    if workload == "randwrite":  # the whole file was read back against the last writes
        assert data["verify"]["bytes_checked"] == 8 << 20


SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <unistd.h>
/* Flips one byte of the 5th read() of 4 KB or more: a wrong byte that the
 * generator's verification must report. */
static atomic_int n;
ssize_t read(int fd, void *buf, size_t len)
{
	static ssize_t (*real)(int, void *, size_t);
	if (!real)
		real = (ssize_t (*)(int, void *, size_t))dlsym(RTLD_NEXT, "read");
	ssize_t r = real(fd, buf, len);
	if (r >= 4096 && atomic_fetch_add(&n, 1) == 4)
		((unsigned char *)buf)[1234] ^= 0x5a;
	return r;
}
"""


def test_verification_catches_a_wrong_byte(workdir, tmp_path):
    src = tmp_path / "corrupt.c"
    src.write_text(SHIM)
    lib = tmp_path / "libcorrupt.so"
    cc = run(["cc", "-shared", "-fPIC", "-O1", "-o", lib, src, "-ldl"])
    assert cc.returncode == 0, cc.stderr.decode()
    env = dict(os.environ, LD_PRELOAD=str(lib))
    res, data = gen_run("plain", workdir, ["seqread", "--seconds", "0.1", "--file-size", "1m", "--iosize", "64k"],
                        env=env)
    assert res.returncode == 1
    assert data["ok"] is False and data["verify"]["mismatches"] >= 1
    assert "data mismatch" in data["first_error"] and "offset" in data["first_error"]
    # and without the shim the same run verifies
    res, data = gen_run("plain", workdir, ["seqread", "--seconds", "0.1", "--file-size", "1m", "--iosize", "64k"])
    check_common(res, data)


def test_generator_usage(workdir):
    res = run([GEN, "--help"])
    assert res.returncode == 0 and b"fileserver" in res.stdout and b"--verify" in res.stdout
    assert run([GEN, "nosuchworkload", "--dir", workdir]).returncode == 2
    assert run([GEN, "fileserver"]).returncode == 2  # --dir is required


def asan_build():
    """Is the build sanitized? (its programs link libasan)"""
    r = run(["ldd", GEN])
    return b"libasan" in r.stdout


def test_runner_smoke(tmp_path):
    """The runner end to end in its tiny configuration: every workload under
    every arm this build has, the report files, and the discovery of what is
    missing (warp, tier presets) reported rather than failed."""
    assert run([sys.executable, RUNNER, "--help"]).returncode == 0
    out = tmp_path / "out"
    only = []
    if asan_build():
        # coreutils cat calls aligned_alloc(4096, n) with n not a multiple
        # of 4096, which gcc 12's libasan aborts on (scripts/test.sh,
        # ASAN_DESELECT): not a Chell bug, so cat is left out under ASan.
        only = ["--only", "fileserver,webserver,webproxy,varmail,seqread,randwrite,postmark,dbench,sysbench,grep,make"]
    # Two presets (no model, and pcm) stand for all five: each preset is the
    # same code with other figures, and all of them under ASan outlast any
    # CI budget (bench_suite.py --quick runs every preset).
    presets = ["--presets", "none,pcm"]
    res = run([sys.executable, RUNNER, "--smoke", "--build", BUILD, "--out", out, *only, *presets],
              timeout=900)
    assert res.returncode == 0, res.stderr.decode()[-4000:]
    data = json.loads((out / "suite.json").read_text())
    assert not data["failed"] and all(e["ok"] for e in data["runs"])
    disc = data["discovered"]
    arms = {e["arm"] for e in data["runs"]}
    assert {"kernel", "posix", "direct"} <= arms
    assert ("warp" in arms) == disc["warp"]
    if not disc["warp"]:
        assert any(u["what"] == "warp arm" for u in data["unavailable"])
    if not disc["tier"]:
        assert disc["tier_presets"] == ["none"]
    workloads = {r["workload"] for r in data["summary"]}
    expected = {"fileserver", "webserver", "webproxy", "varmail", "seqread", "randwrite", "grep", "make"}
    expected |= set() if only else {"cat"}
    expected |= {p for p in ("postmark", "dbench", "sysbench")
                 if not any(u["what"] == p for u in data["unavailable"])}
    assert expected <= workloads
    for r in data["summary"]:
        assert r["values"].get("posix") is not None, r
    # every Chell arm ran in the mode and under the tier model it claims
    # (its processes' stats.file records), not silently on the kernel
    for e in data["runs"]:
        mc = e["mode_check"]
        if e["arm"] in ("kernel", "pagecache") or (e["arm"] == "posix" and e["preset"] == "none"):
            assert mc["ok"] is None, e["arm"]
        else:
            assert mc["ok"] is True and mc["modes"] == [e["arm"]], (e["workload"], e["arm"], e["preset"], mc)
    if disc["warp"]:
        assert any(r["accuracy"].get("warp") is not None for r in data["summary"] if r["workload"] == "cat" or only)
        if disc["warp_cli"]:
            maps = [e for e in data["runs"] if e["arm"] == "warp" and e.get("node_map")]
            assert maps and all(e["node_map"].get("states") for e in maps), maps
            assert (out / "suite_warp_nodes.png").stat().st_size > 0
    assert (out / "suite.md").read_text().count("| fileserver |") >= 1
    for fig in ("suite_personalities.png", "suite_programs.png", "suite_seqread.png", "suite_randwrite.png"):
        assert (out / fig).stat().st_size > 0
    # the report can be redone from the JSON alone
    again = run([sys.executable, RUNNER, "--from-json", out / "suite.json", "--out", tmp_path / "again"])
    assert again.returncode == 0 and (tmp_path / "again" / "suite.md").exists()
