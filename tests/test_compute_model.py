import json
import os

import pytest

from planner.config import ParallelConfig
from planner.costs import costs_with_compute, default_costs, shipped_compute_profile
from planner.costs.compute import ComputeModel, load_profile
from planner.spec import load_cluster
from planner.spec.model import ModelSpec
from planner.spec.plan import TrainingSpec

CL = load_cluster("clusters/vtrain-a100-64x8-hdr.yaml")
GPT = ModelSpec(name="g", family="gpt", num_layers=24, hidden_size=4096, num_attention_heads=32, num_kv_heads=32,
                ffn_hidden_size=16384, vocab_size=50257, tied_embeddings=True)
TR = TrainingSpec(global_batch_size=512, seq_length=2048, precision="fp16")


def cfg(**kw):
    d = {"tp": 1, "pp": 1, "dp": 1, "micro_batch_size": 4, "num_microbatches": 8, "recompute": "none"}
    d.update(kw)
    return ParallelConfig(**d)


def test_large_gemms_scale_with_flops():
    m = ComputeModel(layer_overhead_s=0.0)
    a = m.layer_parts(GPT, CL, TR, cfg(micro_batch_size=8))["gemm"]
    b = m.layer_parts(GPT, CL, TR, cfg(micro_batch_size=16))["gemm"]
    assert 1.9 < b / a < 2.05          # big GEMMs are near the efficiency ceiling: ~linear in FLOPs


def test_small_gemms_run_below_peak_efficiency():
    m = ComputeModel()
    peak = CL.gpu.peak_flops("fp16")
    assert m._gemm_time(1e8, peak) > 5 * 1e8 / (peak * m.max_efficiency)


def test_recompute_modes_and_tp():
    m = ComputeModel()
    none, sel, full = (m.stage_times(GPT, CL, TR, cfg(recompute=r))[0] for r in ("none", "selective", "full"))
    assert none.recompute == 0.0 and 0 < sel.recompute < full.recompute
    assert full.backward - none.backward == pytest.approx(full.recompute)
    t1 = m.stage_times(GPT, CL, TR, cfg(tp=1))[0]
    t4 = m.stage_times(GPT, CL, TR, cfg(tp=4))[0]
    assert t4.forward < t1.forward and t4.tp_comm > 0 and t1.tp_comm == 0


def test_head_on_first_and_last_stage():
    m = ComputeModel()
    st = m.stage_times(GPT, CL, TR, cfg(pp=4))
    assert st[3].forward > st[1].forward and st[0].forward > st[1].forward
    assert st[1].forward == pytest.approx(st[2].forward)
    assert all(s.step > 0 for s in st)


def test_fp32_is_slower_than_fp16():
    m = ComputeModel()
    t16 = m.stage_times(GPT, CL, TR, cfg())[0].forward
    fp32 = TrainingSpec(global_batch_size=512, seq_length=2048, precision="fp32")
    t32 = m.stage_times(GPT, CL, fp32, cfg())[0].forward
    assert t32 > 4 * t16


def test_shipped_profiles_load_and_default_costs_pick_by_gpu(tmp_path):
    a100 = shipped_compute_profile("A100-SXM4-40GB")
    assert a100 and a100.endswith("a100_compute_profile.json")
    m = load_profile(a100)
    assert sorted(m.comm.allreduce_tables) == [2, 3, 4, 5, 6, 7, 8] and m.comm.grad_bytes == 2
    assert default_costs(CL).compute == m
    for gpu in ("H100-SXM5-80GB", "Tesla V100-SXM2-32GB"):
        assert load_profile(shipped_compute_profile(gpu)).max_efficiency > 0
    # a cluster's own profile wins over the shipped one
    p = tmp_path / "mine.json"
    p.write_text(json.dumps({"compute": {"max_efficiency": 0.5}, "comm": {"grad_bytes": 4}}))
    from dataclasses import replace
    mine = default_costs(replace(CL, profiles={"compute": str(p)}))
    assert mine.compute.max_efficiency == 0.5 and mine.comm.grad_bytes == 4
    assert costs_with_compute(m).comm is m.comm


@pytest.mark.parametrize("blob,key", [({"compute": {}, "extra": 1}, "extra"),
                                      ({"compute": {"max_eff": 0.5}}, "compute.max_eff"),
                                      ({"comm": {"bandwidth": 1}}, "comm.bandwidth"),
                                      ({"compute": {"max_efficiency": "high"}}, "compute.max_efficiency"),
                                      ({"format": "planner.compute-profile/2"}, "format")])
def test_profile_loader_rejects_unknown_keys_and_formats(tmp_path, blob, key):
    from planner.cli.main import main
    from planner.errors import SpecError
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(blob))
    with pytest.raises(SpecError) as e:
        load_profile(str(p))
    assert e.value.field == key and str(p) in str(e.value)
    assert main(["validate", "planner/data/vtrain/measured_multi_node.csv", "--cluster",
                 "clusters/vtrain-a100-64x8-hdr.yaml", "--compute-profile", str(p)]) == 2


def test_profile_without_format_is_version_1_and_save_load_keeps_predictions(tmp_path):
    from planner.costs.compute import PROFILE_FORMAT
    from planner.costs.compute_fit import IterationTimeFit
    a100 = shipped_compute_profile("A100-SXM4-40GB")
    assert "format" not in json.load(open(a100))          # shipped files predate the field
    est = IterationTimeFit.load(a100, cluster=CL)
    p = tmp_path / "again.json"
    import shutil
    shutil.copytree(os.path.join(os.path.dirname(a100), "vtrain"), tmp_path / "vtrain")
    out = est.save(str(p), {"kind": "copy"}, allreduce_tables=str(tmp_path / "vtrain" / "nccl_allreduce_nvlink"))
    assert out["format"] == PROFILE_FORMAT and json.load(open(p))["comm"]["allreduce_tables"] == \
        os.path.join("vtrain", "nccl_allreduce_nvlink")
    back = load_profile(str(p))
    for c in (cfg(), ParallelConfig(2, 2, 2, 2, 8, "interleaved", 2, "selective", 1, True)):
        assert back.stage_times(GPT, CL, TR, c) == est.model_.stage_times(GPT, CL, TR, c)
