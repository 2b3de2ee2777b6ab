"""YAML specs → typed, validated objects (errors name file, field and reason)."""
from planner.spec.cluster import ClusterSpec, GPUSpec, Link, parse_cluster
from planner.spec.model import ModelSpec, parse_model
from planner.spec.plan import (
    SearchSpec,
    SolverSpec,
    Spec,
    TrainingSpec,
    load_cluster,
    load_model,
    load_spec,
    parse_spec,
)

__all__ = ["ClusterSpec", "GPUSpec", "Link", "ModelSpec", "SearchSpec", "SolverSpec", "Spec", "TrainingSpec",
           "load_cluster", "load_model", "load_spec", "parse_cluster", "parse_model", "parse_spec"]
