"""planner batch SWEEP.yaml: plan every case of a sweep (local worker processes or Ray) into a CSV."""
from __future__ import annotations

import shutil
import sys

from planner.cli.common import finite_float
from planner.errors import SpecError
from planner.io import print_json


def register(sub) -> None:
    p = sub.add_parser("batch", help="plan many models / clusters / GPU counts from a sweep spec into a CSV")
    p.add_argument("sweep", help="sweep YAML (sweeps/...)")
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="local worker processes (default) or Ray")
    p.add_argument("--address", default=None, help="Ray cluster address (default: start a local Ray instance)")
    p.add_argument("--workers", type=int, default=None, help="parallel cases (default: CPU cores)")
    p.add_argument("--out", default=None, help="output folder, created if missing in a folder that exists "
                                                 "(default: results/)")
    p.add_argument("--time-limit", type=finite_float, default=None,
                   help="seconds per case (default: the sweep's solver)")
    p.add_argument("--no-resume", action="store_true",
                   help="re-solve cases already in the output CSV (their old rows go to NAME.previous.csv)")
    p.add_argument("--plots", action="store_true", help="also draw PNG pictures of the results into --out")
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    p.set_defaults(func=run)


def run(args) -> int:
    from planner.batch.run import OK_STATUSES, run_batch
    from planner.batch.sizing import cheapest_vs_fastest
    from planner.batch.sweep import load_sweep

    if args.workers is not None and args.workers < 1:
        raise SpecError(None, "--workers", f"must be a positive integer, got {args.workers}")
    if args.time_limit is not None and args.time_limit <= 0:
        raise SpecError(None, "--time-limit", "must be positive")
    if args.address and args.executor != "ray":
        raise SpecError(None, "--address", "only applies with --executor ray")
    if args.executor == "ray":
        import importlib.util
        if importlib.util.find_spec("ray") is None:       # before the progress bar and the CSV (run._ray says it too)
            raise SpecError(None, "--executor", "ray is not installed (pip install 'planner[ray]')")
    sweep = load_sweep(args.sweep)
    from planner.io import check_out_folder
    given = args.out is not None
    args.out = args.out or "results"
    check_out_folder(args.out, "--out", given)
    res = run_batch(sweep, args.out, executor=args.executor, workers=args.workers, address=args.address,
                    time_limit_s=args.time_limit, progress=not args.json, resume=not args.no_resume)
    if args.time_limit is not None and res.reused:
        # the rows do not record the limit they were solved on: the case id hashes the sweep's solver, not the flag
        print(f"planner: note: {res.reused} case(s) came from the existing CSV as solved before: --time-limit "
              f"{args.time_limit:g} did not apply to them (--no-resume solves them again at it)", file=sys.stderr)
    cvf = cheapest_vs_fastest(res.rows)
    plots = []
    if args.plots:
        from planner.batch.plots import plot_results
        plots = plot_results(res.rows, args.out, sweep.name)
    if args.json:
        print_json({"sweep": sweep.name, "csv": res.csv_path, "cases": len(res.rows), "solved": res.solved,
                    "reused": res.reused, "wall_s": res.wall_s, "skipped_grid_points": sweep.skipped,
                    "rows": res.rows, "cheapest_vs_fastest": cvf, "sizing": res.sizing,
                    "sizing_csv": res.sizing_csv, "plots": plots})
    else:
        from rich.console import Console
        con = Console(file=sys.stderr, width=max(200, shutil.get_terminal_size((200, 24)).columns))
        con.print(results_table(res.rows, sweep.name))
        for r in res.rows:
            if r.get("error"):
                msg = str(r["error"])
                con.print(f"{r['model']} on {r['gpus']} GPUs: {r['status']}: "
                          f"{msg if len(msg) <= 300 else msg[:300] + '...'}", markup=False, highlight=False)
        multi = [g for g in cvf if g["options"] > 1]
        if multi:
            con.print(cheapest_table(multi, res.rows))
        if res.sizing:
            con.print(sizing_table(res.sizing))
        for what, why in sweep.skipped:
            con.print(f"skipped grid point {what}: {why}")
        con.print(f"{len(res.rows)} cases ({res.solved} solved now, {res.reused} from the existing CSV) in "
                  f"{res.wall_s:.1f} s; wrote {res.csv_path}" + (f" and {res.sizing_csv}" if res.sizing_csv else ""))
        for p in plots:
            con.print(f"wrote {p}")
    ok = sum(1 for r in res.rows if r.get("status") in OK_STATUSES)
    return 0 if ok or not res.rows else 1


def _n(v) -> str:
    # block recompute's N after the mode, as ParallelConfig.label writes it (rc=block3); empty for the other modes
    return "" if v is None or v == "" else str(v)


def _f(v, fmt: str) -> str:
    return "" if v is None or v == "" else format(v, fmt)


def results_table(rows, title):
    from rich.table import Table

    from planner.costs.iteration import precision_mfu_note
    # MFU is against the plan's own precision's peak, except fp8's: against the bf16 peak (costs.iteration.mfu_note,
    # model TFLOP/s as NeMo and Megatron report it), which the table says as `estimate` and `solve` do
    fp8 = any(precision_mfu_note(r.get("precision")) for r in rows)
    t = Table(title=f"batch: {title}",
              caption=f"MFU*: MFU{precision_mfu_note('fp8')} (fp8 rows)" if fp8 else None)
    for c in ("model", "params", "cluster", "GPUs", "prec", "tp/pp/dp", "mbs", "sched", "rc/z", "iter s",
              "tokens/s", "MFU", "mem GiB", "status", "gap", "days", "GPU-h", "$"):
        t.add_column(c, justify="right" if c not in ("model", "cluster", "prec", "sched", "status") else "left",
                     no_wrap=True)
    for r in rows:
        ok = r.get("tp") is not None
        mfu = _f(r.get("mfu"), ".1%") + ("*" if precision_mfu_note(r.get("precision")) and r.get("mfu") else "")
        t.add_row(str(r["model"]), f"{r['params'] / 1e9:.2f}B", str(r["cluster"]), str(r["gpus"]),
                  str(r.get("precision") or ""),
                  f"{r['tp']}/{r['pp']}/{r['dp']}" if ok else "", str(r.get("micro_batch_size") or ""),
                  str(r.get("schedule") or ""),
                  f"{r['recompute']}{_n(r.get('recompute_layers'))}/{r['zero']}" if ok else "",
                  _f(r.get("iteration_s"), ".3f"), _f(r.get("tokens_per_s"), ",.0f"), mfu,
                  _f(r.get("peak_memory_GiB"), ".1f"), str(r.get("status")), _f(r.get("gap"), ".1%"),
                  _f(r.get("train_days"), ".1f"), _f(r.get("gpu_hours"), ",.0f"), _f(r.get("cost_usd"), ",.0f"))
    return t


# what, besides the model, tells the cheapest-vs-fastest groups apart: shown when the sweep has several
GROUP_KEYS = (("global_batch_size", "batch", ""), ("seq_length", "seq", ""), ("tokens", "tokens", ".3g"))


def cheapest_table(groups, rows=()):
    """One line per group of cheapest_vs_fastest; `rows` (the sweep's) decide which group keys vary and so
    need a column (two batch sizes of one model would otherwise be two lines named alike)."""
    from rich.table import Table

    from planner.batch.plots import varies_within
    keys = [(k, head, fmt) for k, head, fmt in GROUP_KEYS if varies_within(rows or groups, k, ("model",))]
    t = Table(title="cheapest vs fastest plan per model (over clusters and GPU counts)")
    for c in ("model", *(head for _, head, _ in keys), "options", "fastest", "days", "$", "cheapest", "days", "$"):
        t.add_column(c)
    for g in groups:
        f, c = g["fastest"], g["cheapest"]
        t.add_row(str(g["model"]), *(_f(g.get(k), fmt) for k, _, fmt in keys), str(g["options"]),
                  f"{f['cluster']} {f['gpus']}g", _f(f["train_days"], ".1f"), _f(f["cost_usd"], ",.0f"),
                  f"{c['cluster']} {c['gpus']}g", _f(c["train_days"], ".1f"), _f(c["cost_usd"], ",.0f"))
    return t


def sizing_table(rows):
    from rich.table import Table

    from planner.costs.iteration import precision_mfu_note
    fp8 = any(precision_mfu_note(r.get("precision")) for r in rows)
    t = Table(title="compute-optimal model (Chinchilla: 20 tokens per parameter) within a GPU-day budget",
              caption=f"MFU*: MFU{precision_mfu_note('fp8')} (fp8 rows)" if fp8 else None)
    for c in ("cluster", "GPUs", "budget GPU-days", "model", "params", "tokens/s", "MFU", "GPU-days", "days",
              "solves", "status"):
        t.add_column(c)
    for r in rows:
        t.add_row(str(r["cluster"]), str(r["gpus"]), _f(r["budget_gpu_days"], ",.0f"), str(r.get("model") or ""),
                  _f(r.get("params") and r["params"] / 1e9, ".2f") + ("B" if r.get("params") else ""),
                  _f(r.get("tokens_per_s"), ",.0f"),
                  _f(r.get("mfu"), ".1%") + ("*" if precision_mfu_note(r.get("precision")) and r.get("mfu") else ""),
                  _f(r.get("gpu_days"), ",.0f"),
                  _f(r.get("train_days"), ".1f"), str(r.get("solves") or ""), str(r["status"]))
    return t

