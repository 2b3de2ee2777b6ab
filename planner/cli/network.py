"""`planner network report CLUSTER.yaml`: spread of a cluster's measured bandwidth snapshots per link."""
from __future__ import annotations

import sys

from planner.errors import SpecError


def register(subparsers):
    p = subparsers.add_parser("network", help="inspect measured networks (bandwidth snapshots)")
    sub = p.add_subparsers(dest="network_cmd", metavar="CMD")
    sub.required = True
    r = sub.add_parser("report", help="per-link spread (mean, min, max, CV) over bandwidth snapshots")
    r.add_argument("inputs", nargs="+", metavar="CLUSTER.yaml | MATRIX.csv",
                   help="a cluster spec (its network.bandwidth_snapshots) or several matrix CSVs")
    r.add_argument("--top", type=int, default=10, help="how many of the most variable links to list")
    r.add_argument("--include-main", action="store_true",
                   help="also count the cluster's bandwidth_matrix as a snapshot")
    r.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    r.set_defaults(func=_report)


def load_snapshots(inputs, include_main=False):
    """(snapshots, node names, source, the cluster's own snapshot count or None for CSVs) from one cluster YAML or
    several matrix CSVs."""
    from planner.profile.snapshots import cluster_snapshots
    from planner.spec.cluster import read_matrix
    if len(inputs) == 1 and inputs[0].endswith((".yaml", ".yml")):
        from planner.spec import load_cluster
        c = load_cluster(inputs[0])
        return cluster_snapshots(c, include_main), c.node_names, c.name, len(c.snapshots)
    if not all(p.endswith(".csv") for p in inputs):
        raise SpecError(None, "inputs", "give one cluster YAML or one or more matrix .csv files")
    first = _size(inputs[0])
    from planner.profile.network import csv_node_names
    names = csv_node_names(inputs[0])
    for p in inputs[1:]:            # snapshots of one cluster: the same hosts in the same order, where both say
        other = csv_node_names(p)
        if names and other and tuple(other) != tuple(names):
            raise SpecError(p, "node_names", f"hosts {list(other)} differ from {inputs[0]}'s {list(names)}: "
                            "snapshots must be of the same nodes in the same order")
    return ([read_matrix(p, p, "matrix", first) for p in inputs], names if len(names) == first else (),
            ", ".join(inputs), None)


def _size(path):
    import os
    if not os.path.exists(path):
        raise SpecError(path, None, "file does not exist")
    with open(path) as fh:
        for line in fh:
            s = line.strip()
            if s and not s.startswith("#"):
                try:
                    return len([float(c) for c in s.replace(";", ",").split(",")])
                except ValueError:
                    continue
    raise SpecError(path, None, "no numeric rows")


def _report(args) -> int:
    from planner.io import print_json
    from planner.profile.snapshots import spread_report
    if args.top < 0:
        raise SpecError(None, "--top", f"must be >= 0, got {args.top}")
    snaps, names, source, own = load_snapshots(args.inputs, args.include_main)
    try:
        rep = spread_report(snaps, names, args.top)
    except ValueError as e:
        raise SpecError(args.inputs[0], "network.bandwidth_snapshots", str(e)) from None
    if args.json:
        # cluster_snapshots: the cluster's own network.bandwidth_snapshots (0: none, its main matrix reported; null
        # for CSV inputs), since `snapshots` counts the matrices reported, the main one included
        print_json({"source": source, "cluster_snapshots": own, **rep.to_dict()})
        return 0
    out = sys.stdout
    if own == 0:        # tryout 8: "1 snapshot(s)" read as if the cluster had one; it has none, only its main matrix
        out.write(f"{source}: no bandwidth snapshots (network.bandwidth_snapshots); its main matrix, {rep.nodes} "
                  f"nodes, {rep.links} directed links\n")
    else:
        out.write(f"{source}: {rep.snapshots} snapshot(s) of {rep.nodes} nodes, {rep.links} directed links\n")
    out.write(f"  mean link bandwidth {rep.mean_GBps:.2f} GB/s; "
              f"slowest link in the worst case {rep.worst_GBps:.2f} GB/s\n")
    if rep.snapshots == 1:
        # one matrix has no spread: the coefficients and the "most variable" list would all read 0
        out.write("  only one matrix, so no spread to report (a cluster lists its repeated measurements in "
                  "network.bandwidth_snapshots; --include-main counts its bandwidth matrix as one of them)\n")
        return 0
    out.write(f"  coefficient of variation per link: mean {rep.mean_cv:.3f}, median {rep.median_cv:.3f}, "
              f"max {rep.max_cv:.3f}; largest drop below the mean {100 * rep.max_drop:.1f}%\n")
    if rep.rank_corr_mean is not None:
        out.write(f"  link ordering between snapshots (Spearman): mean {rep.rank_corr_mean:.2f}, "
                  f"min {rep.rank_corr_min:.2f}  (1 = same fast/slow links every time)\n")
    out.write("  snapshot means (GB/s): " + " ".join(f"{v:.2f}" for v in rep.per_snapshot_mean_GBps) + "\n")
    if rep.most_variable:
        out.write(f"  most variable links:\n  {'src':>12} {'dst':>12} {'mean':>8} {'min':>8} {'max':>8} {'cv':>6}\n")
        for x in rep.most_variable:
            out.write(f"  {x.src_name:>12} {x.dst_name:>12} {x.mean_GBps:8.2f} {x.min_GBps:8.2f} "
                      f"{x.max_GBps:8.2f} {x.cv:6.3f}\n")
    return 0
