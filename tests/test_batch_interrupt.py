"""Ctrl-C in `planner batch` at any moment, also while its workers start: exit 130, one line, no
traceback, every worker stopped, finished rows kept (tryout 3, item 8)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from batch_fixtures import write_sweep

from planner.batch.run import read_rows

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not os.path.isdir("/proc") or sys.platform != "linux",
                                reason="finds the batch's processes through /proc")

# the CLI with every case but the first taking a minute (in the workers), so a Ctrl-C always finds it busy;
# an interrupt before main() runs gets the same handling as `python -m planner` gives it
LAUNCH = """
import sys
try:
    import batch_fixtures
    import planner.batch.run as run
    from planner.cli.main import main
except KeyboardInterrupt:
    print("planner: interrupted", file=sys.stderr)
    sys.exit(130)
run.run_case = batch_fixtures.quick_then_sleep
sys.exit(main(sys.argv[1:]))
"""


def _session(sid: int) -> list[str]:
    """Live (not zombie) processes of a session, as 'pid state cmdline'."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == sid:
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            out.append(f"{d} {fields[0]} {cmd[:100]}")
    return out


def _interrupt(tmp_path, when, to_group: bool):
    sweep = write_sweep(tmp_path)
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    p = subprocess.Popen([sys.executable, "-c", LAUNCH, "batch", sweep, "--out", str(out), "--workers", "2"],
                         cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         start_new_session=True)      # its own session: the test finds every process it started
    try:
        when(out)
        (os.killpg if to_group else os.kill)(p.pid, signal.SIGINT)   # the group: as a terminal's Ctrl-C does
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    deadline = time.monotonic() + 10          # forkserver and resource tracker leave once the parent has gone
    while (left := _session(p.pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for line in left:                         # do not leave them to the next test
        os.kill(int(line.split()[0]), signal.SIGKILL)
    return p.returncode, err.decode(), left, out


def _after(seconds: float):
    return lambda _out: time.sleep(seconds)


def _after_first_row(out: Path):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if (out / "mini.csv").exists() and read_rows(str(out / "mini.csv")):
            return
        time.sleep(0.05)
    raise AssertionError("the first case never finished")


def _check(rc, err, left):
    assert rc == 130, err
    assert "Traceback" not in err and "Error" not in err, err
    assert "planner: interrupted" in err
    assert not left, f"processes left running: {left}"


@pytest.mark.parametrize("delay,to_group", [
    (1.0, True),                                   # typically while the forkserver and workers start
    pytest.param(0.3, True, marks=pytest.mark.slow),
    pytest.param(0.6, False, marks=pytest.mark.slow),
    pytest.param(1.5, False, marks=pytest.mark.slow),
    pytest.param(2.0, True, marks=pytest.mark.slow),
])
def test_early_ctrl_c_exits_130_and_stops_the_workers(tmp_path, delay, to_group):
    _check(*_interrupt(tmp_path, _after(delay), to_group)[:3])


@pytest.mark.parametrize("to_group", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_ctrl_c_mid_sweep_keeps_finished_rows(tmp_path, to_group):
    rc, err, left, out = _interrupt(tmp_path, _after_first_row, to_group)
    _check(rc, err, left)
    rows = read_rows(str(out / "mini.csv"))
    assert [r["model"] for r in rows] == ["m-small"] and rows[0]["status"] == "INFEASIBLE"


def test_deferred_sigint_holds_a_ctrl_c_until_the_block_ends():
    from planner.interrupt import deferred_sigint
    reached = False
    with pytest.raises(KeyboardInterrupt):
        with deferred_sigint():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            reached = True                    # not cut short by the signal
    assert reached
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with deferred_sigint():                   # no signal: nothing raised
        pass
