"""planner import megatron: a Megatron-LM launch line -> plan spec, export -> import round trips, refusals."""
import glob
import json
import os
from dataclasses import replace

import pytest

from planner import megatron_import as mi
from planner.cli.main import main
from planner.config import ParallelConfig
from planner.costs.memory import padded_vocab
from planner.errors import SpecError
from planner.export import MEGATRON_FLAG, megatron_args, split_megatron_args
from planner.search.space import enumerate_configs
from planner.solution import load_solution, solution_spec_path
from planner.spec import load_spec

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "megatron")
H100_1 = """name: h100-1
gpu: {type: H100-SXM5-80GB, memory_GiB: 79.6, peak_tflops: {bf16: 989, fp16: 989, fp8: 1979, fp32: 67}}
nodes: 1
gpus_per_node: 8
network:
  intra_node: {bandwidth_GBps: 450, latency_us: 3}
  inter_node: {bandwidth_Gbps: 400, nics_per_node: 8, latency_us: 5}
"""


def test_flag_names_are_megatron_lm_options():
    # every flag export writes and import reads is an option of Megatron-LM's parser at the table's commit
    # (planner/data/megatron_flags.json, built from NVIDIA/Megatron-LM @ d98e8a64 by benchmarks/megatron_flags.py)
    table = mi.megatron_flags()
    assert table["commit"].startswith("d98e8a64")
    names = set(MEGATRON_FLAG.values()) | set(mi.REFUSED) | {"--num-layers", "--hidden-size", "--swiglu",
                                                               "--padded-vocab-size", "--num-query-groups"}
    assert not names - set(table["flags"])
    assert "--virtual-pipeline-model-parallel-size" not in table["flags"]     # not an argparse flag there


def _effective_overlap(o: dict, cfg: ParallelConfig) -> dict:
    """The overlap settings that act on this configuration (export writes only those)."""
    return {"grad_reduce": o["grad_reduce"], "param_gather": o["param_gather"] and cfg.zero >= 1,
            "tp_comm": o["tp_comm"] and cfg.sequence_parallel and cfg.tp > 1,
            "p2p": o["p2p"] or not (cfg.schedule == "interleaved" and cfg.pp > 1),
            "bucket_size": o.get("bucket_size") if o["grad_reduce"] else None}


MEGATRON_SOLUTIONS = [p for p in sorted(glob.glob(os.path.join(ROOT, "solutions", "*.yaml")))
                      if (load_solution(p).get("config") or {}).get("zero", 0) < 2
                      and load_solution(p).get("pipeline_engine", "megatron") == "megatron"]


def test_round_trip_covers_the_shipped_megatron_plans():
    assert len(MEGATRON_SOLUTIONS) >= 8


@pytest.mark.parametrize("path", MEGATRON_SOLUTIONS, ids=os.path.basename)
def test_export_import_round_trip(path):
    sol = load_solution(path)
    spec = load_spec(solution_spec_path(sol, path))
    flags, _ = split_megatron_args(megatron_args(sol, path, spec.cluster.gpu.type, spec.model,
                                                 spec.training.seq_length))
    cfg = ParallelConfig.from_dict(sol["config"], path)
    text = "torchrun pretrain_gpt.py " + " ".join(flags)      # the export's line as written: model flags included
    run = mi.read_run(mi.parse_launch(text), cfg.num_gpus)
    assert run.config == cfg
    m = spec.model
    assert {k: v for k, v in run.model.items() if k != "name"} == {
        "family": m.family, "num_layers": m.num_layers, "hidden_size": m.hidden_size,
        "num_attention_heads": m.num_attention_heads, "num_kv_heads": m.num_kv_heads,
        "ffn_hidden_size": m.ffn_hidden_size, "vocab_size": padded_vocab(m, cfg.tp),
        "tied_embeddings": m.tied_embeddings,
        "max_position_embeddings": max(spec.training.seq_length, m.max_position_embeddings)}
    t, tr = spec.training, run.training
    assert (tr["global_batch_size"], tr["seq_length"], tr["precision"]) == (t.global_batch_size, t.seq_length,
                                                                            t.precision)
    assert tr.get("grad_reduce_in_fp32", False) == (t.grad_reduce_in_fp32 and t.precision != "fp32")
    assert tr.get("attention", "fused") == t.attention
    assert tr.get("attention_backend", "auto") == t.attention_backend
    if t.precision == "fp8":
        assert (tr["fp8_recipe"], tr["fp8_param_gather"]) == (t.fp8_recipe, t.fp8_param_gather)
    if cfg.cp > 1:
        assert tr["cp_comm"] == sol["cp_comm"]
    # the solution's overlap is the spec's as it runs on the GPU (tp_comm off before Ampere)
    assert _effective_overlap(tr["overlap"], cfg) == _effective_overlap(sol["overlap"], cfg)


def _write(tmp_path, text, name="run.sh"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_gpt3_175b_example_line(tmp_path, capsys):
    # tests/data/megatron/gpt3_175b.sh: NVIDIA/Megatron-LM @ d98e8a64 examples/gpt3/train_gpt3_175b_distributed.sh
    out = tmp_path / "gpt3.yaml"
    assert main(["import", "megatron", os.path.join(DATA, "gpt3_175b.sh"), "-o", str(out), "--cluster",
                 os.path.join(ROOT, "clusters", "dgx-h100-16x8.yaml"), "--vocab-size", "50257"]) == 0
    cap = capsys.readouterr()
    assert cap.out.strip() == f"planner estimate {out} --tp 8 --pp 16 --dp 1 --mbs 1"
    assert "--lr " in cap.err and "--data-path" in cap.err          # not read: listed, not dropped
    spec = load_spec(str(out))
    m = spec.model
    assert (m.family, m.num_layers, m.hidden_size, m.num_attention_heads, m.ffn_hidden_size, m.tied_embeddings) == (
        "gpt", 96, 12288, 96, 4 * 12288, True)
    assert m.vocab_size == 51200              # 50257 padded to a multiple of 128 x tp 8, as Megatron-LM pads it
    assert (spec.training.global_batch_size, spec.training.seq_length, spec.training.precision) == (1536, 2048, "fp16")
    assert not spec.training.grad_reduce_in_fp32 and not spec.training.overlap.grad_reduce
    assert list(enumerate_configs(spec)) == [ParallelConfig(8, 16, 1, 1, 1536)]


def test_llama3_8b_fp8_example_line(tmp_path, capsys):
    # tests/data/megatron/llama3_8b_h100_fp8.sh: NVIDIA/Megatron-LM @ d98e8a64
    # examples/llama/train_llama3_8b_h100_fp8.sh
    cl = _write(tmp_path, H100_1, "h100-1.yaml")
    out = tmp_path / "l8.yaml"
    assert main(["import", "megatron", os.path.join(DATA, "llama3_8b_h100_fp8.sh"), "-o", str(out), "--cluster", cl,
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["config"] == {"tp": 1, "pp": 1, "dp": 8, "micro_batch_size": 1, "num_microbatches": 16,
                           "schedule": "1f1b", "vpp": 1, "recompute": "none", "zero": 1, "sequence_parallel": False}
    assert d["estimate_command"].endswith("--tp 1 --pp 1 --dp 8 --mbs 1 --zero 1")
    assert any("--apply-layernorm-1p" in w for w in d["warnings"])
    assert any("--sequence-parallel with tp 1" in n for n in d["assumed"])
    spec = load_spec(str(out))
    m, t = spec.model, spec.training
    assert (m.family, m.num_kv_heads, m.ffn_hidden_size, m.vocab_size, m.tied_embeddings) == ("llama", 8, 14336,
                                                                                            128256, False)
    assert (t.precision, t.fp8_recipe, t.fp8_param_gather, t.grad_reduce_in_fp32, t.attention_backend) == (
        "fp8", "delayed", True, False, "cudnn")
    assert t.overlap.grad_reduce and t.overlap.param_gather and not t.overlap.tp_comm


def test_free_search_holds_the_run(tmp_path, capsys):
    cl = _write(tmp_path, H100_1, "h100-1.yaml")
    line = _write(tmp_path, "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 "
                            "--max-position-embeddings 4096 --swiglu --normalization RMSNorm --position-embedding-type "
                            "rope --disable-bias-linear --untie-embeddings-and-output-weights --vocab-size 32000 "
                            "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "
                            "--num-layers-per-virtual-pipeline-stage 4 --micro-batch-size 3 --global-batch-size 48 "
                            "--bf16 --sequence-parallel --recompute-activations\n")
    out = tmp_path / "free.yaml"
    assert main(["import", "megatron", line, "-o", str(out), "--cluster", cl, "--free"]) == 0
    run_cfg = ParallelConfig(2, 2, 2, 3, 8, "interleaved", 4, "selective", 0, True)
    assert capsys.readouterr().out.strip().endswith("--schedule interleaved --vpp 4 --recompute selective --sp")
    spec = load_spec(str(out))
    assert spec.model.ffn_hidden_size == int((4 * 4096 * 2 / 3) / 64) * 64      # Megatron-LM's --swiglu default
    configs = list(enumerate_configs(spec))
    assert run_cfg in configs and len(configs) > 1


def test_uneven_split_is_pinned(tmp_path):
    cl = _write(tmp_path, H100_1, "h100-1.yaml")
    line = _write(tmp_path, "python pretrain_gpt.py --num-layers 30 --hidden-size 2048 --num-attention-heads 16 "
                            "--seq-length 2048 --max-position-embeddings 2048 --padded-vocab-size 51200 "
                            "--pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 6 "
                            "--decoder-last-pipeline-num-layers 6 --micro-batch-size 1 --global-batch-size 16 --bf16")
    out = tmp_path / "u.yaml"
    assert main(["import", "megatron", line, "-o", str(out), "--cluster", cl]) == 0
    assert list(enumerate_configs(load_spec(str(out)))) == [
        ParallelConfig(1, 4, 2, 1, 8, first_stage_layers=6, last_stage_layers=6)]


def test_block_recompute_is_read(tmp_path, capsys):
    """--recompute-method block --recompute-num-layers N: the plan's `block` with its N (uniform 1 stays `full`);
    the pinned search holds the configuration with N left to screening, and the estimate command carries the run's."""
    cl = _write(tmp_path, H100_1, "h100-1.yaml")
    line = _write(tmp_path, "--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 "
                            "--max-position-embeddings 2048 --padded-vocab-size 51200 --micro-batch-size 1 "
                            "--global-batch-size 16 --bf16 --pipeline-model-parallel-size 2 "
                            "--recompute-granularity full --recompute-method block --recompute-num-layers 5")
    out = tmp_path / "b.yaml"
    assert main(["import", "megatron", line, "-o", str(out), "--cluster", cl, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["config"]["recompute"] == "block" and d["config"]["recompute_layers"] == 5
    assert d["estimate_command"].endswith("--recompute block --recompute-layers 5")
    assert any("--recompute-num-layers 5" in n for n in d["assumed"])
    spec = load_spec(str(out))
    assert spec.search.recompute == ("block",)
    assert list(enumerate_configs(spec)) == [ParallelConfig(1, 2, 4, 1, 4, recompute="block")]


@pytest.mark.parametrize("n", [12, 20])
def test_block_recompute_over_every_layer_is_full(tmp_path, capsys, n):
    """Block N covering each chunk's 12 layers checkpoints every layer: imported as `full`, whose pinned search holds
    it (the search has no block form there), not refused as a configuration the planner does not search."""
    cl = _write(tmp_path, H100_1, "h100-1.yaml")
    line = _write(tmp_path, "--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 "
                            "--max-position-embeddings 2048 --padded-vocab-size 51200 --micro-batch-size 1 "
                            "--global-batch-size 16 --bf16 --pipeline-model-parallel-size 2 "
                            f"--recompute-granularity full --recompute-method block --recompute-num-layers {n}")
    out = tmp_path / "b.yaml"
    assert main(["import", "megatron", line, "-o", str(out), "--cluster", cl, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["config"]["recompute"] == "full" and d["config"].get("recompute_layers") is None
    assert any(f"--recompute-num-layers {n}" in a and "full recompute" in a for a in d["assumed"])
    assert list(enumerate_configs(load_spec(str(out)))) == [ParallelConfig(1, 2, 4, 1, 4, recompute="full")]


def test_block_as_full_keeps_block_below_the_chunk():
    from planner.search.space import block_as_full
    cfg = ParallelConfig(1, 2, 4, 1, 4, recompute="block", recompute_layers=11)
    assert block_as_full(cfg, 24) is cfg
    assert block_as_full(replace(cfg, recompute_layers=12), 24) == replace(cfg, recompute="full",
                                                                             recompute_layers=None)
    z3 = ParallelConfig(1, 2, 4, 1, 4, recompute="block", recompute_layers=12, zero=3)    # torchtitan's every n-th
    assert block_as_full(z3, 24) is z3


BASE = ("--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 "
        "--padded-vocab-size 51200 --micro-batch-size 1 --global-batch-size 16 --bf16 ")


@pytest.mark.parametrize("extra, flag", [
    ("--num-virtual-stages-per-pipeline-rank 2", "--num-virtual-stages-per-pipeline-rank"),   # vpp without pp > 1
    ("--tensor-model-parallel-size nan", "--tensor-model-parallel-size"),
    ("--tensor-model-parallel-size -2", "--tensor-model-parallel-size"),
    ("--micro-batch-size inf", "--micro-batch-size"),
    ("--pipeline-model-parallel-size $PP", "--pipeline-model-parallel-size"),
    ("--num-experts 8", "--num-experts"),
    ("--swiglu", "--normalization"),                          # SwiGLU with LayerNorm: neither family
    ("--fp16", "--fp16"),                                     # with --bf16
    ("--overlap-param-gather", "--overlap-param-gather"),     # without --overlap-grad-reduce
    ("--recompute-granularity full --recompute-method uniform --recompute-num-layers 2", "--recompute-num-layers"),
    ("--recompute-granularity full --recompute-method block", "--recompute-num-layers"),
    ("--recompute-granularity selective --recompute-modules core_attn mlp", "--recompute-modules"),
    ("--recompute-granularity selective --recompute-modules layernorm", "--recompute-modules"),
    # Megatron-Core's TransformerConfig: 'selective recompute_num_layers must be None' (it was read as selective)
    ("--recompute-granularity selective --recompute-num-layers 2", "--recompute-num-layers"),
    ("--tensor-model-parallel-size 3", "--tensor-model-parallel-size"),    # the planner's rules, named by flag
    ("--context-parallel-size 2 --cp-comm-type a2a+p2p", "--cp-comm-type"),
    ("--optimizer muon", "--optimizer"),
    # settings the planner models in one form only: refused, not listed among the flags it does not read
    ("--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout Et*12|t*12L",
     "--pipeline-model-parallel-layout"),
    ("--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 "
     "--microbatch-group-size-per-virtual-pipeline-stage 4", "--microbatch-group-size-per-virtual-pipeline-stage"),
    ("--use-distributed-optimizer --num-distributed-optimizer-instances 2", "--num-distributed-optimizer-instances"),
    ("--overlap-grad-reduce --ddp-num-buckets 4", "--ddp-num-buckets"),
    ("--cpu-offloading-num-layers 2", "--cpu-offloading-num-layers"),
    ("--optimizer-cpu-offload", "--optimizer-cpu-offload"),
    ("--use-precision-aware-optimizer --exp-avg-dtype bf16", "--exp-avg-dtype"),
    ("--main-grads-dtype bf16", "--main-grads-dtype"),
])
def test_refusals_name_the_flag(tmp_path, capsys, extra, flag):
    cl = _write(tmp_path, H100_1, "h100-1.yaml")
    line = _write(tmp_path, BASE + extra)
    assert main(["import", "megatron", line, "-o", str(tmp_path / "s.yaml"), "--cluster", cl]) == 2
    err = capsys.readouterr().err
    assert f"{flag}:" in err and "Traceback" not in err
    assert not (tmp_path / "s.yaml").exists()


def test_modelled_settings_at_their_default_are_read(tmp_path, capsys):
    # the refused-unless-default flags at Megatron-LM's default are read (not warned as unread), the group size's
    # default being the pipeline size
    cl = _write(tmp_path, H100_1, "h100-1.yaml")
    line = _write(tmp_path, BASE + "--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 "
                  "--microbatch-group-size-per-virtual-pipeline-stage 2 --use-distributed-optimizer "
                  "--num-distributed-optimizer-instances 1 --cpu-offloading-num-layers 0 --main-grads-dtype fp32 "
                  "--exp-avg-sq-dtype fp32")
    assert main(["import", "megatron", line, "-o", str(tmp_path / "s.yaml"), "--cluster", cl, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["schedule"] == "interleaved" and out["config"]["zero"] == 1
    assert not any("group-size" in w or "instances" in w or "offloading" in w or "dtype" in w
                   for w in out["warnings"])


def test_world_size_must_be_the_clusters(tmp_path, capsys):
    cl = _write(tmp_path, H100_1, "h100-1.yaml")
    line = _write(tmp_path, "torchrun --nnodes 2 --nproc-per-node 8 pretrain_gpt.py " + BASE)
    assert main(["import", "megatron", line, "-o", str(tmp_path / "s.yaml"), "--cluster", cl]) == 2
    assert "--cluster: has 8 GPUs, the run 16" in capsys.readouterr().err


def test_a_run_on_the_first_nodes_of_a_larger_cluster(tmp_path, capsys):
    # one node of a 4-node cluster: the spec takes the cluster's first node ({path, gpus}), as a sweep does
    cl = _write(tmp_path, H100_1.replace("nodes: 1", "nodes: 4").replace("name: h100-1", "name: h100-4"),
                "h100-4.yaml")
    line = _write(tmp_path, "torchrun --nnodes 1 --nproc-per-node 8 pretrain_gpt.py " + BASE)
    out = tmp_path / "s.yaml"
    assert main(["import", "megatron", line, "-o", str(out), "--cluster", cl, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["world_size"] == 8 and any("first 1 of the cluster's 4 nodes" in n for n in d["assumed"])
    spec = load_spec(str(out))
    assert spec.cluster.num_gpus == 8 and spec.cluster.nodes == 1
    # a run that is not a whole number of the cluster's nodes is still refused
    odd = _write(tmp_path, "torchrun --nnodes 1 --nproc-per-node 4 pretrain_gpt.py " + BASE, "odd.sh")
    assert main(["import", "megatron", odd, "-o", str(tmp_path / "o.yaml"), "--cluster", cl]) == 2
    assert "not a whole number of the cluster's nodes" in capsys.readouterr().err


def test_spec_cluster_path_and_gpus(tmp_path, capsys):
    """A plan spec's cluster may be {path, gpus}: the first gpus / gpus_per_node nodes of a cluster file."""
    import yaml
    cl = _write(tmp_path, H100_1.replace("nodes: 1", "nodes: 4"), "h100-4.yaml")
    spec = {"name": "p", "model": {"name": "m", "family": "llama", "num_layers": 4, "hidden_size": 1024,
                                   "num_attention_heads": 8, "vocab_size": 32000},
            "cluster": {"path": os.path.basename(cl), "gpus": 16},
            "training": {"global_batch_size": 32, "seq_length": 1024}}
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(spec))
    s = load_spec(str(p))
    assert s.cluster.nodes == 2 and s.cluster.num_gpus == 16
    for gpus, why in ((12, "not a whole number"), (40, "more than"), (0, ">= 1")):
        p.write_text(yaml.safe_dump({**spec, "cluster": {"path": os.path.basename(cl), "gpus": gpus}}))
        assert main(["estimate", str(p), "--tp", "1", "--pp", "1", "--dp", "8", "--mbs", "1"]) == 2
        err = capsys.readouterr().err
        assert "cluster.gpus" in err and why in err
    p.write_text(yaml.safe_dump({**spec, "cluster": {"path": "none.yaml", "gpus": 8}}))
    assert main(["estimate", str(p), "--tp", "1", "--pp", "1", "--dp", "8", "--mbs", "1"]) == 2
    assert "cluster.path" in capsys.readouterr().err
    p.write_text(yaml.safe_dump({**spec, "cluster": {"path": os.path.basename(cl), "gpus": 8, "nodes": 1}}))
    assert main(["estimate", str(p), "--tp", "1", "--pp", "1", "--dp", "8", "--mbs", "1"]) == 2
    assert "nodes" in capsys.readouterr().err


def test_unknown_and_repeated_flags_are_warned(tmp_path, capsys):
    cl = _write(tmp_path, H100_1, "h100-1.yaml")
    line = _write(tmp_path, "# a comment\n" + BASE.replace("--bf16 ", "--bf16 \\\n  # inline comment\n  ")
                  + "--no-such-flag 3 --micro-batch-size 2\n")
    assert main(["import", "megatron", line, "-o", str(tmp_path / "s.yaml"), "--cluster", cl, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["config"]["micro_batch_size"] == 2                 # the last value, as argparse keeps it
    assert any("--no-such-flag" in w and "not Megatron-LM flags" in w for w in d["warnings"])
    assert any("--micro-batch-size" in w and "more than once" in w for w in d["warnings"])


def test_parse_errors():
    with pytest.raises(SpecError, match="no flag and no value"):
        mi.parse_launch("--bf16 stray")
    with pytest.raises(SpecError, match="takes no value"):
        mi.parse_launch("--bf16=1")
    with pytest.raises(SpecError, match="not a shell command line"):
        mi.parse_launch("--num-layers '2")
    line = mi.parse_launch("--cp-comm-type p2p p2p --seq-length=4096")
    assert line.flags == {"--cp-comm-type": ["p2p", "p2p"], "--seq-length": ["4096"]}


def test_search_pipeline_keys(tmp_path):
    from planner.spec.plan import parse_spec
    base = {"model": os.path.join(ROOT, "models", "gpt3-1.3b.yaml"), "cluster": _write(tmp_path, H100_1, "c.yaml"),
            "training": {"global_batch_size": 16, "seq_length": 2048}}
    spec = parse_spec({**base, "search": {"pipeline_parallel": [2], "tensor_parallel": [1], "uneven_stages": "none",
                                          "recompute": ["none"], "zero": [0], "micro_batch_sizes": [1]}})
    assert {c.pp for c in enumerate_configs(spec)} == {2}
    with pytest.raises(SpecError, match="search.pipeline_split"):
        parse_spec({**base, "search": {"pipeline_split": {"first_stage_layers": 4}, "uneven_stages": [1]}})
    with pytest.raises(SpecError, match="search.pipeline_split"):
        parse_spec({**base, "search": {"pipeline_split": {"first_stage_layers": 4, "account_loss": True}}})
    with pytest.raises(SpecError, match="search.pipeline_split"):
        parse_spec({**base, "search": {"pipeline_split": {"account_loss": False}}})


def test_cross_entropy_loss_fusion_is_read(tmp_path, capsys):
    # native (the default): the same fp32 copy of the logits as the unfused loss, so read with nothing to change;
    # te: read, with a note that the plan over-counts the loss's memory
    cl = _write(tmp_path, H100_1, "h100-1.yaml")
    for extra, note in (("--cross-entropy-loss-fusion ", False),
                        ("--cross-entropy-loss-fusion --cross-entropy-fusion-impl te ", True)):
        line = _write(tmp_path, BASE + extra)
        assert main(["import", "megatron", line, "-o", str(tmp_path / "s.yaml"), "--cluster", cl, "--json"]) == 0
        d = json.loads(capsys.readouterr().out)
        assert not any("--cross-entropy" in w for w in d["warnings"])
        assert any("fusion-impl te" in n for n in d["assumed"]) == note


def test_exported_line_imports_as_written(tmp_path, capsys):
    """`planner export --format megatron` writes the model's flags too (a pretrain_gpt.py line runs as written):
    its output, saved to a file, imports back to the same configuration without adding anything."""
    path = os.path.join(ROOT, "solutions", "llama3-70b-h100-256.yaml")
    assert main(["export", path, "--format", "megatron"]) == 0
    line = capsys.readouterr().out
    assert line.startswith("--num-layers 80 ")
    args = tmp_path / "args.txt"
    args.write_text(line)
    out = tmp_path / "run.yaml"
    assert main(["import", "megatron", str(args), "-o", str(out), "--cluster",
                 os.path.join(ROOT, "clusters", "dgx-h100-het.yaml")]) == 0
    sol, spec = load_solution(path), load_spec(str(out))
    c = sol["config"]
    assert (spec.search.tensor_parallel, spec.search.pipeline_parallel) == ((c["tp"],), (c["pp"],))
    assert (spec.model.num_layers, spec.model.num_kv_heads, spec.training.seq_length) == (80, 8, 8192)


def test_exported_vocab_is_the_planned_padded_one(capsys):
    """--padded-vocab-size is the embedding's rows as the plan counts them (128 x tp multiple, memory.padded_vocab):
    GPT-2's 50257 at tp 4 does not divide over the tensor ranks, which Megatron-Core asserts when it builds the
    embedding (megatron/core/tensor_parallel/utils.py VocabUtility.vocab_range_from_global_vocab_size @ d98e8a64)."""
    path = os.path.join(ROOT, "solutions", "gpt3-175b-a100-het-1024.yaml")
    assert main(["export", path, "--format", "megatron"]) == 0
    words = capsys.readouterr().out.split()
    rows = int(words[words.index("--padded-vocab-size") + 1])
    tp = int(words[words.index("--tensor-model-parallel-size") + 1])
    assert (tp, rows) == (4, 50688) and rows % tp == 0


def test_export_says_when_it_cannot_write_the_model_flags(tmp_path, capsys):
    """A solution whose spec cannot be read: the parallelism flags, and a comment naming what to add."""
    sol = load_solution(os.path.join(ROOT, "solutions", "llama3-70b-h100-256.yaml"))
    text = open(os.path.join(ROOT, "solutions", "llama3-70b-h100-256.yaml")).read()
    moved = tmp_path / "moved.yaml"
    moved.write_text(text.replace(f"spec: {sol['spec']}", "spec: nowhere/missing.yaml"))
    assert main(["export", str(moved), "--format", "megatron"]) == 0
    out = capsys.readouterr().out
    assert "--num-layers" not in out.split("#")[0]
    assert "the model's flags (--num-layers" in out
