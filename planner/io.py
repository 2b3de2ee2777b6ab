"""Files in and out: atomic writes (temp file in the same folder, then rename), YAML loading with its
one error message, the bandwidth-matrix CSV format, and small output helpers."""
from __future__ import annotations

import json
import math
import os
import stat
import sys
import tempfile

import numpy as np
import yaml

_UMASK = os.umask(0)
os.umask(_UMASK)


def _publish(tmp: str, path: str) -> None:
    # mkstemp creates 0600 files; results are meant to be shared like any file the user writes
    os.chmod(tmp, 0o666 & ~_UMASK)
    os.replace(tmp, path)



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


def same_file(a: str, b: str) -> bool:
    """Whether two paths name one file: the same resolved path (symbolic links and '..' followed), or, both existing,
    the same inode (a hard link, a case-insensitive file system)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:               # one of them does not exist (yet): not the same file
        return False


def check_out(path: str, flag: str = "--out", inputs=None, given: bool = True) -> str:
    """The absolute path of an output file, checked before any work is spent on it; SpecError naming `flag` (exit 2)
    for a path that is a directory, whose folder is missing, is not a folder or not writable, or that is one of the
    files this run reads: `inputs` maps each input path to what it is ("the spec", "the source solution", ...), and
    writing there would replace the input with the output (an atomic rename leaves nothing of it).

    One rule for every output flag: planner creates no folder the user named (as cp, sort -o or a compiler's -o: a
    mistyped folder is refused before the work, not created with the result hidden in it); only a default path of its
    own (`given` False: solve's solutions/ folder) has its missing folders created."""
    from planner.errors import SpecError
    for src, what in (inputs or {}).items():
        if src and same_file(path, src):
            raise SpecError(None, flag, f"{path} is {what} this command reads ({src}); writing the output there would "
                                        "overwrite it: give another path")
    path = os.path.abspath(path)
    if os.path.isdir(path):
        raise SpecError(None, flag, f"{path} is a directory; give a file path")
    check_out_parent(path, flag, given)
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise SpecError(None, flag, f"{path} cannot be written (permission denied)")
    return path


def check_out_parent(path: str, flag: str, given: bool = True) -> None:
    """The folder an output (a file, or batch's --out folder) goes into exists, is a folder and may be written in;
    SpecError naming `flag` otherwise. `given` False (a default path): missing folders will be created, so the nearest
    existing one is checked instead."""
    from planner.errors import SpecError
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent) and not given:
        parent = os.path.dirname(parent)
    if not os.path.exists(parent):
        raise SpecError(None, flag, f"the folder {parent} does not exist (planner creates no folder you name: create "
                                    "it first, or give a path in an existing folder)")
    if not os.path.isdir(parent):
        raise SpecError(None, flag, f"{parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise SpecError(None, flag, f"{path} cannot be written in {parent} (permission denied)")


def check_out_folder(path: str, flag: str = "--out", given: bool = True) -> str:
    """Create an output folder (batch --out: the folder is the output, filled with the command's files), checked as an
    output file is (check_out_parent: the folder above it must exist when the user named it); SpecError naming `flag`
    for a path that exists and is not a folder or cannot be created."""
    from planner.errors import SpecError
    path = os.path.abspath(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise SpecError(None, flag, f"{path} exists and is not a folder")
    check_out_parent(path, flag, given)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise SpecError(None, flag, f"cannot create the folder {path}: {e.strerror or e}") from None
    return path


def check_outs(outs: dict, inputs=None, given: bool = True) -> None:
    """check_out for each {flag: path} given (None: not asked for), and no two flags naming one file (the second
    write would replace the first)."""
    from planner.errors import SpecError
    seen: dict = {}
    for flag, path in outs.items():
        if not path:
            continue
        check_out(path, flag, inputs, given)
        other = next((f for f, p in seen.items() if same_file(p, path)), None)
        if other:
            raise SpecError(None, flag, f"{path} is also {other}'s output: give each its own file")
        seen[flag] = path


def write_yaml(path: str, data) -> None:
    atomic_write_text(path, yaml.safe_dump(plain(data), sort_keys=False, default_flow_style=None, width=120))


def write_json(path: str, data) -> None:
    atomic_write_text(path, json.dumps(plain(data), indent=2) + "\n")


def print_json(data, stream=None) -> None:
    (stream or sys.stdout).write(json.dumps(plain(data), indent=2) + "\n")


MAX_INPUT_BYTES = 10 * 1024 * 1024      # specs, models, clusters, matrices and profiles are kilobytes
MAX_YAML_DEPTH = 64


def read_text_file(path: str, file: str | None = None, field: str | None = None,
                   max_bytes: int | None = None) -> str:
    """The text of a regular UTF-8 file of at most max_bytes; anything else raises SpecError (exit 2).

    Checked before reading, so /dev/zero, a FIFO or a directory cannot make the planner hang or
    grow without bound."""
    from planner.errors import SpecError
    max_bytes = MAX_INPUT_BYTES if max_bytes is None else max_bytes
    who = file if field else (file or path)
    if not os.path.exists(path):
        raise SpecError(file, field, f"file {path} does not exist")
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise SpecError(who, field, f"{path} is {kind}")
        if st.st_size > max_bytes:
            raise SpecError(who, field, f"{path} is {st.st_size} bytes, more than the {max_bytes} allowed")
        with open(path, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as e:
        raise SpecError(who, field, f"{path} cannot be read ({e.strerror or e})") from None
    if len(data) > max_bytes:
        raise SpecError(who, field, f"{path} is more than the {max_bytes} bytes allowed")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(who, field, f"{path} is not UTF-8 text (byte {e.start})") from None


def read_csv_rows(path: str, max_bytes: int | None = None) -> tuple[list[str], list[dict]]:
    """(column names, rows) of a CSV file read as read_text_file reads text (regular UTF-8 file, bounded size; a
    byte-order mark is dropped); names and values stripped. SpecError (exit 2) otherwise."""
    import csv
    import io as _io
    text = read_text_file(path, max_bytes=max_bytes).lstrip("\ufeff")
    reader = csv.DictReader(_io.StringIO(text, newline=""))
    try:
        rows = [{(k or "").strip(): (v or "").strip() if isinstance(v, str) else "" for k, v in r.items()}
                for r in reader]
    except csv.Error as e:
        from planner.errors import SpecError
        raise SpecError(path, f"line {reader.line_num}", f"is not valid CSV ({e})") from None
    return [c.strip() for c in (reader.fieldnames or [])], rows


def csv_number(value, path: str, line: int, column: str, kind=float):
    """A finite number (int or float) from a CSV cell, or SpecError naming the file, line and column: empty,
    non-numeric, NaN and infinity are bad input."""
    import math

    from planner.errors import SpecError
    text = (value or "").strip() if isinstance(value, str) else value
    if text in ("", None):
        raise SpecError(path, f"line {line}, {column}", "is empty")
    try:
        v = float(text)
    except (TypeError, ValueError):
        raise SpecError(path, f"line {line}, {column}", f"is not a number: {text!r}") from None
    if not math.isfinite(v):
        raise SpecError(path, f"line {line}, {column}", f"is not a finite number: {text!r}")
    if kind is int:
        if v != int(v):
            raise SpecError(path, f"line {line}, {column}", f"is not a whole number: {text!r}")
        return int(v)
    return v


MAX_YAML_NODES = 200_000                 # after expanding aliases: an alias bomb is refused here


class _YamlRefused(yaml.YAMLError):
    pass


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that stops nesting deeper than MAX_YAML_DEPTH while composing (no RecursionError)."""

    _depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                mark = self.peek_event().start_mark
                raise _YamlRefused(f"nesting is deeper than {MAX_YAML_DEPTH} levels (line {mark.line + 1})")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _children(node):
    if isinstance(node, yaml.SequenceNode):
        return node.value
    if isinstance(node, yaml.MappingNode):
        return [x for kv in node.value for x in kv]
    return []


def _check_expanded(root) -> None:
    """Aliases are allowed, but the tree they expand to (what hashing and printing walk) is bounded in
    size and depth, and may not contain itself."""
    memo: dict[int, tuple[int, int]] = {}
    active: set[int] = set()

    def walk(node) -> tuple[int, int]:
        key = id(node)
        if key in memo:
            return memo[key]
        if key in active:
            raise _YamlRefused("an alias refers to a node that contains it")
        active.add(key)
        count, depth = 1, 1
        for child in _children(node):
            c, d = walk(child)
            count, depth = count + c, max(depth, d + 1)
            if count > MAX_YAML_NODES:
                raise _YamlRefused(f"expands to more than {MAX_YAML_NODES} values (aliases)")
        if depth > MAX_YAML_DEPTH:
            raise _YamlRefused(f"nesting is deeper than {MAX_YAML_DEPTH} levels after expanding aliases")
        active.discard(key)
        memo[key] = (count, depth)
        return memo[key]

    walk(root)


def parse_yaml(text: str, path: str):
    """Parse YAML text safely and within bounds; errors raise SpecError naming path."""
    from planner.errors import SpecError
    loader = _StrictLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        _check_expanded(root)
        return loader.construct_document(root)
    except yaml.YAMLError as e:
        raise SpecError(path, None, f"is not valid YAML ({str(e).splitlines()[0]})") from None
    finally:
        loader.dispose()


def non_finite_field(data, prefix: str = "") -> str | None:
    """The dotted path of the first NaN or infinite number in a parsed YAML/JSON tree, or None."""
    if isinstance(data, float) and not math.isfinite(data):
        return prefix or "(top level)"
    if isinstance(data, dict):
        items = ((f"{prefix}.{k}" if prefix else str(k), v) for k, v in data.items())
    elif isinstance(data, list):
        items = ((f"{prefix}[{i}]", v) for i, v in enumerate(data))
    else:
        return None
    for where, v in items:
        found = non_finite_field(v, where)
        if found:
            return found
    return None


def load_yaml(path: str, file_for_errors: str | None = None, *, field: str | None = None, finite: bool = True):
    """The parsed YAML of `path`; a missing, oversized, binary or non-regular file, bad YAML, alias
    bombs or too deep nesting raise SpecError (exit 2), and so does any NaN or infinity (`finite`):
    no input the user writes has a use for them, wherever they stand. `file_for_errors` and `field`
    name where the path was given (a spec's `model:`), for errors about the file as a whole."""
    from planner.errors import SpecError
    if not os.path.exists(path):
        raise SpecError(file_for_errors, field, f"file {path} does not exist")
    data = parse_yaml(read_text_file(path, file_for_errors if field else None, field), path)
    bad = non_finite_field(data) if finite else None
    if bad:
        raise SpecError(path, bad, "is not a finite number (NaN and infinity are not accepted)")
    return data


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def load_json(path: str, what: str = "JSON file"):
    """The parsed JSON of a bounded regular file (read_text_file); NaN, Infinity and numbers that
    overflow to infinity are refused with the key's path. Errors are SpecError naming path."""
    from planner.errors import SpecError
    text = read_text_file(path)
    try:
        data = json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as e:
        raise SpecError(path, None, f"cannot read {what} ({str(e)[:200]})") from None
    bad = non_finite_field(data)
    if bad:
        raise SpecError(path, bad, "is not a finite number (NaN and infinity are not accepted)")
    return data


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
    text = read_text_file(path, file, fieldname)
    try:
        rows = []
        for line in text.splitlines():
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
        m = np.array(rows, dtype=float)
    except ValueError as e:
        raise SpecError(file, fieldname, f"{path} is not a numeric CSV matrix ({e})") from None
    if m.size and not np.all(np.isfinite(m)):
        i, j = (int(v) for v in np.argwhere(~np.isfinite(m))[0])
        raise SpecError(file, fieldname, f"{path} entry [{i},{j}] = {m[i, j]} is not a finite number")
    return m
