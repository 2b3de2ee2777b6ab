"""The fake-tensor profiler measures exactly the activation counts of Korthikanti et al. (GPT) and of the
analytical model (Llama, GQA), and the analytical static terms."""
import functools

import pytest

from planner.config import ParallelConfig
from planner.costs.memory import AnalyticalMemory, layer_activation_bytes
from planner.costs.published import korthikanti_layer_bytes
from planner.profile.memory import measure_stage
from planner.spec.model import ModelSpec
from planner.spec.plan import TrainingSpec

# the profiler builds the unfused layer and accumulates gradients in an fp32 main_grad (grad_reduce_in_fp32)
TR = TrainingSpec(global_batch_size=64, seq_length=1024, attention="unfused", grad_reduce_in_fp32=True)


def _model(family, layers, kv=16):
    f = 4 * 2048 if family == "gpt" else 5632
    return ModelSpec(name="m", family=family, num_layers=layers, hidden_size=2048, num_attention_heads=16,
                     num_kv_heads=kv, ffn_hidden_size=f, vocab_size=32000, tied_embeddings=family == "gpt")


def _per_layer_activation(family, cfg, kv=16, stage=1):
    """Activation bytes per layer per held micro-batch, from two profiles that differ by one layer per stage."""
    runs = [measure_stage(_model(family, cfg.pp * L, kv), TR, cfg, stage, L) for L in (1, 2)]
    d = (runs[1].after_forward - runs[1].static) - (runs[0].after_forward - runs[0].static)
    return d / runs[0].held_forwards, runs


@pytest.mark.parametrize("rc,sp,tp,tech", [("none", False, 1, "none"), ("none", False, 4, "none"),
                                           ("none", True, 4, "sp"), ("selective", False, 2, "selective"),
                                           ("selective", True, 4, "sp+selective"), ("full", False, 4, "full")])
def test_gpt_layer_activations_match_korthikanti_table2(rc, sp, tp, tech):
    cfg = ParallelConfig(tp, 2, 1, 1, 4, recompute=rc, sequence_parallel=sp)
    measured, _ = _per_layer_activation("gpt", cfg)
    published = korthikanti_layer_bytes(1024, 1, 2048, 16, tp, tech)
    assert measured == pytest.approx(published, rel=0.005)
    assert layer_activation_bytes(_model("gpt", 2), TR, cfg) == pytest.approx(published, rel=1e-9)


@pytest.mark.parametrize("kv,rc,sp", [(4, "none", True), (16, "none", False), (4, "selective", True)])
def test_llama_layer_activations_match_analytical(kv, rc, sp):
    cfg = ParallelConfig(4, 2, 1, 2, 4, recompute=rc, sequence_parallel=sp)
    measured, _ = _per_layer_activation("llama", cfg, kv)
    assert measured == pytest.approx(layer_activation_bytes(_model("llama", 2, kv), TR, cfg), rel=0.01)


@pytest.mark.parametrize("zero", [0, 1, 2])
def test_static_memory_matches_weights_grads_optimizer(zero):
    cfg = ParallelConfig(2, 2, 4, 1, 4, zero=zero)
    model = _model("llama", 4, 4)
    r = measure_stage(model, TR, cfg, 1, 2)
    a = AnalyticalMemory().stage_memory(model, None, TR, cfg, 1)
    # the profiler also holds the causal mask and RoPE tables; the rest is weights + grads + Adam state
    assert r.static == pytest.approx(a.weights + a.gradients + a.optimizer, rel=0.02)


@functools.cache
def _pipeline_stage(schedule, stage):
    """Stage `stage` of a 4-stage pipeline (8 micro-batches): the two tests below measure stage 1 under 1F1B and
    GPipe both, once (fake-tensor profiles are deterministic)."""
    return measure_stage(_model("gpt", 8), TR, ParallelConfig(1, 4, 1, 1, 8, schedule), stage, 2)


def test_in_flight_count_follows_schedule():
    held = {s: _pipeline_stage("1f1b", s).held_forwards for s in range(4)}
    assert held == {0: 4, 1: 3, 2: 2, 3: 1}
    assert _pipeline_stage("gpipe", 1).held_forwards == 8


def test_peak_grows_with_in_flight_micro_batches():
    p0 = _pipeline_stage("1f1b", 1).peak_allocated
    p1 = _pipeline_stage("gpipe", 1).peak_allocated
    assert p1 > p0 * 1.5


def test_custom_backward_functions_are_correct():
    # the memory-lean backward of the fused RMSNorm / SwiGLU stand-ins must still be the true gradient
    import torch

    from planner.profile.memory import _RMSNorm, _SwiGLU
    torch.manual_seed(0)
    x = torch.randn(4, 2, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w: _RMSNorm.apply(x, w, 1e-5), (x, w))
    y = torch.randn(4, 2, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(_SwiGLU.apply, (y,))


def test_softmax_backward_holds_the_cuda_temporary_off_cuda():
    # CUDA's _softmax_backward_data holds an input-sized temporary besides its output (measured on an H100);
    # off CUDA the profiler's softmax allocates it, so fake profiles see what a GPU allocates
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from planner.profile.memory import LiveBytes, _Softmax

    def backward_peak(softmax):
        with FakeTensorMode():
            tr = LiveBytes()
            with tr:
                x = torch.randn(4, 64, 64, dtype=torch.bfloat16, requires_grad=True)
                y = softmax(x)
                g = torch.ones_like(y)
                live = tr.live
                tr.reset_peak()
                y.backward(g)
                return tr.peak - live

    score = 4 * 64 * 64 * 2
    assert backward_peak(_Softmax.apply) - backward_peak(lambda x: torch.softmax(x, -1)) == score
    x = torch.randn(3, 5, 7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(_Softmax.apply, (x,))
