"""Re-plan after nodes fail or turn slow: the same job on the remaining nodes, in seconds."""
from __future__ import annotations

import dataclasses
import time

import numpy as np

from planner.errors import SpecError
from planner.search.solve import solve
from planner.solution import load_solution
from planner.spec import load_spec
from planner.spec.plan import ROBUST


def parse_nodes(text: str, cluster, file=None) -> list[int]:
    """'3,5' or host names -> node indices."""
    out = []
    for tok in [t.strip() for t in text.split(",") if t.strip()]:
        if tok.isascii() and tok.isdigit():         # str.isdigit also takes '²', which int() refuses
            k = int(tok)
        elif tok in cluster.node_names:
            k = cluster.node_names.index(tok)
        else:
            hosts = f" (host names: {', '.join(cluster.node_names)})" if cluster.node_names else \
                " (the cluster names no hosts: network.node_names)"
            raise SpecError(file, "--exclude-nodes", f"{tok!r} is neither a node index nor a host name{hosts}")
        if not 0 <= k < cluster.nodes:
            raise SpecError(file, "--exclude-nodes", f"node {k} is outside 0..{cluster.nodes - 1}")
        out.append(k)
    if not out:
        raise SpecError(file, "--exclude-nodes", "names no node")
    return sorted(set(out))


def replan(solution_path: str, exclude: str, time_limit_s: float = 10.0, seed: int = 0, spec_path: str | None = None,
           robust: str | None = None):
    """A new plan of the solution's job without the excluded nodes. A solution that is itself a re-plan keeps its
    earlier exclusions: they add up. Its spec is found as `planner simulate` finds it (the path as written,
    relative to the working folder, the solution's folder or the folder above), or given with spec_path.
    robust: the objective over the bandwidth snapshots; None keeps the solution's (a plan solved with
    `--robust worst` is re-planned worst-case too, not on the main matrix alone)."""
    import sys

    from planner.solution import solution_spec_path
    t0 = time.perf_counter()
    old = load_solution(solution_path)
    path = spec_path or solution_spec_path(old, solution_path)
    spec = load_spec(path)
    if old.get("spec_hash") and old["spec_hash"] != spec.digest():
        print(f"planner: warning: {path} is not the spec {solution_path} was solved from (spec_hash differs); the "
              "old and new iteration times compare different jobs", file=sys.stderr)
    before = [int(n) for n in (old.get("replan") or {}).get("excluded_nodes", [])
              if isinstance(n, int) and 0 <= n < spec.cluster.nodes]
    drop = sorted(set(parse_nodes(exclude, spec.cluster, solution_path)) | set(before))
    keep = [n for n in range(spec.cluster.nodes) if n not in drop]
    if not keep:
        raise SpecError(None, "--exclude-nodes", "excludes every node")
    names = spec.cluster.node_names or tuple(f"node{n}" for n in range(spec.cluster.nodes))
    sub = dataclasses.replace(spec.cluster.subset(keep), node_names=tuple(names[n] for n in keep))
    spec2 = dataclasses.replace(spec, cluster=sub, name=f"{spec.name}-replan")
    if robust is None:      # the solution's objective, as `solve` wrote it; an edited file is refused, not taken
        rec = old.get("solver") or {}
        if not isinstance(rec, dict):
            raise SpecError(solution_path, "solver", f"must be a mapping (the solver record), got {rec!r}")
        robust = rec.get("robust", "none")
        if robust not in ROBUST:
            raise SpecError(solution_path, "solver.robust", f"has {robust!r}, expected one of {list(ROBUST)} "
                            "(or pass --robust)")
        if robust != "none" and not spec.cluster.snapshots:
            # the objective came from the solution, the cluster from (another) spec: say where each came from
            raise SpecError(solution_path, "solver.robust", f"the solution was solved with --robust {robust}, but the "
                            f"cluster of {spec.source or 'its spec'} has no network.bandwidth_snapshots to take the "
                            f"{robust} case over; pass --robust none to re-plan on its bandwidth matrix")
    sol = solve(spec2, time_limit_s=time_limit_s, seed=seed, robust=robust)   # simulated, as every plan is
    sol.node_ids = np.array(keep)
    used = {w["node"] for w in sol.mapping}
    old_it = float(old.get("estimate", {}).get("iteration_s", float("nan")))
    sol.extra = {"replan": {"from": solution_path, "excluded_nodes": drop,
                            "excluded_hosts": [names[n] for n in drop] if spec.cluster.node_names else [],
                            "idle_nodes": [n for n in keep if n not in used],
                            "old_iteration_s": old_it, "new_iteration_s": sol.estimate.iteration_s,
                            "slowdown": sol.estimate.iteration_s / old_it - 1 if old_it == old_it else None,
                            "wall_s": time.perf_counter() - t0}}
    return sol
