"""Re-plan after nodes fail or turn slow: the same job on the remaining nodes, in seconds."""
from __future__ import annotations

import dataclasses
import time

import numpy as np

from planner.errors import SpecError
from planner.search.solve import solve
from planner.solution import load_solution
from planner.spec import load_spec


def parse_nodes(text: str, cluster, file=None) -> list[int]:
    """'3,5' or host names -> node indices."""
    out = []
    for tok in [t.strip() for t in text.split(",") if t.strip()]:
        if tok.isdigit():
            k = int(tok)
        elif tok in cluster.node_names:
            k = cluster.node_names.index(tok)
        else:
            raise SpecError(file, "--exclude-nodes", f"{tok!r} is neither a node index nor a host name")
        if not 0 <= k < cluster.nodes:
            raise SpecError(file, "--exclude-nodes", f"node {k} is outside 0..{cluster.nodes - 1}")
        out.append(k)
    if not out:
        raise SpecError(file, "--exclude-nodes", "names no node")
    return sorted(set(out))


def replan(solution_path: str, exclude: str, time_limit_s: float = 10.0, seed: int = 0, spec_path: str | None = None):
    t0 = time.perf_counter()
    old = load_solution(solution_path)
    path = spec_path or old.get("spec")
    if not path:
        raise SpecError(solution_path, "spec", "names no spec file; pass --spec")
    spec = load_spec(path)
    drop = parse_nodes(exclude, spec.cluster, solution_path)
    keep = [n for n in range(spec.cluster.nodes) if n not in drop]
    if not keep:
        raise SpecError(None, "--exclude-nodes", "excludes every node")
    names = spec.cluster.node_names or tuple(f"node{n}" for n in range(spec.cluster.nodes))
    sub = dataclasses.replace(spec.cluster.subset(keep), node_names=tuple(names[n] for n in keep))
    spec2 = dataclasses.replace(spec, cluster=sub, name=f"{spec.name}-replan")
    sol = solve(spec2, time_limit_s=time_limit_s, seed=seed, simulate=False)
    sol.node_ids = np.array(keep)
    old_it = float(old.get("estimate", {}).get("iteration_s", float("nan")))
    sol.extra = {"replan": {"from": solution_path, "excluded_nodes": drop,
                            "old_iteration_s": old_it, "new_iteration_s": sol.estimate.iteration_s,
                            "slowdown": sol.estimate.iteration_s / old_it - 1 if old_it == old_it else None,
                            "wall_s": time.perf_counter() - t0}}
    return sol
