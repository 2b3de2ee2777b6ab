"""Atomic writes (temp file in the same folder, then rename) and small output helpers."""
from __future__ import annotations

import json
import os
import sys
import tempfile

_UMASK = os.umask(0)
os.umask(_UMASK)


def _publish(tmp: str, path: str) -> None:
    # mkstemp creates 0600 files; results are meant to be shared like any file the user writes
    os.chmod(tmp, 0o666 & ~_UMASK)
    os.replace(tmp, path)

import numpy as np
import yaml


def _plain(o):
    if isinstance(o, dict):
        return {str(k): _plain(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_plain(v) for v in o]
    if isinstance(o, np.ndarray):
        return _plain(o.tolist())
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.bool_):
        return bool(o)
    return o


def plain(o):
    """Numpy-free, YAML/JSON-safe copy of a nested structure."""
    return _plain(o)


def atomic_write_text(path: str, text: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        _publish(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: str, data: bytes) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        _publish(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_yaml(path: str, data) -> None:
    atomic_write_text(path, yaml.safe_dump(plain(data), sort_keys=False, default_flow_style=None, width=120))


def write_json(path: str, data) -> None:
    atomic_write_text(path, json.dumps(plain(data), indent=2) + "\n")


def print_json(data, stream=None) -> None:
    (stream or sys.stdout).write(json.dumps(plain(data), indent=2) + "\n")
