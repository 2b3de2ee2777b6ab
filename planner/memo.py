"""A bounded cache for pure functions of frozen specs and configurations (the memory screen asks the same per-layer
and per-chunk figures for every stage of every configuration)."""
from __future__ import annotations

import functools


def memo(maxsize: int = 4096):
    """functools.lru_cache, except that a call with an unhashable argument (a duck-typed spec, as some tests pass)
    is computed without the cache."""
    def deco(f):
        cached = functools.lru_cache(maxsize=maxsize)(f)

        @functools.wraps(f)
        def call(*args, **kwargs):
            try:
                hash((args, tuple(kwargs.items())))
            except TypeError:
                return f(*args, **kwargs)
            return cached(*args, **kwargs)
        call.cache_clear = cached.cache_clear
        return call
    return deco
