"""Work accounting: how a mapping search spends a time limit without reading the clock (issue #10).

A user's time limit of T seconds buys WORK_PER_S x T *work seconds*; each solver charges what it did, in units
that do not depend on the machine's load:
- CP-SAT: its deterministic time (solver.deterministic_time(), charged by sat.run after every solve);
- the annealer: iterations x iteration_cost(rows, scenarios) / ANNEAL_ITERS_PER_S (an iteration scores the
  objective, whose row loop and scenarios make it up to ~3x dearer on tall grids and robust problems);
- the column decomposition's path enumeration: enumerated items / COLUMN_ITEMS_PER_S, and its depth-first
  cover search: DFS_NODE_WORK_S per node;
- the row decomposition (rows.py): enumerated cycle paths and scored partial arrangements at ROWS_ITEMS_PER_S,
  its exact-cover search per node and per candidate set scanned, a fixed charge per partition searched;
- the LNS after the anneal (lns.py): per step, the annealer iterations of cost 1 it takes as long as
  (lns_step_work: a fixed part, the grid's blocks, the nodes it places; timed against the annealer in one process);
- the two-row re-solve (tworows.py): each model's building, by the variables and constraints it built
  (ROWS2_BUILD_WORK_S, ROWS2_ITEM_WORK_S), besides its CP-SAT call;
- the cost model's order walks (the screen's compute bounds and hop charges): each op timed (ORDER_OP_WORK_S), and
  what a process caches, each solve once (charge_once inside search.solve's once_scope): the walks' DAG builds
  (V_DAG_BUILD_OP_WORK_S, ORDER_BUILD_OP_WORK_S) and DeepSpeed's replayed engine (DEEPSPEED_OP_WORK_S);
- a fixed CPSAT_CALL_WORK_S per CP-SAT call on top of its deterministic time: building and starting a model
  costs ~10 ms of wall time that CP-SAT's own count leaves out, and the decomposition makes thousands of
  small calls.
The rates were calibrated once (docs/notes/solver.md, "Deterministic work budget"; the annealer's in
"Incremental annealer" and "The annealer recalibrated on the slowest machine") so that a work second takes less
than a wall second on the slowest development machine (2 cores) with two solves at once; they are never measured
at run time, so a plan depends neither on the load nor on the machine, on any machine at least that fast. The
annealer's rule: run benchmarks/anneal_speed.py twice side by side (two solves at once), three times; take each
run's least cost-1 rate over its grids (1x16 .. 16x8, 1 and 3 scenarios), the median of those six minima, and
give a second of the limit 75% of it (25% margin), i.e. ANNEAL_ITERS_PER_S = 0.75 x that rate / WORK_PER_S; a 10 s
limit must then end within 10.5 s of wall with two solves at once. A faster machine ends the same search sooner.
The wall clock stays as a safety stop only; a search it ends says so (stopped_by "wall").

A ceiling (ceiling(w)) bounds one piece of work whose size is not known ahead: the charge that takes the block past
w work seconds raises OverCeiling, at a point that depends on the work alone (search.screen gives each
configuration's problem builds WALK_SHARE of the budget: costs.iteration.build_problems falls back past it).

Meters nest (a solve inside a solve): a charge counts in every open meter of the current context, so a
caller sees what its callees spent. Context variables keep concurrent solves in threads apart. A meter may
carry the wall-clock safety stop (deadline): inside it, every CP-SAT call stops at that deadline and at no
earlier clock limit of its own (sat.run), so that only the one safety stop can end a search by the clock, and
a stop there is noted (Meter.wall_hit) for the record.
"""
from __future__ import annotations

import contextvars
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

# calibration: docs/notes/solver.md, "Deterministic work budget"
WORK_PER_S = 0.35                # work seconds per second of a user's time limit (one = one CP-SAT deterministic s)
ANNEAL_ITERS_PER_S = 177000      # annealer iterations of cost 1 per work second (61,950 per second of the limit:
#                                  75% of the least rate with two solves at once on the slowest machine the project
#                                  ran on, 82,700 = the median of six runs' minima, Nov 26; it was 365,000 from a
#                                  machine 2x faster, on which 64-128-node solves here ended at the safety stop)
PACE_ITER_FACTOR = 2.0           # an iteration on a paced problem (1F1B's lock step, interleaved's steep hops): the
#                                  same swaps on 4-8-row het problems ran 1.3-1.9x slower (docs/notes/solver.md)
COLUMN_ITEMS_PER_S = 1_000_000   # enumerated column paths per work second (columns.column_items)
DFS_NODE_WORK_S = 3.5e-5         # one node of the decomposition's depth-first cover search (~32 us measured)
CPSAT_CALL_WORK_S = 0.012        # building and starting one CP-SAT model (~12 ms measured on small models)
ROWS_ITEMS_PER_S = 1_000_000     # the row decomposition's enumerated cycle paths and scored arrangements (rows.py)
ROWS_NODE_WORK_S = 1e-6          # one node of its exact-cover search over the rows' node sets
ROWS_SCAN_WORK_S = 1e-7          # one candidate set scanned at such a node (~50 ns measured at load 1.2)
ROWS_PAIR_WORK_S = 2e-9          # one cycle pair x alignment x column of its pair costs (numpy)
# one LNS step (lns.py), in annealer iterations of cost 1: LNS_STEP_ITERS + LNS_BLOCK_ITERS x the grid's blocks +
# LNS_NODE_ITERS x the nodes it places (benchmarks/lns_speed.py: 59-87 on 4x8 .. 16x8, charged 64-103)
LNS_STEP_ITERS = 45
LNS_BLOCK_ITERS = 0.3
LNS_NODE_ITERS = 0.8
# one cost term of roworder.py's vectorised scoring (a row order x row x column x scenario, at least
# roworder.MIN_TERM_COLS columns: narrower grids cost as much per row): 3-9 ns measured (8 x 8 .. 16 x 16, load ~1),
# charged ~3x for the slowest machine (2x slower) with two solves at once
ROW_ORDER_TERM_WORK_S = 2e-8
# one node of startpoint.py's depth-first search for a ring under a threshold (bitmask steps; 3.4-9.6 us measured on
# the three-tier family's 4 x 8 .. 16 x 16 rows, load ~1), charged ~2-4x for the slowest machine with two solves
RING_DFS_NODE_WORK_S = 1.5e-5
# anchor.py's moves: one threshold tried on a row (its adjacency built, the candidate's bookkeeping), one node of its
# pinned depth-first search, one candidate scored (paths and rings). Measured ~29 us, ~1.3 us and ~30 us on the
# three-tier family's 4 x 8 and 8 x 8 (load ~1); charged ~3x for the slowest machine with two solves at once
ANCHOR_TRY_WORK_S = 1e-4
ANCHOR_NODE_WORK_S = 4e-6
ANCHOR_EVAL_WORK_S = 1e-4
# a search node's checks run over the row's free nodes: ANCHOR_NODE_WORK_S per node up to 8 columns, in proportion
# above (measured 3.0 / 4.8 / 9 us at 8 / 16 / 32 columns, load ~2.7); and the pass's entry (the weak nodes' sort of
# every node's hops, the start's scores), per node pair: measured 20-27 ns from 128 to 1024 nodes (29 ms at 1024)
ANCHOR_NODE_COLS = 8
ANCHOR_PAIR_WORK_S = 1e-7
ROWS_PART_WORK_S = 1e-3          # setting up one partition's arrangement search, 4 rows (~0.8 ms at load 3.5)
# the configuration search's own work outside the mapping solvers (search/solve.py, search/screen.py), measured on
# this machine's class (docs/notes/solver.md, "The search's own work, charged" and "Short limits"): the memory screen
# by what it computed (enumeration_work: each configuration enumerated, each stage's memory evaluated, each fitting
# configuration's compute bound; CPU 0.005-0.034 ms, 0.055-0.094 ms and 0.20-0.28 ms at load ~3, Nov 26); each
# screened (config, layout) problem built and bounded 0.7 ms (16 nodes), 6.7 ms (32), 35 ms (128):
# SCREEN_PROBLEM_WORK_S + SCREEN_NODE2_WORK_S x nodes^2, per bandwidth scenario
CONFIG_WORK_S = 5e-5
STAGE_MEMORY_WORK_S = 1e-4
FIT_WORK_S = 3e-4
SCREEN_PROBLEM_WORK_S = 1e-3
SCREEN_NODE2_WORK_S = 2.5e-6
# one two-row model (tworows.py), charged once built: ROWS2_BUILD_WORK_S + ROWS2_ITEM_WORK_S per variable and
# constraint of the model (build_work); the budget's test of a pair's first call bounds the same charge before the
# build by an upper bound on those items (tworows.model_items). CPU time of the build measured on issue #10's family
# (docs/notes/solver.md "Cheaper two-row calls", load ~4): 4x4 3-8 ms, 4x8 pairs of rows apart 9-20 ms (600-2,800
# items), adjacent 60-73 ms (4,400), 2x16 adjacent 660-716 ms (65,500): at most 1.4 CPU s per work s charged, below
# the 2-2.7 wall s per work s of the CP-SAT calls themselves
# one op of Megatron-Core's interleaved order timed by costs.pipeline.interleaved_time (the compute bound of every
# fitting interleaved configuration and the hop charge of each one screened), charged per call whether its result was
# cached or not, so the charge depends on the plan alone: 65-97 ns of wall measured per op charged, cold caches, on
# the shipped llama3-70b and gpt3-13b specs' interleaved configurations (load ~2.8, Dec); charged ~2-3x
ORDER_OP_WORK_S = 2e-7
# the same per op a V-shape's walk times (costs/vwalk.py v_walk: the compute bound, hop charge and data-parallel rows of
# every V-shape configuration), and per op of the seed's V-ZB order built at a plan's own times for that walk
# (simulator/zbv.py, 9-12 us an op measured at p 4-16, load ~1.5; charged ~2x)
VZB_BUILD_OP_WORK_S = 2e-5
# per op (3 p m, V-shapes 6 p m) of an order built into vwalk's DAG (ZB-H1's, also 1F1B's compute walk; V-Min, V-Half,
# PyTorch's V-ZB), once per (schedule, p, m) and solve (charge_once; the seed's V-ZB pays its build per call above):
# 0.7-1.9 us an op measured at p 8-32, m 64-384, 1.5-5 us at p 4, m 16-64 (load ~2.5), charged ~2-3x at size
V_DAG_BUILD_OP_WORK_S = 3e-6
# per call (2 p m of them) of Megatron-Core's 1F1B call streams built into lockstep._lock_step_dag's max-plus DAG, once
# per (p, m) and solve (charge_once): 9-27 us a call measured at p 4-32, m 40-512 (load ~2), charged ~2-3x
ORDER_BUILD_OP_WORK_S = 5e-5
# per op (2 p m) of DeepSpeed's pipeline engine replayed by lockstep.deepspeed_time (the simulator's instruction streams
# and worklist, no steady-state shortcut), once per (stage times, m, hops) and solve: 1.3-1.8 us measured at p 4-32,
# m 64-512 (load ~2), charged ~2-3x
DEEPSPEED_OP_WORK_S = 4e-6
ROWS2_BUILD_WORK_S = 0.004
ROWS2_ITEM_WORK_S = 1.2e-5

_meters: contextvars.ContextVar[tuple] = contextvars.ContextVar("planner_work_meters", default=())
_ceilings: contextvars.ContextVar[tuple] = contextvars.ContextVar("planner_work_ceilings", default=())
_once: contextvars.ContextVar[set | None] = contextvars.ContextVar("planner_work_once", default=None)


@dataclass
class Meter:
    """Work charged while the meter was open."""
    used_s: float = 0.0              # work seconds charged so far
    deadline: float | None = None   # the wall-clock safety stop (time.perf_counter() value); None: none here
    wall_hit: bool = False           # a solver inside stopped at the safety stop (its answer depends on the load)


@contextmanager
def metered(deadline: float | None = None):
    """with metered() as m: ... ; m.used_s = the work charged inside the block (nested meters included).
    deadline: the safety stop of the block (perf_counter seconds); the earliest open one applies."""
    m = Meter(deadline=deadline)
    token = _meters.set(_meters.get() + (m,))
    try:
        yield m
    finally:
        _meters.reset(token)


@contextmanager
def unmetered():
    """with unmetered(): ... charges nothing to the meters open around it (work after a caller's accounting, e.g. a
    solve's summary, whose problem builds walk orders after its work_s was recorded)."""
    token = _meters.set(())
    try:
        yield
    finally:
        _meters.reset(token)


class OverCeiling(Exception):
    """Raised by charge() once the work charged inside a ceiling() block passes its limit."""


@dataclass
class _Ceiling:
    limit_s: float
    used_s: float = 0.0
    keys: set = field(default_factory=set)      # charge_once's keys counted in this block


@contextmanager
def ceiling(limit_s: float | None):
    """with ceiling(w): ... raises OverCeiling from the charge that takes the block's own charges past w work
    seconds (None: no ceiling): a caller gives up work whose size it cannot know in advance (a deep pipeline's walked
    curves on slow links) at a point that depends on the work alone, so the outcome is the same on any load. What
    was charged stays charged in the meters. A build a process caches (charge_once) counts once in the block whether
    or not the solve paid it before: where the block stops must not depend on what ran earlier."""
    if limit_s is None:
        yield
        return
    token = _ceilings.set(_ceilings.get() + (_Ceiling(float(limit_s)),))
    try:
        yield
    finally:
        _ceilings.reset(token)


def charge(work_s: float, key=None) -> None:
    """Count work_s work seconds in every open meter and every open ceiling (with a charge_once `key`: in the
    ceilings that have not counted it yet); OverCeiling past a ceiling's limit."""
    for m in _meters.get():
        m.used_s += float(work_s)
    _ceiling_charge(work_s, key)


def _ceiling_charge(work_s: float, key=None) -> None:
    over = False
    for c in _ceilings.get():
        if key is not None:
            if key in c.keys:
                continue
            c.keys.add(key)
        c.used_s += float(work_s)
        over |= c.used_s > c.limit_s
    if over:
        raise OverCeiling


@contextmanager
def once_scope():
    """with once_scope(): ... ; inside, charge_once charges each key once (a solve's scope: search.solve)."""
    token = _once.set(set())
    try:
        yield
    finally:
        _once.reset(token)


def charge_once(key, work_s: float, ahead: bool = False) -> None:
    """charge(work_s) the first time `key` is charged in the innermost once_scope (every time outside one): a build
    its process caches (lockstep's DAGs) is paid once by each solve, whatever an earlier solve left in the cache, so a
    solve's work depends on its plan alone. ahead: charged before the work it pays for, so a ceiling it would take
    past its limit raises first and nothing is charged (the work is not done)."""
    if ahead and any(key not in c.keys and c.used_s + work_s > c.limit_s for c in _ceilings.get()):
        raise OverCeiling
    seen = _once.get()
    if seen is not None:
        if key in seen:
            _ceiling_charge(work_s, key)      # paid by the solve already; a ceiling still counts it (ceiling)
            return
        seen.add(key)
    charge(work_s, key)


def deadline() -> float | None:
    """The earliest safety stop of the open meters (None: no meter carries one)."""
    ds = [m.deadline for m in _meters.get() if m.deadline is not None]
    return min(ds) if ds else None


def wall_left() -> float | None:
    """Seconds to the safety stop (None: none)."""
    d = deadline()
    return None if d is None else d - time.perf_counter()


def note_wall() -> None:
    """A solver stopped at the wall clock: every open meter's search now depends on the load."""
    for m in _meters.get():
        m.wall_hit = True


def enumeration_work(configs: int = 0, stages: int = 0, fits: int = 0) -> float:
    """Work seconds of the memory screen (screen.feasible_configs' tally): `configs` enumerated, `stages` stage
    memories evaluated, `fits` compute bounds of the configurations that fit."""
    return configs * CONFIG_WORK_S + stages * STAGE_MEMORY_WORK_S + fits * FIT_WORK_S


def iteration_cost(rows: int, scenarios: int = 1, paced: bool = False) -> float:
    """Relative cost of one annealer iteration (a swap scored incrementally: a column's path terms per row, and
    every scenario; refitted on iterations/s measured side by side, docs/notes/solver.md "Incremental annealer":
    1 x 16 grids ~1.7-2x faster than 16 x 8 ones, 3 scenarios ~2.2x dearer than 1). paced: the problem carries a
    pace (MappingProblem.pace), which a swap scores again over its columns' whole node lists: PACE_ITER_FACTOR."""
    return (1.0 + rows / 16.0) * (0.3 + 0.7 * scenarios) * (PACE_ITER_FACTOR if paced else 1.0)


def anneal_work(iterations: int, rows: int = 1, scenarios: int = 1, paced: bool = False) -> float:
    """Work seconds of `iterations` annealer iterations on a grid of `rows` rows and `scenarios` scenarios."""
    return iterations * iteration_cost(rows, scenarios, paced) / ANNEAL_ITERS_PER_S


def lns_step_work(blocks: int, size: int) -> float:
    """Work seconds of one LNS step (lns.py) on a grid of `blocks` blocks whose assignment problem places `size`
    nodes: the annealer iterations of cost 1 that take as long, timed in one process (benchmarks/lns_speed.py), so
    the step inherits the annealer's calibration and margin."""
    return (LNS_STEP_ITERS + LNS_BLOCK_ITERS * blocks + LNS_NODE_ITERS * size) / ANNEAL_ITERS_PER_S


def iterations_for(work_s: float, rows: int = 1, scenarios: int = 1, paced: bool = False) -> int:
    """Annealer iterations that work_s work seconds buy (at least one)."""
    return max(1, int(ANNEAL_ITERS_PER_S * work_s / iteration_cost(rows, scenarios, paced)))
