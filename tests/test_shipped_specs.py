"""Shipped spec descriptions agree with their shipped plans, and editing a description leaves the plan's spec_hash
as it was (tryout 4, #17: "cp x tp inside a node" above a tp 2 x cp 8 plan on two nodes; the rule, docs/ARCHITECTURE.md:
tp x cp is part of a node or whole nodes)."""
from __future__ import annotations

import glob
import os

import pytest
import yaml

from planner.spec import load_spec

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _pairs():
    for sol in sorted(glob.glob(os.path.join(ROOT, "solutions", "*.yaml"))):
        spec = os.path.join(ROOT, "specs", os.path.basename(sol))
        if os.path.exists(spec):
            yield spec, sol


@pytest.mark.parametrize("spec, sol", list(_pairs()), ids=lambda p: os.path.basename(p))
def test_a_description_does_not_keep_a_plan_inside_a_node_that_spans_nodes(spec, sol):
    with open(spec) as f:
        text = (yaml.safe_load(f) or {}).get("description") or ""
    with open(sol) as f:
        s = yaml.safe_load(f)
    if ((s.get("layout") or {}).get("nodes_per_block") or 1) > 1:
        assert "inside a node" not in " ".join(text.split()), spec


@pytest.mark.parametrize("name", ["llama3-8b-128k-h100-32", "llama3-8b-128k-h100-64"])
def test_the_description_is_not_part_of_the_spec_hash(name):
    with open(os.path.join(ROOT, "solutions", f"{name}.yaml")) as f:
        want = yaml.safe_load(f)["spec_hash"]
    assert load_spec(os.path.join(ROOT, "specs", f"{name}.yaml")).digest() == want
