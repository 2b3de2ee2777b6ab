"""Strict reading of YAML mappings: unknown keys, wrong types and bad values name file and field."""
from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from planner.errors import SpecError

_MISSING = object()
# Integers in a spec count layers, heads, GPUs, samples: none comes near 2**31. A bound keeps 2**70
# from overflowing a float or an int64 later, where the error could no longer name the field.
MAX_INT = 2**31 - 1
# Floats in a spec are seconds, GB/s, GiB, TFLOP/s, tokens (Llama 3: 1.5e13) or dollars: 1e15 bounds them
# all, and keeps 1e308 or 2**70 from overflowing a product later.
MAX_FLOAT = 1e15
MIN_POSITIVE = 1e-9
"""The smallest positive number a spec field takes: tinier values (1e-308) are typos that overflow the cost model."""

DEFAULT: Any = object()
"""Pass as an accessor's default to mean "the dataclass's own default": `Fields.build` leaves the keyword out,
so a spec default is written once, on its dataclass field, and never repeated in a parser."""


class FieldError(SpecError, ValueError):
    """A spec object's own rule (its `__post_init__`) failed; `field` is relative to that object.

    Built directly it reads as a SpecError without a file; `Fields.build` re-raises it with the file and the
    full field path of the mapping the object was read from."""

    def __init__(self, field: str, reason: str):
        super().__init__(None, field, reason)


class Fields:
    """A view of one YAML mapping that remembers where it came from.

    Every accessor checks type and range and raises SpecError(file, "a.b.c", reason);
    `done()` rejects keys nobody asked for (typos must not be silently ignored).
    """

    def __init__(self, data: Any, file: str | None, prefix: str = ""):
        if not isinstance(data, dict):
            raise SpecError(file, prefix or None, f"expected a mapping, got {type(data).__name__}")
        self.data, self.file, self.prefix = data, file, prefix
        self.seen: set[str] = set()

    def path(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def error(self, key: str, reason: str) -> SpecError:
        return SpecError(self.file, self.path(key), reason)

    def has(self, key: str) -> bool:
        self.seen.add(key)      # a key asked about is a known key (an unknown key's message lists it)
        return key in self.data

    def raw(self, key: str, default: Any = _MISSING) -> Any:
        self.seen.add(key)
        if key not in self.data or self.data[key] is None:
            if default is _MISSING:
                import difflib
                near = difflib.get_close_matches(key, [k for k in self.data if isinstance(k, str)], n=1, cutoff=0.8)
                raise self.error(key, "is required" + (f" ({near[0]!r} is given: a misspelling of it?)" if near
                                                       else ""))
            return default
        return self.data[key]

    def int(self, key: str, default: Any = _MISSING, *, min_value: int | None = 1,
            max_value: int = MAX_INT) -> int:
        v = self.raw(key, default)
        if v is default and default is not _MISSING:
            return v
        if isinstance(v, bool) or not isinstance(v, int):   # 4.0, true, "4": not integers
            raise self.error(key, f"must be an integer, got {v!r}")
        if min_value is not None and v < min_value:
            raise self.error(key, f"must be >= {min_value}, got {v}")
        if v > max_value:
            raise self.error(key, f"must be <= {max_value}, got {v}")
        return v

    def float(self, key: str, default: Any = _MISSING, *, positive: bool = True,
              min_value: float | None = None, max_value: float = MAX_FLOAT) -> float:
        v = self.raw(key, default)
        if v is default and default is not _MISSING:
            return v
        if isinstance(v, str):   # YAML 1.1 reads 3.0e11 (no sign in the exponent) as a string
            try:
                v = float(v)
            except ValueError:
                pass
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.error(key, f"must be a number, got {v!r}")
        v = float(v)
        if not math.isfinite(v):
            raise self.error(key, f"must be a finite number, got {v}")
        if positive and not v > 0:
            raise self.error(key, f"must be positive, got {v}")
        if positive and v < MIN_POSITIVE:   # 1e-308 TFLOP/s or GB/s overflow the cost model's powers and sums
            raise self.error(key, f"must be at least {MIN_POSITIVE:g}, got {v:g}")
        if min_value is not None and v < min_value:
            raise self.error(key, f"must be >= {min_value}, got {v}")
        if v > max_value:
            raise self.error(key, f"must be <= {max_value}, got {v}")
        return v

    def str(self, key: str, default: Any = _MISSING, *, choices: Iterable[str] | None = None) -> str:
        v = self.raw(key, default)
        if v is default and default is not _MISSING:
            return v
        if not isinstance(v, str):
            raise self.error(key, f"must be a string, got {v!r}")
        if choices is not None and v not in choices:
            raise self.error(key, f"must be one of {sorted(choices)}, got {v!r}")
        return v

    def bool(self, key: str, default: Any = _MISSING) -> bool:
        v = self.raw(key, default)
        if v is DEFAULT:
            return v
        if not isinstance(v, bool):
            raise self.error(key, f"must be true or false, got {v!r}")
        return v

    def list(self, key: str, default: Any = _MISSING) -> list:
        v = self.raw(key, default)
        if v is default and default is not _MISSING:
            return v
        if not isinstance(v, list):
            v = [v]
        return v

    def sub(self, key: str, default: Any = _MISSING) -> Fields:
        v = self.raw(key, default)
        return Fields(v, self.file, self.path(key))

    def build(self, cls, **kwargs):
        """`cls(**kwargs)` without the DEFAULT ones; a FieldError from its `__post_init__` names this file
        and the field's full path."""
        try:
            return cls(**{k: v for k, v in kwargs.items() if v is not DEFAULT})
        except FieldError as e:
            raise self.error(e.field, e.reason) from None

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.seen, key=str)
        if unknown:
            import difflib
            known = sorted(self.seen)
            near = difflib.get_close_matches(str(unknown[0]).lower(), known, n=1, cutoff=0.6)
            raise self.error(str(unknown[0]), f"unknown key (known: {', '.join(known)})"
                             + (f"; a misspelling of {near[0]!r}?" if near else ""))
