"""Memory sample rows measured under a schedule rule the code no longer follows, re-measured in place.

A sample records the chunk forwards its stage held (`held_forwards`). When the schedule code changes what a stage
holds at its peak (Nov 27: interleaved 1F1B at m == pp no longer runs every forward first on every rank, as
Megatron-LM since 4295be1a), the rows whose recorded count differs from `costs.memory.held_forwards` describe a
configuration the planner no longer predicts for. This script lists them, writes them to a subset file to replay
(`planner profile memory --replay SUBSET --device fake|cuda`, or `benchmarks/memory_cuda_capped.py SUBSET` for a
capped file aligned row by row with its sample file), and splices the replayed rows back at their line numbers.

  python benchmarks/memory_stale_rows.py list SAMPLES.csv...
  python benchmarks/memory_stale_rows.py extract SAMPLES.csv -o SUBSET.csv          (writes SUBSET.csv.rows too)
  python benchmarks/memory_stale_rows.py splice TARGET.csv REPLAYED.csv --rows SUBSET.csv.rows
"""
from __future__ import annotations

import argparse
import csv
import sys

from planner.costs.learned import row_case
from planner.costs.memory import held_forwards

# what costs.learned.row_case reads when an older sample file has no such column
DEFAULT_WHEN_MISSING = {"attention": "unfused"}
# measured columns that older files did not record: dropping them loses a reading, not the row's meaning
RECORDED_LATER = {"peak_requested"}


def stale_rows(rows: list[dict]) -> list[int]:
    """Indexes of the rows whose recorded held forwards differ from what the code holds now."""
    out = []
    for i, r in enumerate(rows):
        _model, _training, cfg, stage = row_case(r)
        if held_forwards(cfg, stage) != int(r["held_forwards"]):
            out.append(i)
    return out


def _read(path: str) -> tuple[list[str], list[dict]]:
    with open(path, newline="") as f:
        rd = csv.DictReader(f)
        return list(rd.fieldnames or []), list(rd)


def _write(path: str, fields: list[str], rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)          # \r\n, as the profiler writes them
        w.writeheader()
        w.writerows(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("list")
    a.add_argument("samples", nargs="+")
    a = sub.add_parser("extract")
    a.add_argument("samples")
    a.add_argument("-o", "--output", required=True)
    a = sub.add_parser("splice")
    a.add_argument("target", help="file to update in place (a sample file, or a capped file aligned with one)")
    a.add_argument("replayed", help="the replayed subset, in the order of --rows")
    a.add_argument("--rows", required=True, help="the .rows file extract wrote")
    args = ap.parse_args(argv)
    if args.cmd == "list":
        for p in args.samples:
            _f, rows = _read(p)
            idx = stale_rows(rows)
            print(f"{p}: {len(idx)} of {len(rows)} rows stale: {idx}")
        return 0
    if args.cmd == "extract":
        fields, rows = _read(args.samples)
        idx = stale_rows(rows)
        _write(args.output, fields, [rows[i] for i in idx])
        with open(args.output + ".rows", "w") as f:
            f.write(" ".join(map(str, idx)) + "\n")
        print(f"{len(idx)} stale rows of {args.samples} -> {args.output}")
        return 0
    fields, rows = _read(args.target)
    rfields, new = _read(args.replayed)
    idx = [int(x) for x in open(args.rows).read().split()]
    idx = [i for i in idx if i < len(rows)]          # a capped file may stop before the sample file's end
    # a column the target lacks may be dropped only where the reader's default for a missing column says the same
    extra = set(rfields) - set(fields)
    odd = [k for k in extra - RECORDED_LATER if k not in DEFAULT_WHEN_MISSING
           or any(r[k] != DEFAULT_WHEN_MISSING[k] for r in new)]
    if len(new) < len(idx) or set(fields) - set(rfields) or odd:
        print(f"{args.replayed}: rows or columns do not match {args.target}'s {len(idx)} stale rows"
              f"{' (column ' + ', '.join(sorted(odd)) + ')' if odd else ''}", file=sys.stderr)
        return 2
    for i, r in zip(idx, new):
        rows[i] = {k: r[k] for k in fields}
    _write(args.target, fields, rows)
    print(f"{args.target}: {len(idx)} rows replaced")
    return 0


if __name__ == "__main__":
    sys.exit(main())
