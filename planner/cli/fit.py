"""`planner fit KIND SAMPLES -o ESTIMATOR`: fit an estimator on profiled samples.

Each module in planner/costs/ or planner/profile/ that defines `register_fit(subparsers)` adds one KIND.
"""
from __future__ import annotations

from planner.cli.profile import _discover, _missing


def register(subparsers) -> None:
    p = subparsers.add_parser("fit", help="fit an estimator (memory, compute, ...) on profiled samples")
    sub = p.add_subparsers(dest="fit_kind", metavar="KIND")
    for reg in _discover("register_fit", ("planner.costs", "planner.profile")):
        reg(sub)
    p.set_defaults(func=lambda args: _missing(p))
