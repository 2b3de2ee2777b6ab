"""Timeline picture: one row per pipeline rank (colour = op type, lighter = later micro-batch in a
group of 8), the data-parallel gradient sync in red, and a memory-per-device panel below."""
from __future__ import annotations

import io

import numpy as np

from planner.io import atomic_write_bytes
from planner.simulator.ops import KIND_NAMES, dp_sync_name

COLOURS = {"F": (0.20, 0.45, 0.80), "B": (0.20, 0.65, 0.30), "W": (0.95, 0.60, 0.10), "R": (0.55, 0.30, 0.70)}


def _shade(rgb, mb: np.ndarray) -> np.ndarray:
    a = (mb % 8) / 8.0 * 0.55                       # mix with white: later micro-batches lighter
    c = np.asarray(rgb)[None, :]
    return c * (1 - a[:, None]) + a[:, None]


def plot_timeline(sim, path: str, title: str | None = None) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    p = sim.schedule.p
    fig, (ax, axm) = plt.subplots(2, 1, figsize=(14, 2.0 + 0.45 * p + 3), sharex=True,
                                  gridspec_kw={"height_ratios": [max(2, 0.45 * p), 3]})
    for d in range(p):
        sel = sim.op_dev == d
        for k, name in enumerate(KIND_NAMES):
            s = sel & (sim.op_kind == k)
            if not s.any():
                continue
            st, en = sim.op_start[s], sim.op_end[s]
            ax.broken_barh(list(zip(st, en - st, strict=True)), (d - 0.4, 0.55),
                           facecolors=_shade(COLOURS[name], sim.op_mb[s]), edgecolor="none")
        # the gradient sync in a strip of its own under the lane: overlapped, it runs beside the last backward ops
        # and drawn over them it hid them
        if sim.dp_end and sim.dp_end[d] > sim.dp_start[d]:
            ax.broken_barh([(sim.dp_start[d], sim.dp_end[d] - sim.dp_start[d])], (d + 0.2, 0.2),
                           facecolors=(0.85, 0.2, 0.2), edgecolor="none")
    ax.set_yticks(range(p))
    ax.set_yticklabels([f"rank {d}" for d in range(p)])
    ax.invert_yaxis()
    ax.set_ylabel("pipeline rank")
    handles = [Patch(color=COLOURS[k], label=lab) for k, lab in
               (("F", "forward"), ("B", "backward" + (" (input grad)" if sim.schedule.split else "")),
                ("W", "weight grad"), ("R", "recompute"))
               if np.any(sim.op_kind == KIND_NAMES.index(k))]
    handles.append(Patch(color=(0.85, 0.2, 0.2), label=f"DP {dp_sync_name(sim.config.zero if sim.config else 0)}"))
    ax.legend(handles=handles, loc="upper right", fontsize=8, ncol=len(handles))
    cfg = sim.config.label() if sim.config else f"{sim.schedule.name} p{p} m{sim.schedule.m}"
    ax.set_title(title or f"{cfg}: iteration {sim.iteration_s * 1e3:.1f} ms, bubble {sim.bubble_fraction:.1%}")
    cmap = plt.get_cmap("viridis")
    for d in range(p):
        t, live = sim.memory_timeline(d)
        axm.step(np.r_[0.0, t], sim.static_memory_GiB[d] + np.r_[0.0, live], where="post",
                 color=cmap(d / max(p - 1, 1)), lw=1, label=f"rank {d}" if p <= 16 else None)
    axm.set_ylabel("memory (GiB)")
    axm.set_xlabel("time (s)")
    if p <= 16:
        axm.legend(fontsize=7, ncol=min(p, 8), loc="lower right")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format=path.rsplit(".", 1)[-1] if "." in path else "png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
