"""Solve every case of a sweep on local worker processes (default) or on Ray; one CSV row per case.

Rows are written after every finished case (atomic rewrite, sweep order), so an interrupted sweep
resumes: cases already in the output CSV are skipped, except rows with status ERROR (an internal
failure is worth retrying; INFEASIBLE is an answer). A case that fails is recorded in its row and
never stops the sweep. Rows are never dropped: those of cases no longer in the sweep go to
<name>.stale.csv, and those that resume=False re-solves go to <name>.previous.csv first.
"""
from __future__ import annotations

import csv
import io
import os
import signal
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field

from planner.batch.sizing import train_cost
from planner.io import atomic_write_text

COLUMNS = ["case_id", "model", "family", "params", "num_layers", "hidden_size", "num_attention_heads",
           "cluster", "gpus", "nodes", "global_batch_size", "seq_length", "tokens",
           "tp", "pp", "dp", "cp", "micro_batch_size", "num_microbatches", "schedule", "vpp", "recompute", "zero",
           "sequence_parallel", "iteration_s", "tokens_per_s", "mfu", "peak_memory_GiB", "status", "gap",
           "bound_s", "solver_wall_s", "train_days", "gpu_hours", "price_per_gpu_hour_usd", "cost_usd", "error",
           "precision",     # appended last (tryout 4): readers of the older columns by position keep working
           "recompute_layers"]      # block recompute's N (empty for the other modes), appended last likewise
SIZING_COLUMNS = ["task_id", "cluster", "gpus", "budget_gpu_days", "global_batch_size", "seq_length", "model",
                  "params", "num_layers", "hidden_size", "tokens", "tokens_per_s", "mfu", "gpu_days", "train_days",
                  "cost_usd", "config", "solves", "wall_s", "status", "error", "precision"]
OK_STATUSES = ("OPTIMAL", "FEASIBLE", "TIME_LIMIT")


# ---------------------------------------------------------------- worker side (pure, picklable)

def limit_threads() -> None:
    """One solver per core: keep BLAS / OpenMP / torch from spawning a thread per core in every worker."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = "1"
    if "torch" in sys.modules:
        try:
            sys.modules["torch"].set_num_threads(1)
        except Exception:      # torch may refuse after its pool started; the env var still covers children
            pass


def _base_row(case) -> dict:
    m = case.spec.model
    return {"case_id": case.id, "model": case.model_label, "family": m.family, "params": m.num_params(),
            "num_layers": m.num_layers, "hidden_size": m.hidden_size, "num_attention_heads": m.num_attention_heads,
            "cluster": case.cluster_label, "gpus": case.gpus, "nodes": case.spec.cluster.nodes,
            "global_batch_size": case.spec.training.global_batch_size, "seq_length": case.spec.training.seq_length,
            "tokens": case.tokens, "price_per_gpu_hour_usd": case.price_per_gpu_hour_usd,
            "precision": case.spec.training.precision}


def run_case(case, time_limit_s: float | None = None) -> dict:
    """Solve one case into its row; every failure becomes the row's status and error."""
    from planner.errors import InfeasibleError, SpecError
    from planner.search.solve import solve

    row = _base_row(case)
    t0 = time.perf_counter()
    try:
        sol = solve(case.spec, time_limit_s=time_limit_s, simulate=False)
    except InfeasibleError as e:
        row.update(status="INFEASIBLE", error=str(e), solver_wall_s=time.perf_counter() - t0)
        return row
    except SpecError as e:
        row.update(status="BAD_INPUT", error=str(e), solver_wall_s=time.perf_counter() - t0)
        return row
    except Exception as e:
        row.update(status="ERROR", error=f"{type(e).__name__}: {e}", solver_wall_s=time.perf_counter() - t0)
        return row
    c, e, s = sol.config, sol.estimate, sol.solver
    row.update(tp=c.tp, pp=c.pp, dp=c.dp, cp=c.cp, micro_batch_size=c.micro_batch_size,
               num_microbatches=c.num_microbatches,
               schedule=c.schedule, vpp=c.vpp, recompute=c.recompute, recompute_layers=c.recompute_layers, zero=c.zero,
               sequence_parallel=c.sequence_parallel, iteration_s=e.iteration_s, tokens_per_s=e.tokens_per_s,
               mfu=e.mfu, peak_memory_GiB=e.peak_memory_GiB, status=s.status, gap=s.gap, bound_s=s.bound,
               solver_wall_s=s.wall_s, error="")
    if case.tokens:
        cost = train_cost(case.tokens, e.tokens_per_s, case.gpus, case.price_per_gpu_hour_usd)
        row.update(train_days=cost.days, gpu_hours=cost.gpu_hours, cost_usd=cost.dollars)
    return row


def failed_case_row(case, exc: BaseException) -> dict:
    """The row of a case whose worker died before it could answer (status ERROR: retried on resume)."""
    row = _base_row(case)
    row.update(status="ERROR", error=f"worker failed: {type(exc).__name__}: {exc}")
    return row


def _sizing_base(task) -> dict:
    return {"task_id": task.id, "cluster": task.cluster_label, "gpus": task.gpus,
            "budget_gpu_days": task.budget_gpu_days, "global_batch_size": task.training.global_batch_size,
            "seq_length": task.training.seq_length, "precision": task.training.precision}


def failed_sizing_row(task, exc: BaseException) -> dict:
    row = _sizing_base(task)
    row.update(status="ERROR", error=f"worker failed: {type(exc).__name__}: {exc}")
    return row


def run_sizing(task, time_limit_s: float | None = None) -> dict:
    from planner.batch.sizing import optimal_size
    row = _sizing_base(task)
    try:
        res = optimal_size(task.cluster, task.gpus, task.budget_gpu_days, task.training, task.search, task.solver,
                           task.family, task.vocab_size, task.rule, time_limit_s, task.price_per_gpu_hour_usd)
    except Exception as e:
        row.update(status="ERROR", error=f"{type(e).__name__}: {e}")
        return row
    d = res.as_dict()
    row.update(solves=d["solves"], wall_s=d["wall_s"])
    b = d["best"]
    if b is None:
        row.update(status="NONE_FITS", error="not even the smallest grid size trains within the budget")
    else:
        row.update(status="OK", error="", model=b["model"], params=b["params"], num_layers=b["num_layers"],
                   hidden_size=b["hidden_size"], tokens=b["tokens"], tokens_per_s=b["tokens_per_s"], mfu=b["mfu"],
                   gpu_days=b["gpu_days"], train_days=b["train_days"], cost_usd=b["cost_usd"], config=b["config"])
    return row


def _call(fn, item, time_limit_s):
    """One case in a Ray worker, whose BLAS / torch pools are cut to one thread first."""
    from planner.costs import quiet_profile_warnings
    limit_threads()
    quiet_profile_warnings()
    return fn(item, time_limit_s)


# ---------------------------------------------------------------- executors

def _local(fn, items, workers: int, time_limit_s, on_done, on_error=None):
    if workers <= 1:
        limit_threads()
        for k, it in enumerate(items):
            on_done(k, fn(it, time_limit_s))
        return
    import multiprocessing as mp
    from multiprocessing import resource_tracker

    from planner.interrupt import deferred_sigint
    # forkserver: workers never inherit a parent's thread pools (torch, ray), and share preloaded imports
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["planner.batch.worker_signals", "planner.search.solve", "planner.batch.run"])
    pool = None
    try:
        # Starting the resource tracker unblocks SIGINT in this thread, so it goes first, on its own; the
        # forkserver and its workers start in the first submit, with a Ctrl-C held until they have started.
        with deferred_sigint():
            resource_tracker.ensure_running()
        with deferred_sigint():
            pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=worker_init)
            futs = {pool.submit(fn, it, time_limit_s): k for k, it in enumerate(items)}
        _collect(futs, on_done, on_error)
    except BaseException:                 # Ctrl-C, or a callback failing: no worker may outlive the batch
        if pool is not None:
            _stop_pool(pool)
        raise
    pool.shutdown(wait=True)


def _collect(futs: dict, on_done, on_error) -> None:
    """Hand every result (or failure) to its callback as the cases finish, in sweep order among ties."""
    pending = set(futs)
    while pending:
        done, pending = wait(pending, return_when=FIRST_COMPLETED)
        for f in sorted(done, key=lambda f: futs[f]):
            try:
                r = f.result()
            except Exception as e:
                if on_error is None:
                    raise
                on_error(futs[f], e)
            else:
                on_done(futs[f], r)


def worker_init() -> None:
    """Every local worker: Ctrl-C is the parent's (it stops the workers), one thread per solver, and no warnings the
    parent gave already (a CPU-fitted compute profile: warn_cpu_profiles)."""
    from planner.costs import quiet_profile_warnings
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    limit_threads()
    quiet_profile_warnings()


def _stop_pool(pool: ProcessPoolExecutor, grace_s: float = 5.0) -> None:
    """Stop now rather than finish the queue (what leaving the `with` block would do): queued cases are
    dropped, running ones end with their workers (their rows stay unsolved, so a resume solves them),
    and every worker is reaped. A second Ctrl-C meanwhile is held, not allowed to cut this short."""
    from planner.interrupt import deferred_sigint
    with deferred_sigint():
        procs = list((getattr(pool, "_processes", None) or {}).values())   # no public handle before 3.14
        # shutdown(wait=False) drops the executor's handle on its manager thread without joining it, so the
        # shutdown(wait=True) below no longer waits for it; left running, it closed its wakeup pipe while the
        # interpreter's exit hook (concurrent.futures.process._python_exit) wrote to it: "Exception ignored ...
        # OSError: [Errno 9] Bad file descriptor" after "planner: interrupted" (CPython 3.11, test_batch_interrupt)
        manager = getattr(pool, "_executor_manager_thread", None)
        pool.shutdown(wait=False, cancel_futures=True)
        for p in procs:
            p.terminate()
        for p in procs:
            p.join(grace_s)
            if p.is_alive():
                p.kill()
                p.join()
        pool.shutdown(wait=True)
        if manager is not None:
            manager.join(grace_s)         # it sees the workers gone and ends, before the interpreter's exit hook


def _ray(fn, items, workers: int | None, address: str | None, time_limit_s, on_done, on_error=None):
    try:
        import ray
    except ImportError:
        from planner.errors import SpecError
        raise SpecError(None, "--executor", "ray is not installed (pip install 'planner[ray]')") from None
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
    started = False
    if not ray.is_initialized():
        kw = {"runtime_env": {"env_vars": env}, "log_to_driver": False, "configure_logging": False}
        if address:
            ray.init(address=address, **kw)
        else:
            ray.init(num_cpus=workers or os.cpu_count() or 1, include_dashboard=False, **kw)
        started = True
    try:
        task = ray.remote(num_cpus=1, max_retries=1)(_call)
        limit = workers or int(ray.cluster_resources().get("CPU", 1))
        queue = list(enumerate(items))
        inflight: dict = {}
        while queue or inflight:
            while queue and len(inflight) < limit:    # at most `workers` cases at a time, also on big clusters
                k, it = queue.pop(0)
                inflight[task.remote(fn, it, time_limit_s)] = k
            done, _ = ray.wait(list(inflight), num_returns=1)
            for ref in done:
                k = inflight.pop(ref)
                try:
                    r = ray.get(ref)
                except Exception as e:
                    if on_error is None:
                        raise
                    on_error(k, e)
                else:
                    on_done(k, r)
    finally:
        if started:
            ray.shutdown()


# ---------------------------------------------------------------- CSV

def read_rows(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _append_rows(path: str, rows: list[dict], columns: list[str]) -> None:
    """Add rows to an archive CSV (stale or replaced rows), after the ones it already holds; atomic."""
    if rows:
        atomic_write_text(path, rows_csv(read_rows(path) + rows, columns))


def rows_csv(rows: list[dict], columns: list[str]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: _cell(r.get(k)) for k in columns})
    return buf.getvalue()


def _cell(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return v


def _coerce(row: dict) -> dict:
    """CSV strings back to numbers where they look like numbers (for tables, JSON and plots)."""
    out = {}
    for k, v in row.items():
        if isinstance(v, str) and v != "" and k not in ("case_id", "task_id", "model", "cluster", "schedule",
                                                         "recompute", "status", "error", "config", "family",
                                                         "precision"):
            try:
                f = float(v)
                v = int(f) if f.is_integer() and "." not in v and "e" not in v.lower() else f
            except ValueError:
                if v in ("True", "False"):
                    v = v == "True"
        elif v == "":
            v = None
        out[k] = v
    return out


@dataclass
class BatchResult:
    rows: list                       # one per case of the sweep, sweep order (coerced values)
    csv_path: str
    solved: int                      # cases solved in this run
    reused: int                      # cases taken from an existing CSV
    wall_s: float
    sizing: list = field(default_factory=list)
    sizing_csv: str | None = None


def run_batch(sweep, out_dir: str, executor: str = "local", workers: int | None = None, address: str | None = None,
              time_limit_s: float | None = None, progress: bool = True, resume: bool = True) -> BatchResult:
    t0 = time.perf_counter()
    workers = workers or os.cpu_count() or 1
    csv_path = os.path.join(out_dir, f"{sweep.name}.csv")
    old = read_rows(csv_path)
    ids = [c.id for c in sweep.cases]
    idset = set(ids)
    have = {r["case_id"]: r for r in old if r.get("case_id") in idset and r.get("status") not in ("ERROR", "")}
    stale = [r for r in old if r.get("case_id") not in idset]     # rows of an edited sweep: moved aside, not lost
    if stale:
        _append_rows(os.path.join(out_dir, f"{sweep.name}.stale.csv"), stale, COLUMNS)
    if not resume:
        # every case is solved again; the rows it replaces are kept aside before the CSV is first rewritten
        _append_rows(os.path.join(out_dir, f"{sweep.name}.previous.csv"),
                     [r for r in old if r.get("case_id") in idset], COLUMNS)
        have = {}
    todo = [c for c in sweep.cases if c.id not in have]
    rows: dict[str, dict] = dict(have)
    # rows of a CSV written before the precision column: the case knows it (its id hashes its training)
    for c in sweep.cases:
        if c.id in rows and not rows[c.id].get("precision"):
            rows[c.id] = {**rows[c.id], "precision": c.spec.training.precision}

    def flush():
        ordered = [rows[i] for i in ids if i in rows]
        atomic_write_text(csv_path, rows_csv(ordered, COLUMNS))

    def on_case(k, row):
        rows[todo[k].id] = row
        flush()
        bar.advance(f"{row['model']} {row['gpus']}g: {row['status']}")

    sizing_csv = os.path.join(out_dir, f"{sweep.name}.sizing.csv") if sweep.sizing else None
    old_sizing = {r["task_id"]: r for r in (read_rows(sizing_csv) if sizing_csv else [])
                  if r.get("status") in ("OK", "NONE_FITS")}
    if sizing_csv and not resume:
        _append_rows(os.path.join(out_dir, f"{sweep.name}.sizing.previous.csv"), read_rows(sizing_csv),
                     SIZING_COLUMNS)
        old_sizing = {}
    sizing_rows: dict[int, dict] = {k: {**old_sizing[t.id], "precision": old_sizing[t.id].get("precision")
                                        or t.training.precision}
                                    for k, t in enumerate(sweep.sizing) if t.id in old_sizing}
    size_todo = [k for k, t in enumerate(sweep.sizing) if t.id not in old_sizing]

    bar = _Bar(len(todo) + len(size_todo), progress, f"{sweep.name}: {len(sweep.cases)} cases, "
                                                         f"{len(have)} already done")

    def on_size(j, row):
        sizing_rows[size_todo[j]] = row
        atomic_write_text(sizing_csv, rows_csv([sizing_rows[k] for k in sorted(sizing_rows)], SIZING_COLUMNS))
        bar.advance(f"sizing {row['cluster']} {row['gpus']}g {row['budget_gpu_days']:g} GPU-days: {row['status']}")

    from planner.costs import warn_cpu_profiles
    # once here, not once in each worker process
    warn_cpu_profiles([c.spec.cluster for c in todo] + [sweep.sizing[k].cluster for k in size_todo])
    with bar:
        flush()
        run = (lambda fn, items, cb, err: _ray(fn, items, workers, address, time_limit_s, cb, err)) \
            if executor == "ray" else (lambda fn, items, cb, err: _local(fn, items, workers, time_limit_s, cb, err))
        if todo:
            run(run_case, todo, on_case, lambda k, e: on_case(k, failed_case_row(todo[k], e)))
        if size_todo:
            run(run_sizing, [sweep.sizing[k] for k in size_todo], on_size,
                lambda j, e: on_size(j, failed_sizing_row(sweep.sizing[size_todo[j]], e)))
    # the same shape and types whether a row was solved now or read back from the CSV
    ordered = [_coerce({k: _str(rows[i].get(k)) for k in COLUMNS}) for i in ids]
    sizing = [_coerce({c: _str(sizing_rows[k].get(c)) for c in SIZING_COLUMNS}) for k in sorted(sizing_rows)]
    return BatchResult(ordered, csv_path, len(todo), len(have), time.perf_counter() - t0, sizing, sizing_csv)


def _str(v):
    return "" if v is None else (repr(v) if isinstance(v, float) else str(v))


class _Bar:
    """Progress on stderr (silent when disabled): a rich bar on a terminal; plain full lines, one per finished item,
    when stderr is a file or pipe (tryout 8: rich drew its bar once at the end there, cut at 80 columns)."""

    def __init__(self, total: int, enabled: bool, title: str):
        self.enabled = enabled and total > 0
        self.total, self.title = total, title
        self.p = None

    def __enter__(self):
        if self.enabled:
            from rich.console import Console
            con = Console(file=sys.stderr)
            self.done, self.t0 = 0, time.perf_counter()
            if not con.is_terminal:
                print(f"{self.title}, {self.total} to run", file=sys.stderr, flush=True)
                return self
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            self.p = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                              TimeElapsedColumn(), TextColumn("{task.fields[last]}"),
                              console=con, transient=False)
            self.p.__enter__()
            self.task = self.p.add_task(self.title, total=self.total, last="")
        return self

    def advance(self, last: str) -> None:
        if not self.enabled:
            return
        self.done += 1
        if self.p is None:
            print(f"[{self.done}/{self.total}] {last} ({time.perf_counter() - self.t0:.0f} s)", file=sys.stderr,
                  flush=True)
        else:
            self.p.update(self.task, advance=1, last=last)

    def __exit__(self, *exc):
        if self.p is not None:
            self.p.__exit__(*exc)
        return False

