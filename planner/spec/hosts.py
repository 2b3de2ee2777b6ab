"""Host names as they enter the planner (cluster `node_names`, a solution's `mapping[].host`).

They end up in shell command lines (`planner export`), so only RFC 1123 names are accepted:
letters, digits and hyphens in dot-separated labels of 1..63 characters, 253 characters at most,
no label starting or ending with a hyphen. Everything else is refused before it can be printed.
"""
from __future__ import annotations

import re

from planner.errors import SpecError

_LABEL = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")


def is_hostname(name: object) -> bool:
    if not isinstance(name, str) or not 0 < len(name) <= 253:
        return False
    return all(_LABEL.match(label) for label in name.split("."))


def check_hostname(name: object, file: str | None, field: str) -> str:
    if not is_hostname(name):
        raise SpecError(file, field, f"{name!r} is not a host name (RFC 1123: letters, digits, '-' and '.', "
                                     "labels of 1-63 characters)")
    return name
