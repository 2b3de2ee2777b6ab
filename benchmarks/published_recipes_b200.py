"""Published, measured DGX-B200 runs against the planner: a held-out check of the derived B200 compute profile.

The rows (benchmarks/data/published_recipes_b200.yaml: Megatron-Bridge's performance summary, DGX-B200 tables, dense
Llama only) go through published_recipes.py's machinery (load_rows, build, evaluate_row, summary, print_table) on
clusters/dgx-b200.yaml, whose compute profile is the H100's with the HBM ratio and everything else carried over
(benchmarks/make_b200_profile.py): an assumption this table tests. Nothing is tuned on these rows. They are a
group of their own, so the #8 H100 summary (published_recipes.py) is unchanged. The block-scaled (FP8-MX) figures
of the same tables are listed as not expressible, with the reason.

Run:  python benchmarks/published_recipes_b200.py [--rows ID,ID] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, ".."), HERE]

import published_recipes as pr  # noqa: E402

from planner.io import load_yaml  # noqa: E402

DATA = os.path.join(pr.ROOT, "benchmarks", "data", "published_recipes_b200.yaml")
NOT_EXPRESSIBLE_KEYS = {"id", "source", "precision", "gpus", "tokens_per_s_per_gpu"}


def load(path: str = DATA) -> tuple[dict, list[dict], list[dict]]:
    """(sources, rows, not_expressible), schema-checked (ValueError naming the entry and field)."""
    sources, rows = pr.load_rows(path)
    extra = load_yaml(path).get("not_expressible") or []
    for e in extra:
        eid = e.get("id", "?")
        if set(e) != NOT_EXPRESSIBLE_KEYS:
            raise ValueError(f"{path}: not_expressible {eid}: needs exactly {sorted(NOT_EXPRESSIBLE_KEYS)}")
        if e["source"] not in sources:
            raise ValueError(f"{path}: not_expressible {eid}.source: {e['source']!r} is not in `sources`")
    for r in rows:
        if pr.knobs_of(r).get("cluster") != "dgx-b200":
            raise ValueError(f"{path}: row {r['id']}.knobs.cluster: must be dgx-b200")
    return sources, rows, extra


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--rows", default=None, help="comma-separated row ids (default: all)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    _, rows, extra = load(args.data)
    if args.rows:
        want = args.rows.split(",")
        unknown = set(want) - {r["id"] for r in rows}
        if unknown:
            ap.error(f"unknown rows {sorted(unknown)}")
        rows = [r for r in rows if r["id"] in want]
    results = [pr.evaluate_row(r) for r in rows]
    s = pr.summary(results)
    if args.json:
        print(json.dumps({"rows": results, "summary": s, "not_expressible": extra}, indent=1))
        return 0
    print(f"DGX-B200 rows ({os.path.relpath(args.data, pr.ROOT)}), derived B200 profile: a held-out check")
    pr.print_table(results, s, targets="none: held out; the H100 target is <= 8%, <= 15%")
    print("\nnot expressible (block-scaled fp8: the planner's fp8 recipes are delayed / tensorwise only):")
    for e in extra:
        print(f"  {e['id']:<36} {e['gpus']:>4} GPUs  {e['precision']:<30} {e['tokens_per_s_per_gpu']:>6} tokens/s/GPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
