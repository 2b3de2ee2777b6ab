"""Every shipped model and cluster loads, and published sizes are met."""
import glob
import os

import numpy as np
import pytest
import yaml

from planner.spec import load_cluster, load_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = sorted(glob.glob(os.path.join(ROOT, "models", "*.yaml")))
CLUSTERS = sorted(glob.glob(os.path.join(ROOT, "clusters", "*.yaml")))

# Exact parameter counts of released checkpoints (sum of tensor sizes in the published weights /
# model cards). The shapes in models/ must reproduce these, not just the rounded names.
RELEASED = {
    "llama2-7b": 6_738_415_616,
    "llama2-13b": 13_015_864_320,
    "llama2-70b": 68_976_648_192,
    "llama3-8b": 8_030_261_248,
    "llama3-70b": 70_553_706_496,
    "llama3-405b": 405_853_388_800,
    # BLOOM has no learned positions (ALiBi) but an embedding LayerNorm; the gpt family counts
    # 2048 x 14336 positions instead (+29.4M, 0.017%).
    "bloom-176b": 176_247_271_424,
}

EXPECTED = {"megatron-1.7b", "megatron-3.6b", "megatron-7.5b", "megatron-18b", "megatron-39b", "megatron-76b",
            "megatron-145b", "megatron-310b", "megatron-530b", "megatron-1t", "gpt3-1.3b", "gpt3-2.7b",
            "gpt3-6.7b", "gpt3-13b", "gpt3-175b", "mt-nlg-530b", "bloom-176b", "llama2-7b", "llama2-13b",
            "llama2-70b", "llama3-8b", "llama3-70b", "llama3-405b"}


def _name(path):
    return os.path.splitext(os.path.basename(path))[0]


def test_catalog_is_complete():
    assert EXPECTED <= {_name(p) for p in MODELS}
    want = {"v100-16x8-edr", "v100-16x8-edr-het", "a100-16x8-hdr", "a100-16x8-hdr-het", "dgx-a100-superpod",
            "dgx-h100", "a100-32x8-het", "a100-64x8-het", "a100-128x8-het", "a100-256x8-het"}
    assert want <= {_name(p) for p in CLUSTERS}


@pytest.mark.parametrize("path", MODELS, ids=_name)
def test_model_loads_and_matches_published_size(path):
    m = load_model(path)
    assert m.name == _name(path)
    raw = yaml.safe_load(open(path))
    assert raw.get("source"), "every shipped model cites its source"
    published = raw["parameters_B"] * 1e9
    # a few %: papers round (Megatron's 1.65B is called 1.7B; Llama 2's 6.74B is called 7B)
    assert abs(m.num_params() - published) / published < 0.04
    if m.name in RELEASED:
        assert abs(m.num_params() - RELEASED[m.name]) / RELEASED[m.name] < 2e-4


def test_model_families_and_gqa():
    l3 = load_model(os.path.join(ROOT, "models", "llama3-405b.yaml"))
    assert (l3.family, l3.num_kv_heads, l3.ffn_hidden_size, l3.tied_embeddings) == ("llama", 8, 53248, False)
    l2 = load_model(os.path.join(ROOT, "models", "llama2-7b.yaml"))
    assert l2.num_kv_heads == l2.num_attention_heads == 32          # Llama 2 7B/13B are plain MHA
    g = load_model(os.path.join(ROOT, "models", "gpt3-175b.yaml"))
    assert (g.family, g.ffn_hidden_size, g.tied_embeddings, g.max_position_embeddings) == ("gpt", 4 * 12288, True, 2048)


@pytest.mark.parametrize("path", CLUSTERS, ids=_name)
def test_cluster_loads(path):
    c = load_cluster(path)
    assert c.name == _name(path)
    n = c.nodes
    off = c.bandwidth[~np.eye(n, dtype=bool)]
    assert c.bandwidth.shape == (n, n) and np.all(off > 0)
    # no link beats the rail's line rate (a one-node cluster has no inter-node links)
    assert off.size == 0 or off.max() <= c.inter.bandwidth_GBps + 1e-9
    gen = yaml.safe_load(open(path))["network"].get("generator")
    if gen:
        assert gen["nominal_GBps"] == pytest.approx(c.inter.bandwidth_GBps)
        assert c.name.endswith("-het")
        # measured-style: clearly below nominal and clearly not uniform
        assert np.median(off) < 0.8 * c.inter.bandwidth_GBps
        assert off.min() < 0.6 * np.median(off)
    for s in c.snapshots:
        assert s.shape == (n, n)


def test_snapshots_shipped_for_robust_planning():
    c = load_cluster(os.path.join(ROOT, "clusters", "a100-16x8-hdr-het.yaml"))
    assert len(c.snapshots) == 5
    off = ~np.eye(c.nodes, dtype=bool)
    for s in c.snapshots:
        r = np.log(s[off] / c.bandwidth[off])
        assert 0.02 < r.std() < 0.1                # drift 0.05 recorded in the YAML
        assert not np.allclose(s, c.bandwidth)
