"""Megatron-Core's gradient buffer dtype (grad_reduce_in_fp32) and TE fp8 primary weights (fp8_param_gather):
memory, spec validation and export (docs/notes/memory.md, "Published runs that ran, Nov 23")."""
from __future__ import annotations

import dataclasses

import pytest
from plan_fixtures import tp2_solution as _solution

from planner.config import ParallelConfig
from planner.costs.memory import AnalyticalMemory, fp8_gemm_weights, grad_buffer_bytes, stage_params
from planner.errors import SpecError
from planner.export import megatron_args
from planner.io import load_yaml
from planner.spec.model import ModelSpec
from planner.spec.plan import TrainingSpec, parse_spec

LLAMA = ModelSpec(name="l", family="llama", num_layers=16, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
                  ffn_hidden_size=14336, vocab_size=128256)
BF16 = TrainingSpec(global_batch_size=64, seq_length=2048, precision="bf16")
CFG = ParallelConfig(2, 2, 4, 1, 16, "1f1b", 1, "none", 1, True)


def test_grad_buffer_follows_grad_reduce_in_fp32_as_megatron_core_allocates_it():
    assert grad_buffer_bytes(BF16) == 2.0
    assert grad_buffer_bytes(dataclasses.replace(BF16, grad_reduce_in_fp32=True)) == 4.0
    assert grad_buffer_bytes(dataclasses.replace(BF16, precision="fp32")) == 4.0
    assert grad_buffer_bytes(dataclasses.replace(BF16, pipeline_engine="deepspeed")) == 4.0   # its own fp32 buffers
    a16 = AnalyticalMemory().stage_memory(LLAMA, None, BF16, CFG, 0)
    a32 = AnalyticalMemory().stage_memory(LLAMA, None, dataclasses.replace(BF16, grad_reduce_in_fp32=True), CFG, 0)
    assert a32.gradients == pytest.approx(2 * a16.gradients)
    assert (a16.weights, a16.optimizer, a16.activations) == (a32.weights, a32.optimizer, a32.activations)
    # ZeRO-3 (torchtitan FSDP2) keeps fp32 parameters and so fp32 gradients, whatever the flag
    z3 = dataclasses.replace(CFG, zero=3)
    assert AnalyticalMemory().stage_memory(LLAMA, None, BF16, z3, 0).gradients == pytest.approx(
        AnalyticalMemory().stage_memory(LLAMA, None, dataclasses.replace(BF16, grad_reduce_in_fp32=True), z3,
                                        0).gradients)


def test_fp8_primary_weights_replace_the_bf16_weight_and_its_cached_fp8_copy():
    fp8 = dataclasses.replace(BF16, precision="fp8")
    plain = AnalyticalMemory().stage_memory(LLAMA, None, fp8, CFG, 0)
    gather = AnalyticalMemory().stage_memory(LLAMA, None, dataclasses.replace(fp8, fp8_param_gather=True), CFG, 0)
    # 2 bytes per GEMM weight less (fp8 data + transpose instead of bf16 + fp8 data + transpose), the rest equal
    assert plain.weights - gather.weights == pytest.approx(2 * fp8_gemm_weights(LLAMA, CFG, 0))
    assert gather.weights > 2 * stage_params(LLAMA, CFG, 0)        # bf16-sized, plus the scaling state
    assert (plain.gradients, plain.optimizer, plain.activations) == (gather.gradients, gather.optimizer,
                                                                      gather.activations)


def _spec(**training):
    d = {"model": load_yaml("models/llama3-8b.yaml"), "cluster": load_yaml("clusters/dgx-h100.yaml"),
         "training": {"global_batch_size": 64, "seq_length": 2048, **training}}
    d["cluster"].pop("profiles", None)
    return d


def test_fp8_param_gather_needs_fp8_and_is_named_when_wrong():
    assert parse_spec(_spec(precision="fp8", fp8_param_gather=True), "p.yaml").training.fp8_param_gather
    with pytest.raises(SpecError, match="training.fp8_param_gather"):
        parse_spec(_spec(precision="bf16", fp8_param_gather=True), "p.yaml")
    with pytest.raises(SpecError, match="training.fp8_param_gather"):
        parse_spec(_spec(precision="fp8", fp8_param_gather="yes please"), "p.yaml")


def test_export_matches_the_planned_gradient_buffer_and_fp8_weights():
    assert "--grad-reduce-in-bf16" in megatron_args(_solution())
    args = megatron_args(_solution(grad_reduce_in_fp32=True))
    assert "--accumulate-allreduce-grads-in-fp32" in args and "--grad-reduce-in-bf16" not in args
    assert "--fp8-param-gather" in megatron_args(_solution(precision="fp8", fp8_param_gather=True))
    assert "--fp8-param-gather" not in megatron_args(_solution(precision="fp8"))
