"""Pictures of a batch's results (matplotlib, Agg): throughput and MFU vs model size, chosen tp/pp/dp vs
size, and cost / time to train vs GPU count. Input: the rows of a results CSV (planner.batch.read_rows)."""
from __future__ import annotations

import os

OK = ("OPTIMAL", "FEASIBLE", "TIME_LIMIT")


def _ok(rows):
    out = []
    for r in rows:
        if r.get("status") in OK and r.get("tokens_per_s") not in (None, ""):
            out.append({k: _num(v) for k, v in r.items()})
    return out


def _num(v):
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return v
    return v


def _series(rows, key):
    """Rows grouped by key (cluster, GPUs, batch, sequence) in a stable order, each sorted by size."""
    groups: dict = {}
    for r in rows:
        groups.setdefault(key(r), []).append(r)
    return [(k, sorted(v, key=lambda r: r["params"])) for k, v in sorted(groups.items(), key=lambda kv: str(kv[0]))]


def plot_results(rows: list[dict], out_dir: str, name: str) -> list[str]:
    """Write <name>.size.png, <name>.parallelism.png and (with several GPU counts) <name>.cost.png."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = _ok(rows)
    if not ok:
        return []
    os.makedirs(out_dir, exist_ok=True)
    written = []
    series = _series(ok, lambda r: (r["cluster"], int(r["gpus"]), int(r["global_batch_size"]), int(r["seq_length"])))

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    for (cl, g, b, s), rs in series:
        x = [r["params"] / 1e9 for r in rs]
        lab = f"{cl} {g} GPUs, batch {b}, seq {s}"
        a1.plot(x, [r["tokens_per_s"] for r in rs], "o-", ms=3, label=lab)
        a2.plot(x, [100 * r["mfu"] for r in rs], "o-", ms=3, label=lab)
    for a, yl in ((a1, "tokens / s (best plan)"), (a2, "MFU (%)")):
        a.set_xscale("log")
        a.set_xlabel("parameters (billions)")
        a.set_ylabel(yl)
        a.grid(alpha=0.3)
    a1.set_yscale("log")
    a1.legend(fontsize=7)
    fig.suptitle(f"{name}: achieved throughput and MFU vs model size")
    fig.tight_layout()
    written.append(_save(fig, out_dir, f"{name}.size.png"))
    plt.close(fig)

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), sharex=True)
    for (cl, g, _b, _s), rs in series:
        x = [r["params"] / 1e9 for r in rs]
        for a, k in zip(axes, ("tp", "pp", "dp")):
            a.plot(x, [r[k] for r in rs], "o-", ms=3, drawstyle="steps-mid", label=f"{cl} {g} GPUs")
    for a, k in zip(axes, ("tensor parallel", "pipeline parallel", "data parallel")):
        a.set_xscale("log")
        a.set_yscale("log", base=2)
        a.set_xlabel("parameters (billions)")
        a.set_title(k)
        a.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"{name}: chosen parallelism vs model size")
    fig.tight_layout()
    written.append(_save(fig, out_dir, f"{name}.parallelism.png"))
    plt.close(fig)

    priced = [r for r in ok if r.get("train_days") not in (None, "")]
    lines = cost_lines(priced)
    if any(len({r["gpus"] for r in rs}) > 1 for _, rs in lines):
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
        for label, rs in lines:
            x = [r["gpus"] for r in rs]
            cost = [r.get("cost_usd") if r.get("cost_usd") not in (None, "") else r["gpu_hours"] for r in rs]
            a1.plot(x, cost, "o-", label=label)
            a2.plot(x, [r["train_days"] for r in rs], "o-", label=label)
        has_price = all(r.get("cost_usd") not in (None, "") for r in priced)
        for a, yl in ((a1, "dollars to train" if has_price else "GPU-hours to train"), (a2, "days to train")):
            a.set_xscale("log", base=2)
            a.set_xlabel("GPUs")
            a.set_ylabel(yl)
            a.grid(alpha=0.3)
        a1.legend(fontsize=7)
        fig.suptitle(f"{name}: cost and time to train the token budget vs GPU count")
        fig.tight_layout()
        written.append(_save(fig, out_dir, f"{name}.cost.png"))
        plt.close(fig)
    return written


# a cost line is one model on one cluster at one batch, sequence length and token budget: joining two
# batch sizes would zig-zag between them along the GPU axis
_LINE_KEYS = (("global_batch_size", "batch {:g}"), ("seq_length", "seq {:g}"), ("tokens", "{:.3g} tokens"))


def varies_within(rows, key: str, by: tuple[str, ...]) -> bool:
    """Do rows alike in `by` differ in `key`? (A Chinchilla budget differs between models but not within one,
    so it needs no label; two batch sizes of one model do.)"""
    seen: dict = {}
    return any(seen.setdefault(tuple(r[b] for b in by), r.get(key)) != r.get(key) for r in rows)


def cost_lines(rows: list[dict]) -> list[tuple[str, list[dict]]]:
    """(label, rows sorted by GPU count) per cost / time line; the label names the batch, sequence length
    or token budget only where one model on one cluster has several."""
    def key(r):
        return (r["model"], r["cluster"], *(r.get(k) for k, _ in _LINE_KEYS))
    varying = [(i, fmt) for i, (k, fmt) in enumerate(_LINE_KEYS) if varies_within(rows, k, ("model", "cluster"))]
    groups: dict = {}
    params: dict = {}
    for r in rows:
        groups.setdefault(key(r), []).append(r)
        params.setdefault(r["model"], float(r.get("params") or 0))
    out = []
    # by model size (gpt-986m before gpt-2.02b, which its name would not give), name and cluster, then numerically
    # (batch 96 before 100); a missing value sorts last
    for k, rs in sorted(groups.items(), key=lambda kv: (params[kv[0][0]], *kv[0][:2],
                                                        *((v is None, v or 0) for v in kv[0][2:]))):
        extra = [fmt.format(k[2 + i]) for i, fmt in varying if k[2 + i] is not None]
        out.append((f"{k[0]} on {k[1]}" + (f", {', '.join(extra)}" if extra else ""),
                    sorted(rs, key=lambda r: r["gpus"])))
    return out


def _save(fig, out_dir, fname) -> str:
    import io

    from planner.io import atomic_write_bytes
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    path = os.path.join(out_dir, fname)
    atomic_write_bytes(path, buf.getvalue())
    return path


def plot_sizing(result: dict, path: str) -> str:
    """GPU-days (Chinchilla-optimal, at the achieved throughput) of every size the sizing search solved,
    against the budget; the answer is circled. `result` is SizingResult.as_dict()."""
    import io

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from planner.io import atomic_write_bytes
    pts = [p for p in result["points"] if p["gpu_days"]]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ax.plot([p["params"] / 1e9 for p in pts], [p["gpu_days"] for p in pts], "o", label="solved sizes")
    bad = [p for p in result["points"] if not p["gpu_days"]]
    for p in bad:
        ax.axvline(p["params"] / 1e9, color="grey", ls=":", lw=1)
    ax.axhline(result["budget_gpu_days"], color="red", lw=1, label=f"budget {result['budget_gpu_days']:,.0f} GPU-days")
    b = result.get("best")
    if b:
        ax.plot([b["params"] / 1e9], [b["gpu_days"]], "o", ms=14, mfc="none", mec="k",
                label=f"answer: {b['params'] / 1e9:.2f}B")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("parameters (billions)")
    ax.set_ylabel("GPU-days for 20 tokens / parameter")
    ax.set_title(f"{result['cluster']}, {result['gpus']} GPUs" + (" (dotted: no plan fits)" if bad else ""))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return path
