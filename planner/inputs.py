"""The files a command reads through a spec, a cluster or a solution: what its output flags must not overwrite
(planner.io.check_out). Paths resolve as the loaders resolve them (relative to the file that names them); a file
that does not parse here gives only itself, the loader reports what is wrong with it."""
from __future__ import annotations

import os

from planner.errors import SpecError
from planner.io import load_yaml


def _read(path: str):
    try:
        return load_yaml(path, finite=False)
    except SpecError:
        return None


def _cluster_refs(data, base: str) -> dict[str, str]:
    """The measured data a cluster mapping names: bandwidth matrices and profiles."""
    out: dict[str, str] = {}
    if not isinstance(data, dict):
        return out
    net = data.get("network")
    if isinstance(net, dict):
        m = net.get("bandwidth_matrix")
        if isinstance(m, str):
            out[os.path.normpath(os.path.join(base, m))] = "the cluster's bandwidth matrix (network.bandwidth_matrix)"
        snaps = net.get("bandwidth_snapshots")
        for i, sp in enumerate(snaps if isinstance(snaps, list) else []):
            if isinstance(sp, str):
                out[os.path.normpath(os.path.join(base, sp))] = (f"a measured bandwidth snapshot of the cluster "
                                                                 f"(network.bandwidth_snapshots[{i}])")
    profiles = data.get("profiles")
    for k, v in (profiles.items() if isinstance(profiles, dict) else ()):
        if isinstance(v, str):
            out[os.path.normpath(os.path.join(base, v))] = f"the cluster's {k} profile (profiles.{k})"
    return out


def cluster_inputs(path: str) -> dict[str, str]:
    """{path: what it is} of a cluster file and the measured data it names."""
    return {path: "the cluster file", **_cluster_refs(_read(path), os.path.dirname(path))}


def spec_inputs(path: str) -> dict[str, str]:
    """{path: what it is} of a plan spec, its model and cluster files and the cluster's measured data."""
    out = {path: "the spec"}
    raw = _read(path)
    if not isinstance(raw, dict):
        return out
    base = os.path.dirname(path)
    m = raw.get("model")
    if isinstance(m, str):
        out[os.path.normpath(os.path.join(base, m))] = "the spec's model file"
    c = raw.get("cluster")
    if isinstance(c, dict) and isinstance(c.get("path"), str):      # {path, gpus}: part of a cluster file
        c = c["path"]
    if isinstance(c, str):
        cpath = os.path.normpath(os.path.join(base, c))
        out.update({k: v for k, v in cluster_inputs(cpath).items() if k not in out})
        out[cpath] = "the spec's cluster file"
    else:
        out.update(_cluster_refs(c, base))
    return out


def solution_inputs(path: str, spec_path: str | None = None) -> dict[str, str]:
    """{path: what it is} of a solution file and of the spec it names (or spec_path), with the spec's own inputs."""
    out = {path: "the solution"}
    if spec_path is None:
        raw = _read(path)
        if isinstance(raw, dict):
            from planner.solution import solution_spec_path
            try:
                spec_path = solution_spec_path(raw, path)
            except SpecError:
                spec_path = None
    if spec_path:
        out.update({k: v for k, v in spec_inputs(spec_path).items() if k not in out})
    return out


def plan_inputs(path: str) -> dict[str, str]:
    """A spec's or a solution's inputs (`simulate SPEC|SOLUTION`): a YAML with `config` and `spec` is a solution."""
    raw = _read(path)
    if isinstance(raw, dict) and "config" in raw and "spec" in raw:
        return solution_inputs(path)
    return spec_inputs(path)
