"""The command line starts without the heavy libraries; its command table matches the command modules; exit codes."""
import json
import os
import subprocess
import sys

import pytest

import planner
from planner.cli.main import COMMANDS, build_parser, command_word, main
from planner.errors import InfeasibleError, SpecError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(planner.__file__)))
HEAVY = ("torch", "sklearn", "ortools", "scipy", "matplotlib", "planner.simulator")


def _python(*args: str) -> subprocess.CompletedProcess:
    """This checkout's python (not an installed planner), in a fresh process: sys.modules starts empty."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, env=env)


def _heavy(modules) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_import_no_heavy_library_and_no_command_module(flag):
    r = _python("-X", "importtime", "-m", "planner", flag)
    assert r.returncode == 0, r.stderr
    imported = [line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")]
    assert "planner.cli.main" in imported
    assert _heavy(imported) == []
    commands = {c.module for c in COMMANDS}
    assert [m for m in imported if m in commands] == []
    if flag == "--help":
        assert all(c.name in r.stdout for c in COMMANDS)
    else:
        assert r.stdout.strip() == f"planner {planner.__version__}"


def test_command_modules_import_no_heavy_library():
    """Each command module imports torch, OR-Tools, ... inside its handler, not when it is imported or builds
    its sub-parser (so `planner COMMAND --help` stays fast too)."""
    code = ("import json, sys\n"
            "from planner.cli.main import COMMANDS, build_parser\n"
            "out = {}\n"
            "for c in COMMANDS:\n"
            "    before = set(sys.modules)\n"
            "    build_parser(c.name)\n"
            "    out[c.module] = sorted(set(sys.modules) - before)\n"
            "print(json.dumps(out))\n")
    r = _python("-c", code)
    assert r.returncode == 0, r.stderr
    new = json.loads(r.stdout)
    assert set(new) == {c.module for c in COMMANDS}
    assert {m: _heavy(mods) for m, mods in new.items() if _heavy(mods)} == {}


def test_table_names_and_help_match_the_modules():
    """Building any one command's full sub-parser leaves the top-level help as the table alone draws it."""
    assert len({c.name for c in COMMANDS}) == len(COMMANDS)
    assert [c.module for c in COMMANDS] == sorted(c.module for c in COMMANDS)
    table_only = build_parser(None).format_help()
    for c in COMMANDS:
        assert c.name in table_only and c.help.split()[0] in table_only
        assert build_parser(c.name).format_help() == table_only, c.name


def test_command_word():
    assert command_word([]) is None
    assert command_word(["--help"]) is None
    assert command_word(["--version", "solve"]) == "solve"
    assert command_word(["solve", "specs/x.yaml", "--json"]) == "solve"
    assert command_word(["-h", "nosuch"]) == "nosuch"


def test_top_level_help_version_and_usage_errors(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: planner [-h] [--version] COMMAND ...")
    assert all(c.name in out and c.help.split()[-1] in out for c in COMMANDS)
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"planner {planner.__version__}"
    assert main([]) == 2                              # no command: the help, on stderr
    assert "COMMAND" in capsys.readouterr().err
    assert main(["nosuch"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'nosuch'" in err and "'validate-memory'" in err
    assert main(["solve", "--bogus", "x"]) == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


@pytest.mark.parametrize("command", [c.name for c in COMMANDS])
def test_every_command_has_its_full_help(command, capsys):
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: planner {command} [-h]")
    assert "-h, --help" in out


@pytest.mark.parametrize(("raised", "rc", "line"), [
    (KeyboardInterrupt(), 130, "planner: interrupted"),
    (InfeasibleError("nothing fits"), 1, "planner: infeasible: nothing fits"),
    (SpecError("s.yaml", "model", "is required"), 2, "planner: error: "),
    (RuntimeError("boom"), 3, "planner: internal error: RuntimeError: boom"),
])
def test_exit_codes_and_one_line_messages(raised, rc, line, monkeypatch, capsys):
    import planner.cli.export as export

    def run(args):
        raise raised

    monkeypatch.delenv("PLANNER_DEBUG", raising=False)
    monkeypatch.setattr(export, "run", run)
    assert main(["export", "solution.yaml"]) == rc
    err = capsys.readouterr().err
    assert err.startswith(line) and len(err.strip().splitlines()) == 1


def test_internal_error_raises_with_debug(monkeypatch):
    import planner.cli.export as export

    def run(args):
        raise RuntimeError("boom")

    monkeypatch.setenv("PLANNER_DEBUG", "1")
    monkeypatch.setattr(export, "run", run)
    with pytest.raises(RuntimeError, match="boom"):
        main(["export", "solution.yaml"])


def test_handler_return_value_is_the_exit_code(monkeypatch):
    import planner.cli.export as export

    monkeypatch.setattr(export, "run", lambda args: 1)
    assert main(["export", "solution.yaml"]) == 1
    monkeypatch.setattr(export, "run", lambda args: None)
    assert main(["export", "solution.yaml"]) == 0


def test_end_to_end_exit_codes():
    """Through `python -m planner`: ok, bad input, unknown command."""
    r = _python("-m", "planner", "export", "solutions/gpt3-13b-a100-128.yaml", "--format", "hostfile")
    assert r.returncode == 0 and r.stdout.strip(), r.stderr
    r = _python("-m", "planner", "estimate", "specs/does-not-exist.yaml", "--tp", "1", "--pp", "1", "--dp", "1",
                "--mbs", "1")
    assert r.returncode == 2 and r.stderr.startswith("planner: error:") and "Traceback" not in r.stderr
    r = _python("-m", "planner", "nosuch")
    assert r.returncode == 2 and "invalid choice: 'nosuch'" in r.stderr
    r = _python("-m", "planner")
    assert r.returncode == 2 and "usage: planner" in r.stderr
