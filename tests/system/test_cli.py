"""The `chell` command line: help, option and configuration errors, and `run`.

Most checks need only the CLI; the `run` checks that execute a program also
need build/lib/libchell.so to load (conftest refuses to start without it).
"""
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import CHELL, LIBCHELL, run

SUBCOMMANDS = ["run", "config", "version", "help", "warp"]
# What `chell run` preloads: the directory resolved, the name kept (not the
# versioned file the build's libchell.so symlink points to).
PRELOADED = str(LIBCHELL.parent.resolve() / LIBCHELL.name)


def chell(*args, env=None, **kw):
    return run([CHELL, *args], env=env, text=True, **kw)


def clean_env(**extra):
    """Our environment without any CHELL_* setting or LD_PRELOAD the caller may have."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CHELL_") and k != "LD_PRELOAD"}
    env.update(extra)
    return env


# ---- help and usage -------------------------------------------------------

@pytest.mark.parametrize("args", [["--help"], ["-h"]] +
                         [[c, "--help"] for c in SUBCOMMANDS] +
                         [[c, "-h"] for c in SUBCOMMANDS] +
                         [["help", c] for c in SUBCOMMANDS] + [["help"]])
def test_help_exits_0(args):
    r = chell(*args, env=clean_env())
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Usage: chell"), r.stdout
    assert r.stderr == ""


def test_help_cmd_matches_cmd_help():
    assert chell("help", "run").stdout == chell("run", "--help").stdout
    assert "--shadow-under-test" in chell("run", "--help").stdout


@pytest.mark.parametrize("args,needle", [
    ([], "Usage: chell"),
    (["frobnicate"], "unknown command 'frobnicate'"),
    (["--frob"], "'--frob'"),
    (["run", "--frob", "--", "true"], "run: unknown or ambiguous option '--frob'"),
    (["run", "-q", "true"], "run: unknown option '-q'"),
    (["run", "--mode"], "option '--mode' needs a value"),
    (["run"], "run: no command given"),
    (["config", "extra"], "unexpected argument 'extra'"),
    (["version", "--frob"], "'--frob'"),
    (["help", "frobnicate"], "unknown command 'frobnicate'"),
    (["run", "--set", "novalue", "true"], "--set needs KEY=VALUE"),
])
def test_usage_errors_exit_2(args, needle):
    r = chell(*args, env=clean_env())
    assert r.returncode == 2
    assert needle in r.stderr
    assert r.stdout == ""


# ---- configuration errors -------------------------------------------------

@pytest.mark.parametrize("args,env", [
    (["run", "--mode", "fast", "--", "true"], {}),
    (["run", "--set", "mode=fast", "--", "true"], {}),
    (["run", "--", "true"], {"CHELL_MODE": "fast"}),
    (["config"], {"CHELL_MODE": "fast"}),
    (["config", "--mode", "fast"], {}),
])
def test_bad_mode_exits_2_naming_mode(args, env):
    r = chell(*args, env=clean_env(**env))
    assert r.returncode == 2
    assert r.stderr.startswith("chell: ")
    assert "for setting mode" in r.stderr
    # the message lists the built-in handlers (from the registry)
    assert "fast" in r.stderr and "posix, trace, shadow, direct, cache" in r.stderr


def test_unknown_setting_suggests_key():
    r = chell("run", "--set", "trace.fil=/tmp/x", "--", "true", env=clean_env())
    assert r.returncode == 2
    assert "unknown setting 'trace.fil'" in r.stderr
    assert "did you mean 'trace.file'" in r.stderr


@pytest.mark.parametrize("subcmd", [["run", "--", "true"], ["config"]])
def test_bad_config_file_line_exits_2(tmp_path, subcmd):
    conf = tmp_path / "chell.conf"
    conf.write_text("# settings\nmode = trace\n[trace]\nfile /tmp/t.log\n")
    r = chell(subcmd[0], "--config", str(conf), *subcmd[1:], env=clean_env())
    assert r.returncode == 2
    assert f"{conf}:4:" in r.stderr
    # The same file through the environment gives the same error.
    r2 = chell(*subcmd, env=clean_env(CHELL_CONFIG=str(conf)))
    assert r2.returncode == 2
    assert f"{conf}:4:" in r2.stderr


def test_missing_config_file_exits_2(tmp_path):
    r = chell("run", "--config", str(tmp_path / "nope.conf"), "--", "true", env=clean_env())
    assert r.returncode == 2
    assert "nope.conf" in r.stderr


def test_relative_path_in_env_exits_2():
    r = chell("run", "--", "true", env=clean_env(CHELL_PATHS="/ok:data"))
    assert r.returncode == 2
    assert "paths (CHELL_PATHS)" in r.stderr and "'data' is not an absolute path" in r.stderr


def test_shadow_without_path_exits_2():
    r = chell("run", "--mode", "shadow", "--", "true", env=clean_env())
    assert r.returncode == 2
    assert "shadow" in r.stderr and "--path" in r.stderr


def test_missing_library_exits_2(tmp_path):
    r = chell("run", "--", "true", env=clean_env(CHELL_LIB=str(tmp_path / "libchell.so")))
    assert r.returncode == 2
    assert "CHELL_LIB" in r.stderr


# ---- chell config ----------------------------------------------------------

def test_config_json_origins(tmp_path):
    conf = tmp_path / "c.conf"
    conf.write_text("[shadow]\nhistory = 8\n[]\npath = /srv\n")
    r = chell("config", "--json", "--config", str(conf), "--trace-file", "/tmp/t.%p",
              env=clean_env(CHELL_LOG_LEVEL="debug"))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["config_file"] == str(conf)
    s = doc["settings"]
    assert s["mode"] == {"value": "posix", "origin": "default", "env": "CHELL_MODE"}
    assert s["shadow.history"]["value"] == "8"
    assert s["shadow.history"]["origin"] == f"file:{conf}:2"
    assert s["paths"]["value"] == "/srv"
    assert s["paths"]["origin"] == f"file:{conf}:4"
    assert s["log.level"] == {"value": "debug", "origin": "env", "env": "CHELL_LOG_LEVEL"}
    assert s["trace.file"]["value"] == "/tmp/t.%p"
    assert s["trace.file"]["origin"] == "option --trace-file"


def test_config_json_defaults():
    r = chell("config", "--json", env=clean_env())
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["config_file"] is None
    assert all(v["origin"] == "default" for v in doc["settings"].values())
    assert doc["settings"]["shadow.dir"]["value"] == "/tmp/chell-shadow"


def test_config_text_table():
    r = chell("config", env=clean_env(CHELL_MODE="trace"))
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line.split() for line in r.stdout.splitlines()
            if line and not line.startswith("#")}
    assert rows["mode"] == ["mode", "trace", "env"]
    assert rows["on_error"] == ["on_error", "passthrough", "default"]


def test_config_keys_lists_every_setting():
    keys = json.loads(chell("config", "--keys", "--json", env=clean_env()).stdout)
    by_key = {k["key"]: k for k in keys}
    for key, envvar in [("mode", "CHELL_MODE"), ("paths", "CHELL_PATHS"),
                        ("trace.file", "CHELL_TRACE_FILE"), ("shadow.dir", "CHELL_SHADOW_DIR"),
                        ("shadow.under_test", "CHELL_SHADOW_UNDER_TEST"),
                        ("shadow.history", "CHELL_SHADOW_HISTORY"),
                        ("shadow.report", "CHELL_SHADOW_REPORT"),
                        ("log.level", "CHELL_LOG_LEVEL"), ("on_error", "CHELL_ON_ERROR"),
                        ("stats.file", "CHELL_STATS_FILE")]:
        assert by_key[key]["env"] == envvar
        assert by_key[key]["help"]
    assert by_key["mode"]["choices"] == ["posix", "trace", "shadow", "direct", "cache", "warp"]
    text = chell("config", "--keys", env=clean_env())
    assert text.returncode == 0
    for key in by_key:
        assert f"{key} ({by_key[key]['env']})" in text.stdout


# ---- chell version ---------------------------------------------------------

def test_version():
    r = chell("version", env=clean_env())
    assert r.returncode == 0
    assert r.stdout.startswith("chell ")
    doc = json.loads(chell("version", "--json", env=clean_env()).stdout)
    assert doc["library"] == PRELOADED
    assert chell("--version", env=clean_env()).stdout == r.stdout


# ---- chell run ---------------------------------------------------------------

def test_dry_run_exports_settings(tmp_path):
    r = chell("run", "--dry-run", "--mode", "trace", "--path", "/a", "--path", "rel",
              "--trace-file", "/tmp/t.%p", "--set", "shadow.history=3", "--", "echo", "a b",
              env=clean_env(), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "CHELL_MODE=trace" in lines
    # relative --path is resolved against the current directory
    assert f"CHELL_PATHS=/a:{tmp_path}/rel" in lines
    assert "CHELL_TRACE_FILE=/tmp/t.%p" in lines
    assert "CHELL_SHADOW_HISTORY=3" in lines
    assert "CHELL_ON_ERROR=abort" in lines
    assert f"LD_PRELOAD={PRELOADED}" in lines
    assert lines[-1] == "echo 'a b'"


def test_run_true_exits_0():
    r = chell("run", "--mode", "posix", "--", "true", env=clean_env())
    assert r.returncode == 0, r.stderr


def test_run_exit_status_is_childs():
    r = chell("run", "--", "sh", "-c", "exit 3", env=clean_env())
    assert r.returncode == 3, r.stderr


def test_run_without_double_dash():
    r = chell("run", "--mode", "posix", "sh", "-c", "exit 5", env=clean_env())
    assert r.returncode == 5, r.stderr


def test_run_killed_by_signal():
    # chell execs the command in place, so the signal reaches our wait() as is.
    r = chell("run", "--", "sh", "-c", "kill -9 $$", env=clean_env())
    assert r.returncode == -9


def test_run_command_not_found_127():
    r = chell("run", "--", "chell-no-such-command-xyz", env=clean_env())
    assert r.returncode == 127
    assert "chell-no-such-command-xyz: command not found" in r.stderr


def test_run_not_executable_126(tmp_path):
    f = tmp_path / "script"
    f.write_text("#!/bin/sh\nexit 0\n")
    f.chmod(0o644)
    r = chell("run", "--", str(f), env=clean_env())
    assert r.returncode == 126
    assert "Permission denied" in r.stderr


def test_run_sets_ld_preload():
    r = chell("run", "--mode", "posix", "--", "sh", "-c", "echo $LD_PRELOAD", env=clean_env())
    assert r.returncode == 0, r.stderr
    assert "libchell.so" in r.stdout
    assert r.stdout.split()[0].split(":")[0] == PRELOADED


def test_run_keeps_existing_preload_and_drops_duplicate():
    libm = next((p for p in ["/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib64/libm.so.6"]
                 if Path(p).exists()), None)
    if libm is None:
        pytest.skip("no libm.so.6 to preload")
    r = chell("run", "--mode", "posix", "--", "sh", "-c", "echo $LD_PRELOAD",
              env=clean_env(LD_PRELOAD=f"{libm} /elsewhere/libchell.so"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"{PRELOADED}:{libm}"


def test_run_exports_on_error_unless_set(tmp_path):
    cmd = ["--", "sh", "-c", "echo on_error=$CHELL_ON_ERROR mode=$CHELL_MODE"]
    r = chell("run", "--mode", "posix", *cmd, env=clean_env())
    assert r.stdout.split() == ["on_error=abort", "mode=posix"]
    r = chell("run", "--set", "on_error=passthrough", *cmd, env=clean_env())
    assert r.stdout.split()[0] == "on_error=passthrough"
    conf = tmp_path / "c.conf"
    conf.write_text("on_error = passthrough\n")
    # Set in the file: not overridden through the environment.
    r = chell("run", "--config", str(conf), *cmd, env=clean_env())
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["on_error=", "mode="]


def test_stat_totals_fields_the_first_record_lacks(tmp_path):
    """The processes of one run need not write the same fields (a parent
    that opened no file under the handler writes only the tier model's
    counters, its children the handler's as well): the total and the table
    have every field of every record, not the first record's only."""
    parent = tmp_path / "s-100.json"
    child = tmp_path / "s-101.json"
    parent.write_text('{"pid": 100, "mode": "direct", "tier_model": "pcm", "tier_reads": 0}\n')
    child.write_text('{"pid": 101, "mode": "direct", "reads": 7, "writes": 3, "tier_model": "pcm", '
                     '"tier_reads": 7}\n')
    res = run([CHELL, "stat", "--json", parent, child])
    assert res.returncode == 0, res.stderr
    js = json.loads(res.stdout)
    assert js["total"] == {"tier_reads": 7, "reads": 7, "writes": 3}, js
    table = run([CHELL, "stat", parent, child]).stdout.decode()
    rows = {ln.split()[0]: ln.split()[1:] for ln in table.splitlines()}
    assert rows["reads"] == ["-", "7", "7"] and rows["writes"] == ["-", "3", "3"], table
    assert rows["mode"] == ["direct", "direct"], table
