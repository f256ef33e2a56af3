"""Every command of the repository answers -h/--help: usage on stdout, exit
status 0, and nothing else done (no file or directory created where it ran).

The `chell` CLI's subcommands have their own tests (test_cli.py and the
tests of each subcommand); this covers every other built program
(benchmarks, seed makers, crash drivers, test programs) and every script.
CTest runners (test_*, fuzz_*_regress) take no arguments and are run by
CTest, so they are left out.
"""
import os
import subprocess
from pathlib import Path

import pytest

from conftest import BUILD, REPO

PROGRAMS = sorted(p.name for p in (BUILD / "bin").iterdir()
                  if os.access(p, os.X_OK) and not p.name.startswith(("test_", "fuzz_")))
SCRIPTS = sorted(p.name for p in (REPO / "scripts").iterdir()
                 if p.suffix in (".sh", ".py") and os.access(p, os.X_OK))


def _check(path, tmp_path, flag, word="usage"):
    res = subprocess.run([str(path), flag], cwd=tmp_path, stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, CHELL_BUILD_DIR=str(BUILD)))
    assert res.returncode == 0, f"{path.name} {flag}: exit {res.returncode}\n{res.stderr}"
    assert word in res.stdout.lower(), f"{path.name} {flag}: no {word!r} on stdout:\n{res.stdout}"
    assert list(tmp_path.iterdir()) == [], f"{path.name} {flag} created {list(tmp_path.iterdir())}"


@pytest.mark.parametrize("name", PROGRAMS)
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_program_help(name, flag, tmp_path):
    _check(BUILD / "bin" / name, tmp_path, flag)


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_help(name, tmp_path):
    # a script's help is its header comment: what it does, then how to call it
    _check(REPO / "scripts" / name, tmp_path, "--help", word=name.split(".")[0].split("_")[0])


def test_programs_found():
    # the list above is not empty by accident (a build without tools)
    assert {"chell", "chelld", "chell_bench_lat", "chell_randops", "sem_dup"} <= set(PROGRAMS)
