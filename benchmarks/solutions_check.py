"""Solve every shipped spec again and compare with solutions/, apart from timestamps and wall times.

    python benchmarks/solutions_check.py [--out DIR] [--specs specs/a.yaml ...]

Prints `identical` or the first differing lines per spec and exits 1 if any differs. Run it on a
quiet machine: a spec whose solve ends at its wall-clock limit (the drift spec at 60 s) can report a
different bound under load.
"""
from __future__ import annotations

import argparse
import difflib
import glob
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def normalise(text: str) -> str:
    text = re.sub(r"^created: .*$", "created: X", text, flags=re.M)
    return re.sub(r"wall_s: [0-9.e+-]+", "wall_s: X", text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="where to write the new solutions (default: a temporary folder)")
    ap.add_argument("--specs", nargs="*", default=None)
    args = ap.parse_args()
    specs = args.specs or sorted(glob.glob(os.path.join(ROOT, "specs", "*.yaml")))
    out = args.out or tempfile.mkdtemp(prefix="planner-solutions-")
    os.makedirs(out, exist_ok=True)          # `planner solve --out` refuses a folder that does not exist
    differs = 0
    for spec in specs:
        name = os.path.splitext(os.path.basename(spec))[0]
        new = os.path.join(out, f"{name}.yaml")
        r = subprocess.run([sys.executable, "-m", "planner", "solve", os.path.relpath(spec, ROOT), "--out", new],
                           cwd=ROOT, capture_output=True, text=True)
        old = os.path.join(ROOT, "solutions", f"{name}.yaml")
        if r.returncode != 0 or not os.path.exists(old):
            differs += 1
            print(f"{name}: solve exit {r.returncode}" + ("" if os.path.exists(old) else ", no shipped solution"))
            continue
        a, b = normalise(open(old).read()), normalise(open(new).read())
        if a == b:
            print(f"{name}: identical")
        else:
            differs += 1
            print(f"{name}: DIFFERS")
            print("".join(list(difflib.unified_diff(a.splitlines(True), b.splitlines(True), n=0))[:20]))
    print(f"new solutions in {out}")
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
