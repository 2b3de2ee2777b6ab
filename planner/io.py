"""Files in and out: atomic writes (temp file in the same folder, then rename), YAML loading with its
one error message, the bandwidth-matrix CSV format, and small output helpers."""
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


def load_yaml(path: str, file_for_errors: str | None = None):
    """The parsed YAML of `path`; a missing file or bad YAML raises SpecError (exit 2)."""
    from planner.errors import SpecError
    if not os.path.exists(path):
        raise SpecError(file_for_errors, None, f"file {path} does not exist")
    try:
        with open(path) as fh:
            return yaml.safe_load(fh)
    except yaml.YAMLError as e:
        raise SpecError(path, None, f"is not valid YAML ({str(e).splitlines()[0]})") from None


# --- bandwidth-matrix CSV: '# ' comment lines, then one comma-separated row per node ----------

def matrix_csv_text(matrix, *, decimals: int = 4, comments=(), zero_diagonal: bool = False) -> str:
    """The CSV text of a node x node matrix; zero_diagonal writes the (ignored) diagonal as a bare 0."""
    m = np.asarray(matrix, dtype=float)
    lines = [f"# {c}" for c in comments]
    for i, row in enumerate(m):
        lines.append(",".join("0" if zero_diagonal and i == j else f"{float(v):.{decimals}f}"
                              for j, v in enumerate(row)))
    return "\n".join(lines) + "\n"


def read_matrix_csv(path: str, file: str | None, fieldname: str) -> np.ndarray:
    """The numbers of a matrix CSV (',' or ';' separated; '#' comments; one header line allowed)."""
    from planner.errors import SpecError
    if not os.path.exists(path):
        raise SpecError(file, fieldname, f"file {path} does not exist")
    try:
        rows = []
        with open(path) as fh:
            for line in fh:
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                cells = line.replace(";", ",").split(",")
                try:
                    rows.append([float(c) for c in cells])
                except ValueError:
                    if rows:  # a header line is allowed only first
                        raise
                    continue
        return np.array(rows, dtype=float)
    except ValueError as e:
        raise SpecError(file, fieldname, f"{path} is not a numeric CSV matrix ({e})") from None
