"""One compute-capability table (spec.cluster.COMPUTE_CAPABILITY) behind every architecture rule: Transformer
Engine and fused attention from Ampere, FP8 from Ada / Hopper, any-layout FP8 GEMMs on data-centre Blackwell, and
Megatron-LM's CUDA_DEVICE_MAX_CONNECTIONS assert before Blackwell."""
from __future__ import annotations

import pytest

from planner.spec.cluster import (
    GPUSpec,
    before_blackwell,
    bf16_refusal,
    compute_capability,
    fp8_gemm_tn_only,
    fp8_refusal,
    fused_attention_refusal,
    runs_transformer_engine,
)


def gpu(kind: str) -> GPUSpec:
    return GPUSpec(type=kind, memory_GiB=80, peak_tflops={"bf16": 1, "fp8": 2})


@pytest.mark.parametrize("kind, cc", [("V100-SXM2-32GB", (7, 0)), ("A100-SXM4-80GB", (8, 0)), ("A10G", (8, 6)),
                                      ("L40S", (8, 9)), ("L4", (8, 9)), ("H100-SXM5-80GB", (9, 0)),
                                      ("GH200", (9, 0)), ("B200", (10, 0)), ("GB200-NVL72", (10, 0)),
                                      ("GB300", (10, 3)), ("RTX PRO 6000 Blackwell", (12, 0)), ("MI300X", None)])
def test_compute_capability_by_type_name(kind, cc):
    assert compute_capability(kind) == cc


@pytest.mark.parametrize("kind, te, fp8, tn_only, pre_bw", [
    ("V100-SXM2-32GB", False, False, True, True), ("A100-SXM4-80GB", True, False, True, True),
    ("L40S", True, True, True, True), ("H100-SXM5-80GB", True, True, True, True),
    ("B200", True, True, False, False), ("GB300", True, True, False, False),
    ("RTX PRO 6000 Blackwell", True, True, True, False),
    ("MI300X", True, True, True, True)])          # unknown: taken as new enough, stricter fp8 rule, assert kept
def test_every_architecture_rule_reads_the_one_table(kind, te, fp8, tn_only, pre_bw):
    g = gpu(kind)
    assert runs_transformer_engine(g) == te
    assert (fused_attention_refusal(g) is None) == te and (bf16_refusal(g) is None) == te
    assert (fp8_refusal(g) is None) == fp8
    assert fp8_gemm_tn_only(g) == tn_only
    assert before_blackwell(kind) == pre_bw
    if not te:
        assert "compute capability 7.0" in fused_attention_refusal(g)
