"""Fuzz the command line with mutated inputs (issue #11's acceptance run).

    python benchmarks/fuzz_inputs.py [--cases 1000] [--seed 0] [--workers 2]

Each case is one mutation of a small valid spec / model / cluster / matrix set (tests/fuzz_cases.py),
run through `planner estimate` and `planner solve --time-limit 2` in a worker process (the CLI's own
main(), so an uncaught exception would show as exit 3 with its message). Prints the counts the issue
asks for: exit 3, tracebacks, exit 0 from a non-finite input, bad-input messages that do not name the
file, and cases over 30 s; then the exit-code histogram and the slowest cases.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.fuzz_cases import ESTIMATE, judge, mutations, write_case  # noqa: E402
from tests.fuzz_cases import run_cli as _run  # noqa: E402


def one(m):
    rows = []
    with tempfile.TemporaryDirectory() as root:
        spec = write_case(root, m)
        for cmd, argv in (("estimate", ["estimate", spec, *ESTIMATE]),
                          ("solve", ["solve", spec, "--time-limit", "2", "--out", os.path.join(root, "s.yaml")])):
            t0 = time.perf_counter()
            rc, err = _run(argv)
            last = err.strip().splitlines()[-1][-300:] if err.strip() else ""
            rows.append((str(m), cmd, rc, time.perf_counter() - t0, judge(m, rc, err), last))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    cases = mutations(np.random.default_rng(args.seed), args.cases)
    t0 = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        rows = [r for rs in pool.map(one, cases, chunksize=4) for r in rs]
    wall = time.perf_counter() - t0
    problems = collections.Counter(p for r in rows for p in r[4])
    over = [r for r in rows if r[3] > 30]
    print(f"{len(cases)} mutated inputs (seed {args.seed}), {len(rows)} runs, {wall:.0f} s")
    for key in ("exit 3", "traceback", "exit 0 from a non-finite input", "exit 0 from an out-of-range input"):
        print(f"  {key}: {sum(v for k, v in problems.items() if k.startswith(key))}")
    print(f"  bad-input messages not naming the file: "
          f"{sum(v for k, v in problems.items() if k.startswith('message does not'))}")
    print(f"  runs over 30 s: {len(over)}")
    for cmd in ("estimate", "solve"):
        hist = collections.Counter(r[2] for r in rows if r[1] == cmd)
        print(f"  {cmd} exit codes: {dict(sorted(hist.items()))}")
    print("  slowest:", ", ".join(f"{r[1]} {r[0]} {r[3]:.1f}s" for r in sorted(rows, key=lambda r: -r[3])[:3]))
    for r in [r for r in rows if r[4]][:20]:
        print(f"  PROBLEM {r[1]} {r[0]}: {r[4]} rc={r[2]} {r[5]}")
    return 1 if problems or over else 0


if __name__ == "__main__":
    sys.exit(main())
