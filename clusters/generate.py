"""Regenerate every synthetic bandwidth CSV shipped in clusters/ from its YAML's network.generator record.

    python clusters/generate.py            # rewrite in place (deterministic: same bytes every time)
    python clusters/generate.py --check    # exit 1 if any shipped CSV differs from its regeneration
"""
from __future__ import annotations

import glob
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))   # run from a checkout without installing

from planner.profile.synth import regenerate  # noqa: E402


def main(argv: list[str]) -> int:
    check = "--check" in argv
    bad = 0
    for y in sorted(glob.glob(os.path.join(HERE, "*.yaml"))):
        if check:
            with tempfile.TemporaryDirectory() as tmp:
                for path in regenerate(y, tmp):
                    shipped = os.path.join(HERE, os.path.basename(path))
                    same = os.path.exists(shipped) and open(shipped, "rb").read() == open(path, "rb").read()
                    bad += not same
                    print(f"{'ok  ' if same else 'DIFF'} {os.path.basename(shipped)}")
        else:
            for path in regenerate(y):
                print(f"wrote {os.path.relpath(path)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
