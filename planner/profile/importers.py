"""Import measurements made by other tools: mpiGraph bandwidth matrices and nccl-tests tables.

mpiGraph (LLNL) prints a `Send` and a `Recv` matrix of per-pair bandwidth in MB/s where
MB = 2^20 bytes (its source: `MBsec = size * 1e6 / (1024*1024)`). Rows are labelled
`host:rank to` (Send: row sends to column) and `host:rank from` (Recv: row receives from column).
We convert to GB/s = 1e9 B/s, the unit of the cluster CSV, and keep the host names.

nccl-tests prints a table per run, either in its standard stdout layout (`#` header lines naming the
columns: size count type redop root time algbw busbw #wrong, out-of-place then in-place) or in the
comma-separated variant found in the vTrain data (`size(B),count,type,time(ns),busbw(GB/s),...`).
Both become a table CSV with columns size_bytes,time_us,algbw_GBps,busbw_GBps, which the same parser reads
back: it is the one nccl-tests reader, the cost model's all-reduce tables (costs/comm.py) included.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

import numpy as np

from planner.errors import SpecError

MIB = 1024 * 1024
COMBINE = ("min", "send", "recv", "mean")
AGGREGATE = ("median", "mean", "min", "max")


# ----------------------------------------------------------------------------- mpiGraph

@dataclass(frozen=True, eq=False)
class MpiGraphLog:
    labels: tuple          # "host:rank" per rank, in rank order
    hosts: tuple           # host of every rank
    send_MBps: np.ndarray  # [i, j] = i sends to j (MiB/s as printed)
    recv_MBps: np.ndarray  # [i, j] = i receives from j
    msg_size_bytes: int | None
    times: int | None
    window: int | None
    version: str | None

    @property
    def ranks(self) -> int:
        return len(self.labels)

    def directed_GBps(self, combine: str = "min") -> np.ndarray:
        """Rank x rank matrix, [i, j] = bandwidth from i to j in GB/s.

        The send view of i -> j is Send[i, j]; the receive view is Recv[j, i]. mpiGraph's send time
        stops when the sends complete locally (data may still be in flight), so the receive view is
        the more conservative; the default takes the smaller of the two per directed pair.
        """
        if combine not in COMBINE:
            raise SpecError(None, "--combine", f"must be one of {', '.join(COMBINE)}")
        send, recv = self.send_MBps, self.recv_MBps.T
        m = {"send": send, "recv": recv, "min": np.minimum(send, recv), "mean": (send + recv) / 2}[combine]
        m = m * MIB / 1e9
        np.fill_diagonal(m, 0.0)
        return m


def parse_mpigraph(text: str, file: str | None = None) -> MpiGraphLog:
    lines = text.splitlines()
    header = {}
    version = None
    for ln in lines:
        m = re.match(r"\s*START mpiGraph\s*(\S*)", ln, re.I)
        if m:
            version = m.group(1) or None
        m = re.match(r"\s*(MsgSize|Times|Window|Procs)\s*:?\s*(\d+)\s*$", ln)
        if m:
            header[m.group(1)] = int(m.group(2))
    send_labels, send = _mpigraph_block(lines, "Send", "to", file)
    recv_labels, recv = _mpigraph_block(lines, "Recv", "from", file)
    if send_labels != recv_labels:
        raise SpecError(file, "Recv", "the Recv matrix names other ranks than the Send matrix")
    if "Procs" in header and header["Procs"] != len(send_labels):
        raise SpecError(file, "Procs", f"header says {header['Procs']} ranks, matrices have {len(send_labels)}")
    hosts = tuple(lbl.rsplit(":", 1)[0] for lbl in send_labels)
    return MpiGraphLog(tuple(send_labels), hosts, send, recv, header.get("MsgSize"), header.get("Times"),
                       header.get("Window"), version)


def _mpigraph_block(lines, name, word, file):
    start = None
    for k, ln in enumerate(lines):
        cells = ln.split()
        if cells and cells[0] == name and len(cells) > 1 and ":" in cells[1]:
            start = k
            break
    if start is None:
        raise SpecError(file, name, f"no '{name}' matrix found (is this an mpiGraph log?)")
    labels = lines[start].split()[1:]
    n = len(labels)
    rows = []
    for k in range(start + 1, min(len(lines), start + 1 + n)):
        cells = lines[k].split()
        if len(cells) != n + 2 or cells[1] != word or cells[0] != labels[len(rows)]:
            raise SpecError(file, f"{name} row {len(rows)}",
                            f"expected '{labels[len(rows)]} {word}' followed by {n} values, "
                            f"got {lines[k].strip()[:80]!r}")
        try:
            rows.append([float(c) for c in cells[2:]])
        except ValueError:
            raise SpecError(file, f"{name} row {len(rows)}", "non-numeric bandwidth") from None
    if len(rows) != n:
        raise SpecError(file, name, f"matrix has {len(rows)} rows for {n} ranks (truncated log?)")
    m = np.array(rows)
    off = m[~np.eye(n, dtype=bool)]
    if np.any(off <= 0) or not np.all(np.isfinite(off)):
        raise SpecError(file, name, "off-diagonal bandwidths must be positive")
    return labels, m


@dataclass(frozen=True, eq=False)
class NodeMatrix:
    node_names: tuple
    bandwidth_GBps: np.ndarray     # node x node, [a, b] = a sends to b; diagonal 0
    rank_matrix_GBps: np.ndarray   # rank x rank
    rank_labels: tuple
    source: dict


def mpigraph_node_matrix(log: MpiGraphLog, combine: str = "min", aggregate: str = "median") -> NodeMatrix:
    """Group ranks by host: node [a, b] = `aggregate` over the rank pairs (i on a, j on b).

    With one rank per node (mpiGraph's usual use) that is the pair's own value; with one rank per
    NIC/rail the median is the typical per-rail bandwidth.
    """
    if aggregate not in AGGREGATE:
        raise SpecError(None, "--aggregate", f"must be one of {', '.join(AGGREGATE)}")
    r = log.directed_GBps(combine)
    names = []
    for h in log.hosts:
        if h not in names:
            names.append(h)
    idx = np.array([names.index(h) for h in log.hosts])
    n = len(names)
    if n < 2:
        raise SpecError(None, "hosts", "all ranks ran on one host: no node-to-node link was measured")
    f = {"median": np.median, "mean": np.mean, "min": np.min, "max": np.max}[aggregate]
    node = np.zeros((n, n))
    for a in range(n):
        for b in range(n):
            if a != b:
                node[a, b] = float(f(r[np.ix_(idx == a, idx == b)]))
    src = {"tool": f"mpiGraph {log.version or ''}".strip(), "msg_size_bytes": log.msg_size_bytes,
           "times": log.times, "window": log.window, "combine": combine, "aggregate": aggregate,
           "unit_in": "MiB/s", "unit_out": "GB/s (1e9 B/s)"}
    return NodeMatrix(tuple(names), node, r, log.labels, src)


# ----------------------------------------------------------------------------- nccl-tests
# The one nccl-tests parser: `planner import nccl-tests` and the cost model's all-reduce tables
# (costs/comm.py read_nccl_tests: `planner fit compute --nccl`, a profile's `allreduce_tables`) both read through it.

PLACEMENTS = ("out-of-place", "in-place")
TABLE_HEADER = "size_bytes,time_us,algbw_GBps,busbw_GBps"      # what `planner import nccl-tests` writes
LAYOUTS = ("nccl-tests' stdout (a '#  size  count  type ... time  algbw  busbw' header line), its CSV variant "
           "('size(B),count,type,time(ns),busbw(GB/s),...') or the CSV `planner import nccl-tests` writes "
           f"('{TABLE_HEADER}')")


@dataclass(frozen=True)
class NcclRow:
    size_bytes: int
    time_us: float
    algbw_GBps: float
    busbw_GBps: float


@dataclass(frozen=True)
class NcclTable:
    rows: tuple             # NcclRow, sorted by size
    placement: str          # out-of-place | in-place
    layout: str             # stdout | csv | table (the importer's own CSV)
    collective: str | None
    nranks: int | None
    avg_busbw_GBps: float | None = None
    placements: tuple = ()  # the placements the file holds


def parse_nccl_tests(text: str, file: str | None = None, placement: str | None = "out-of-place") -> NcclTable:
    """One nccl-tests table from `text`, columns found by their header names, whatever the layout (LAYOUTS).

    placement: which columns to take; None: out-of-place where the file has it, else the one it holds (the
    importer's CSV keeps one). Rows with wrong results (#wrong > 0) in the chosen columns are refused, and so
    is any other layout (SpecError naming the file)."""
    if placement not in (None,) + PLACEMENTS:
        raise SpecError(None, "--placement", "must be out-of-place or in-place")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    first = next((ln for ln in lines if not ln.lstrip().startswith("#")), "")
    if first.replace(" ", "").lower() == TABLE_HEADER.lower():
        return _nccl_table(lines, file, placement)
    if re.match(r"\s*size\s*\(B\)\s*,", first, re.I):
        return _nccl_csv(lines, file, placement)
    if any(_stdout_header(ln) for ln in lines):
        return _nccl_stdout(lines, file, placement)
    what = f"its first line that is not a comment is {first.strip()[:80]!r}" if first else "it has no data line"
    raise SpecError(file, "layout", f"not an nccl-tests table: expected {LAYOUTS}; {what}")


def _stdout_header(ln: str):
    s = ln.strip()
    if not s.startswith("#"):
        return None
    body = s.lstrip("#").split()
    return body if "size" in body and "count" in body and "time" in body else None


def _pick(placement, available, file):
    """The placement to read: the one asked for (refused when the file lacks it), or the first the file holds."""
    if not available:
        raise SpecError(file, "header", "no time column")
    if placement is None:
        return available[0]
    if placement not in available:
        raise SpecError(file, "header", f"no {placement} columns (the file holds {' and '.join(available)})")
    return placement


def _nccl_csv(lines, file, placement):
    head = [c.strip().lower() for c in next(ln for ln in lines if not ln.lstrip().startswith("#")).split(",")]
    times = [k for k, c in enumerate(head) if c.startswith("time")]
    busbws = [k for k, c in enumerate(head) if c.startswith("busbw")]
    algbws = [k for k, c in enumerate(head) if c.startswith("algbw")]
    wrongs = [k for k, c in enumerate(head) if c.startswith("#wrong")]
    if not times:
        raise SpecError(file, "header", "no time column in the nccl-tests CSV header")
    available = PLACEMENTS[:len(times)]
    placement = _pick(placement, available, file)
    which = PLACEMENTS.index(placement)
    tcol = times[which]
    tunit = re.search(r"\((\w+)\)", head[tcol])
    scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}.get(tunit.group(1) if tunit else "us")
    if scale is None:
        raise SpecError(file, head[tcol], "unknown time unit")
    rows = []
    started = False
    for k, ln in enumerate(lines):
        if ln.lstrip().startswith("#"):
            continue
        if not started:
            started = True
            continue
        cells = [c.strip() for c in ln.split(",")]
        try:
            size = int(float(cells[0]))
            t_us = float(cells[tcol]) * scale
            bus = float(cells[busbws[which]]) if which < len(busbws) else float("nan")
            alg = float(cells[algbws[which]]) if which < len(algbws) else size / (t_us * 1e3)
        except (ValueError, IndexError):
            raise SpecError(file, f"line {k + 1}", f"not a nccl-tests data row: {ln.strip()[:80]!r}") from None
        _check_wrong(cells[wrongs[which]] if len(wrongs) > which and wrongs[which] < len(cells) else None, file, k + 1)
        rows.append(NcclRow(size, t_us, alg, bus))
    return _table(rows, file, placement, "csv", None, None, None, available)


def _check_wrong(cell: str | None, file, line: int) -> None:
    """nccl-tests' #wrong column counts elements that failed its data check (-c 1; 'N/A' without it): a row with
    wrong results measured a broken collective, not a link."""
    try:
        n = float(cell) if cell is not None else 0.0
    except ValueError:
        return
    if n > 0:
        raise SpecError(file, f"line {line}", f"nccl-tests reported {cell} wrong result(s) (#wrong) for this size: "
                                              "its timing is not a measurement of the link; rerun the test")


def _nccl_stdout(lines, file, placement):
    cols = None
    collective = None
    nranks = None
    avg = None
    rows = []
    pos = available = wrong = None
    for k, ln in enumerate(lines):
        s = ln.strip()
        if s.startswith("#"):
            body = _stdout_header(s)
            if body:
                cols = body
                pos = {name: [i for i, c in enumerate(cols) if c == name] for name in ("time", "algbw", "busbw")}
                available = PLACEMENTS[:min(len(v) for v in pos.values())]
                if not available:
                    raise SpecError(file, "header", "no time/algbw/busbw columns")
                placement = _pick(placement, available, file)
                wrong = [i for i, c in enumerate(cols) if c == "#wrong"]
            m = re.search(r"Collective test starting:\s*(\S+)", s)
            if m:
                collective = m.group(1)
            if re.match(r"#\s+Rank\s+\d+", s):
                nranks = (nranks or 0) + 1
            m = re.search(r"Avg bus bandwidth\s*:\s*([\d.]+)", s)
            if m:
                avg = float(m.group(1))
            continue
        if cols is None:
            continue
        cells = s.split()
        if not cells or not re.fullmatch(r"\d+", cells[0]):
            continue                              # NCCL INFO lines and the like
        if len(cells) < len(cols):
            raise SpecError(file, f"line {k + 1}", f"row has {len(cells)} cells for {len(cols)} columns")
        which = PLACEMENTS.index(placement)
        try:
            rows.append(NcclRow(int(cells[0]), float(cells[pos["time"][which]]), float(cells[pos["algbw"][which]]),
                                float(cells[pos["busbw"][which]])))
        except ValueError:
            raise SpecError(file, f"line {k + 1}", f"non-numeric cell in {s[:80]!r}") from None
        _check_wrong(cells[wrong[which]] if len(wrong) > which else None, file, k + 1)
    if cols is None:
        raise SpecError(file, "header", "no nccl-tests header line ('#  size  count  type ... time algbw busbw')")
    return _table(rows, file, placement, "stdout", collective, nranks, avg, available)


def _nccl_table(lines, file, placement):
    """The CSV `planner import nccl-tests` writes: one placement, named in its first comment."""
    held = "out-of-place"
    nranks = None
    for ln in lines:
        if not ln.lstrip().startswith("#"):
            break
        m = re.search(r"\((out-of-place|in-place),", ln)
        if m:
            held = m.group(1)
        m = re.search(r"(\d+) ranks\)", ln)
        if m:
            nranks = int(m.group(1))
    placement = _pick(placement, (held,), file)
    rows = []
    data = [(k, ln) for k, ln in enumerate(lines) if not ln.lstrip().startswith("#")]
    for k, ln in data[1:]:
        try:
            s, t, a, b = (c.strip() for c in ln.split(","))
            rows.append(NcclRow(int(s), float(t), float(a), float(b)))
        except ValueError:
            raise SpecError(file, f"line {k + 1}", f"not 4 numbers ({TABLE_HEADER}): {ln.strip()[:80]!r}") from None
    return _table(rows, file, placement, "table", None, nranks, None, (held,))


def _table(rows, file, placement, layout, collective, nranks, avg, available):
    if not rows:
        raise SpecError(file, "rows", "no data rows")
    for r in rows:
        if r.size_bytes <= 0 or not r.time_us > 0:
            raise SpecError(file, f"size {r.size_bytes}", "sizes and times must be positive")
    sizes = [r.size_bytes for r in rows]
    if len(set(sizes)) != len(sizes):
        dup = next(x for x in sizes if sizes.count(x) > 1)
        raise SpecError(file, f"size {dup}", "appears twice: several runs in one file? split it, one table per file")
    rows = tuple(sorted(rows, key=lambda r: r.size_bytes))
    return NcclTable(rows, placement, layout, collective, nranks, avg, tuple(available))


def nccl_table_csv(table: NcclTable, comments=()) -> str:
    out = [f"# {c}" for c in comments]
    out.append(TABLE_HEADER)
    for r in table.rows:
        out.append(f"{r.size_bytes},{r.time_us:.4f},{r.algbw_GBps:.4f},{r.busbw_GBps:.4f}")
    return "\n".join(out) + "\n"


def read_nccl_table(path: str, placement: str | None = None) -> NcclTable:
    """One nccl-tests table from a file (any layout parse_nccl_tests reads; bounded regular UTF-8 file)."""
    from planner.io import read_text_file
    return parse_nccl_tests(read_text_file(path), path, placement)


def read_text(path: str) -> str:
    if not os.path.exists(path):
        raise SpecError(path, None, "file does not exist")
    try:
        with open(path, errors="replace") as fh:
            return fh.read()
    except OSError as e:
        raise SpecError(path, None, f"cannot read ({e.strerror})") from None
