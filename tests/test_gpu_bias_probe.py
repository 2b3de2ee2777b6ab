"""The GPU bias probe (benchmarks/gpu_bias_probe.py) runs end to end on tiny CPU shapes: every part writes its JSON,
timings are positive, and the planner's layer prediction is computed for the probe's layer. The GPU figures
themselves are a benchmark's, never a test's."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))

import gpu_bias_probe as probe
import pytest


@pytest.mark.slow          # ~2 s: first calls of the fp8 and SDPA kernels on a CPU
def test_probe_smoke_on_cpu(tmp_path):
    rc = probe.main(["--out", str(tmp_path), "--device", "cpu", "--quick", "--sustain-s", "0.05", "--repeats", "2"])
    assert rc == 0
    for part in ("info", "gemm", "sustained", "attention", "elementwise", "layer"):
        assert '"error"' not in (tmp_path / f"{part}.json").read_text(), part
    gemm = json.loads((tmp_path / "gemm.json").read_text())
    assert all(r["seconds"] > 0 for r in gemm if r["dtype"] == "bf16")
    elem = json.loads((tmp_path / "elementwise.json").read_text())
    assert {r["name"] for r in elem} == {"copy", "residual_add", "silu_mul", "rmsnorm_eager"}
    assert all(r["GBps"] > 0 for r in elem)
    layer = json.loads((tmp_path / "layer.json").read_text())
    assert layer[0]["burst_s"] > 0 and layer[0]["sustained_s"] > 0
    pred = probe.model_layer_s(layer[0], "H100")
    assert pred is not None and pred > 0


def test_a_failing_part_is_recorded_and_the_rest_still_run(tmp_path, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("no such kernel")
    monkeypatch.setattr(probe, "part_attention", boom)
    rc = probe.main(["--out", str(tmp_path), "--device", "cpu", "--quick", "--parts", "attention,elementwise",
                     "--repeats", "2"])
    assert rc == 1
    assert "no such kernel" in json.loads((tmp_path / "attention.json").read_text())["error"]
    assert json.loads((tmp_path / "elementwise.json").read_text())[0]["GBps"] > 0
    assert not (tmp_path / "gemm.json").exists()         # parts not asked for are not run


def test_gpu_state_keeps_the_clocks_when_the_driver_lacks_a_field(monkeypatch):
    """Recent drivers renamed clocks_throttle_reasons to clocks_event_reasons: an unknown field must not cost the
    clock, power and temperature readings (asked for separately); no nvidia-smi gives {}."""
    answers = {"clocks.sm,power.draw,temperature.gpu": ["1755", "690.50", "[N/A]"],
               "clocks_event_reasons.active": None, "clocks_throttle_reasons.active": ["0x0000000000000004"]}
    monkeypatch.setattr(probe, "_smi", answers.get)
    assert probe.gpu_state() == {"sm_MHz": 1755.0, "power_W": 690.5, "throttle": "0x0000000000000004"}
    monkeypatch.setattr(probe, "_smi", lambda fields: None)
    assert probe.gpu_state() == {}


def test_recipe_attention_shapes_are_each_rows_per_gpu_calls(tmp_path):
    """The next lease times the recipes' own attention calls (issue #8: cuDNN at small per-GPU shapes may run below
    the row measured at large ones): the Llama 3.1 405B row (tp 8, cp 2, seq 8192) calls a causal 4096-token shard
    with 16 query heads and the ring's unmasked 4096 x 2048 step; the shipped file is what the generator writes."""
    out = probe.recipe_attention_shapes(str(tmp_path / "shapes.json"))
    assert out["rows"]["mb2602-llama31-405b-fp8-1024"] == ["b1-h16-s4096-causal", "b1-h16-q4096-k2048-full"]
    assert out["rows"]["nemo2407-llama2-7b-fp8-8"] == ["b1-h32-s4096-causal"]
    with open(probe.RECIPE_ATTN) as fh:
        assert json.load(fh) == json.loads((tmp_path / "shapes.json").read_text())
    rows = probe.part_attention("cpu", False, 2, shapes=[("t", 1, 2, 64, 32, 16, False)])
    assert rows[0]["name"] == "t" and rows[0]["fwd_bwd_s"] > 0
