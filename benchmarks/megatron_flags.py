"""Build planner/data/megatron_flags.json: every option string of Megatron-LM's pretrain parser and how many values
it takes, read from the parser itself (megatron.training.arguments.add_megatron_arguments), so that `planner import
megatron` parses a launch line as argparse would and tells a Megatron-LM flag it does not read from a name Megatron-LM
itself does not know.

Run against a checkout of NVIDIA/Megatron-LM (the shipped file: d98e8a64ddf34856e74b24714e3bedb2f5a39553):
    PYTHONPATH=/path/to/Megatron-LM python benchmarks/megatron_flags.py [-o planner/data/megatron_flags.json]
Megatron-LM imports optional GPU packages (triton, transformer_engine, apex, ...) at module level; where they are not
installed this script puts inert stand-ins in their place for the import only: building the parser runs none of them.
Needs torch. Python 3.11 lacks typing.override, which Megatron-LM imports: an identity stands in for it.
"""
from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import json
import os
import subprocess
import sys
import types
import typing

OPTIONAL = ("triton", "transformer_engine", "apex", "flash_attn", "nvidia_resiliency_ext", "flashinfer", "mamba_ssm",
            "causal_conv1d", "einops", "tensorstore", "zarr", "modelopt", "nvtx", "emerging_optimizers", "onelogger",
            "one_logger")
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "planner", "data", "megatron_flags.json")


class _Inert(type):
    """A class whose every attribute is another such class, callable as a decorator (returns its argument)."""

    def __iter__(cls):
        return iter(())

    def __getattr__(cls, k):
        if k.startswith("__"):
            raise AttributeError(k)
        return _Inert(k, (), {})

    def __call__(cls, *a, **k):
        return a[0] if len(a) == 1 and callable(a[0]) and not k else _Inert("x", (), {})


class _InertModule(types.ModuleType):
    def __getattr__(self, k):
        if k.startswith("__"):
            raise AttributeError(k)
        return _Inert(k, (), {})


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in OPTIONAL:
            try:                     # installed: use it
                if name == name.split(".")[0] and importlib.machinery.PathFinder.find_spec(name):
                    return None
            except (ImportError, ValueError):
                pass
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _InertModule(spec.name)
        m.__path__, m.__spec__, m.__version__ = [], spec, "99.0.0"     # passes minimum-version checks
        return m

    def exec_module(self, module):
        pass


def arity(action) -> int | str:
    """0 for a switch, 1 for one value, else argparse's nargs ('+', '*', '?', or a count)."""
    if action.nargs == 0:
        return 0
    return 1 if action.nargs is None else action.nargs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--output", default=OUT)
    out = ap.parse_args().output
    sys.meta_path.insert(0, _Finder())
    if not hasattr(typing, "override"):
        typing.override = lambda f: f
    argv, sys.argv = sys.argv, ["pretrain_gpt.py"]
    from megatron.training.arguments import add_megatron_arguments
    sys.argv = argv
    parser = add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
    flags = {s: arity(a) for a in parser._actions for s in a.option_strings if s.startswith("--") and s != "--help"}
    import megatron.training
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(megatron.training.__file__))))
    try:
        commit = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown (not a git checkout)"
    doc = {"source": "NVIDIA/Megatron-LM megatron/training/arguments.py add_megatron_arguments (benchmarks/"
                     "megatron_flags.py)", "commit": commit,
           "arity": "0: a switch; 1: one value; '+', '*', '?' or a count: argparse's nargs",
           "flags": dict(sorted(flags.items()))}
    with open(out, "w") as fh:
        json.dump(doc, fh, indent=0)
        fh.write("\n")
    print(f"{len(flags)} flags at {commit} -> {out}")


if __name__ == "__main__":
    main()
