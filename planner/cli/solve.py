"""planner solve SPEC: search configs and mappings, write solutions/<name>.yaml."""
from __future__ import annotations

import os

from planner.cli.common import finite_float, seed_int, spec_arg


def register(sub) -> None:
    p = sub.add_parser("solve", help="find the fastest plan that fits (config + GPU mapping)")
    p.add_argument("spec", help="plan spec YAML (specs/...)")
    p.add_argument("--method", choices=("auto", "exact", "anneal"), default=None,
                   help="auto: the mapping portfolio; exact: CP-SAT alone; anneal: the annealer alone (default: the "
                        "spec's solver.method)")
    p.add_argument("--time-limit", type=finite_float, default=None,
                   help="seconds (default: the spec's solver.time_limit_s)")
    p.add_argument("--seed", type=seed_int, default=None, help="random seed (default: the spec's solver.seed)")
    p.add_argument("--robust", choices=("none", "worst", "mean"), default=None,
                   help="optimise over the cluster's bandwidth snapshots: worst case or mean")
    p.add_argument("--out", default=None, help="solution path (default solutions/<spec name>.yaml)")
    p.add_argument("--no-simulate", action="store_true", help="skip the op-level simulation check")
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    p.set_defaults(func=run)


def solution_dir_for(spec_path: str) -> str:
    """solutions/ beside specs/ when the spec lives in a specs/ folder, else ./solutions."""
    d = os.path.dirname(os.path.abspath(spec_path))
    if os.path.basename(d) == "specs":
        return os.path.join(os.path.dirname(d), "solutions")
    return os.path.join(os.getcwd(), "solutions")


def check_out(path: str, given: bool, inputs=None) -> str:
    """planner.io.check_out for --out (kept here for callers of the old name)."""
    from planner.io import check_out as _check
    return _check(path, "--out", inputs, given)


def run(args) -> int:
    import math

    from planner.errors import SpecError
    from planner.report import show_solution
    from planner.search.solve import solve

    if args.time_limit is not None and not (math.isfinite(args.time_limit) and args.time_limit > 0):
        raise SpecError(None, "--time-limit", f"must be a positive number of seconds, got {args.time_limit}")
    spec = spec_arg(args.spec)
    out = args.out or os.path.join(solution_dir_for(args.spec), f"{spec.name}.yaml")
    from planner.inputs import spec_inputs
    check_out(out, given=args.out is not None, inputs=spec_inputs(args.spec))
    sol = run_interruptible(lambda: solve(spec, method=args.method, time_limit_s=args.time_limit, seed=args.seed,
                                          robust=args.robust, simulate=not args.no_simulate))
    show_solution(sol, out, args.json)
    if sol.solver.status == "INTERRUPTED":
        import sys
        print(f"planner: interrupted: wrote the best plan so far (status INTERRUPTED, gap {sol.solver.gap:.2%}) "
              f"to {out}", file=sys.stderr)
        return 130
    return 0


def run_interruptible(work):
    """work() in a worker thread, so that Ctrl-C reaches this (main) thread at once. The first Ctrl-C asks
    the search to stop and return its best plan so far (planner.interrupt); the second aborts: the
    KeyboardInterrupt goes up, nothing is written and any earlier file stays as it was."""
    import sys
    import threading

    from planner import interrupt

    box: dict = {}
    done = threading.Event()     # not Thread.join: a KeyboardInterrupt inside join can leave the thread's
    #                              state inconsistent (is_alive() False while it runs) on Python 3.11

    def target():
        try:
            box["value"] = work()
        except BaseException as e:      # re-raised in the main thread, with its own exit code
            box["error"] = e
        finally:
            done.set()

    interrupt.reset()
    threading.Thread(target=target, name="planner-solve", daemon=True).start()
    try:
        while not done.is_set():
            try:
                done.wait(0.1)
            except KeyboardInterrupt:
                if interrupt.requested():
                    raise
                interrupt.request()
                print("planner: stopping the search; the best plan so far will be written (Ctrl-C again to "
                      "abort)", file=sys.stderr)
    finally:
        if done.is_set():
            interrupt.reset()       # the request was for this solve only
    if "error" in box:
        raise box["error"]
    return box["value"]
