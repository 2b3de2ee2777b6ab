"""The Ray executor against a local Ray instance (started and stopped by run_batch)."""
import time

import pytest
from batch_fixtures import write_sweep

from planner.batch.run import run_batch
from planner.batch.sweep import load_sweep

ray = pytest.importorskip("ray")


def test_ray_executor_matches_local(tmp_path):
    sw = load_sweep(write_sweep(tmp_path))
    local = run_batch(sw, str(tmp_path / "local"), workers=1, progress=False)
    t0 = time.perf_counter()
    res = run_batch(sw, str(tmp_path / "ray"), executor="ray", workers=2, progress=False)
    wall = time.perf_counter() - t0
    assert not ray.is_initialized()          # the instance it started is shut down
    assert [r["case_id"] for r in res.rows] == [c.id for c in sw.cases]
    for a, b in zip(local.rows, res.rows):
        assert a["status"] == b["status"], (a, b)
        if a["status"] == "OPTIMAL" and b["status"] == "OPTIMAL":
            assert a["iteration_s"] == pytest.approx(b["iteration_s"], rel=1e-9)
    assert any(r["status"] == "INFEASIBLE" for r in res.rows)
    # resumable on Ray too: nothing left to do
    again = run_batch(sw, str(tmp_path / "ray"), executor="ray", workers=2, progress=False)
    assert again.solved == 0
    print(f"ray: {len(sw.cases)} cases in {wall:.1f} s")
