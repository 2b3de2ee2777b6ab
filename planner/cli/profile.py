"""`planner profile KIND ...`: measure the cluster / model costs the planner's estimators are fitted on.

Each planner/profile/<kind>.py that defines `register_profile(subparsers)` adds one KIND (memory, compute,
network, ...), so a new profiler touches only its own module.
"""
from __future__ import annotations

import importlib
import pkgutil


def _discover(hook: str, packages: tuple[str, ...]):
    for pkg_name in packages:
        pkg = importlib.import_module(pkg_name)
        for mod in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
            module = importlib.import_module(f"{pkg_name}.{mod.name}")
            if hasattr(module, hook):
                yield getattr(module, hook)


def register(subparsers) -> None:
    p = subparsers.add_parser("profile", help="measure costs (memory, compute, network) into sample files")
    sub = p.add_subparsers(dest="profile_kind", metavar="KIND")
    for reg in _discover("register_profile", ("planner.profile",)):
        reg(sub)
    p.set_defaults(func=lambda args: _missing(p))


def _missing(parser) -> int:
    import sys
    parser.print_help(sys.stderr)
    return 2
