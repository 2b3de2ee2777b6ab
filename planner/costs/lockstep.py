"""Megatron-Core's 1F1B with waited p2p calls, walked: a max-plus DAG over simulator/mcore.py's call streams (the one
home of the order), exact against the waited-call replay, with an exact periodic steady state. The mapping objective
(hence the estimate) of a waited 1F1B plan with two or more stages a node on several node rows walks it per row
boundary (iteration.lock_step_walk_parts; docs/notes/simulator.md, "1F1B's lock step walked in the objective"); one
stage a node keeps pipeline.lock_step_p2p_s. DeepSpeed's pipeline engine (its rendezvous 1F1B) is replayed here too, on
the simulator's own instruction streams (deepspeed_time: iteration.p2p_exposed_hops). Its own module: it reads the
simulator's orders, which import pipeline."""
from __future__ import annotations

import functools

import numpy as np

from planner.costs.vwalk import STEADY_TOL, steady_shift

LOCK_STEP_QS = (1, 2, 3, 4)   # the periods (in iterations) the steady-state test tries (_lock_step_walk)
# a long 1F1B is walked on a shorter one's DAG (_short_m): its p + LOCK_STEP_SHORT steady iterations and a residue
# mod LOCK_STEP_MOD (every period above divides it), then extrapolated by its steady state; the DAGs built per pp
# are then at most LOCK_STEP_MOD + a few short ones, each of O(p (p + LOCK_STEP_SHORT)) calls
LOCK_STEP_SHORT = 24
LOCK_STEP_MOD = 12


@functools.lru_cache(maxsize=256)
def _lock_step_dag(p: int, m: int) -> tuple:
    """Megatron-Core's 1F1B with waited p2p calls (simulator/mcore.py's call streams: the one home of the order) as
    a max-plus DAG over its calls. A call posts when its device's previous op has ended, each transfer starts when
    both sides have posted it and lasts its one-way time, and the call ends with its slowest transfer (mcore.run);
    so with post(c) = end(previous call of c's device) + the compute between:

      end(c) = max(post(c) + max_j sec_j, max_j (post(peer_j) + sec_j)),   peer_j: the call holding c's transfer j

    Nodes numbered from 1 in one topological order (0: "none", time 0). Returned: per node its device's previous
    call A and its (up to two, repeated where one) peers' previous calls P1, P2, and for each of the three the index
    of its weight in `tab`: rows (device, F ops, B ops, slot, slot), the compute between that call and the post plus
    the slower hop of the transfers shared (slot j < p - 1: the activation over boundary j, p - 1 + j: the gradient;
    _lock_step_weights); `tails`: per device its last call and the F / B ops after it.

    Steady state: a call's iteration is the F ops its device ran before it less its warm-up and one (iteration j
    of the steady state holds the device's two calls around B(j); the warm-up's are negative, the cool-down's all
    the last one). The order is sorted by iteration (clipped to the steady range), each iteration's nodes a
    contiguous run (`ends`: the position after iteration t's last node; checked topological, else no cuts);
    `cuts` are the iterations t in [0, m - p - 1] (every device steady, no cool-down yet) after which every later
    node reads nodes of iteration >= t only (checked), so iteration t's ends are the state the rest reads."""
    from planner.simulator import engine, mcore  # here: the simulator imports the cost modules at load time
    from planner.simulator.ops import F as OP_F
    from planner.simulator.orders import build

    g = engine.build_graph(build("1f1b", p, m))
    kinds = g.kind.tolist()
    # the transfers' "seconds" are their hop slots, so the streams carry which hop each transfer crosses
    streams = mcore.call_streams(g, p, m, [float(s - 1) for s in range(p)], [float(p - 1 + s) for s in range(p)])
    prev, gap, trans, label = [0], [(0, 0, 0)], [()], [m]
    tail = []
    holder: dict = {}            # transfer key -> the calls that post it (sender, receiver)
    for d, ins in enumerate(streams):
        w = min(p - d - 1, m)
        pc, nf, nb, nf_all = 0, 0, 0, 0
        for kind, arg in ins:
            if kind == mcore._COMP:
                is_f = kinds[arg] == OP_F
                nf, nb, nf_all = nf + is_f, nb + (not is_f), nf_all + is_f
                continue
            node = len(prev)
            prev.append(pc)
            gap.append((d, nf, nb))
            trans.append(tuple((key, int(sec)) for key, sec in arg))
            label.append(nf_all - w - 1)
            for key, _ in arg:
                holder.setdefault(key, []).append(node)
            pc, nf, nb = node, 0, 0
        tail.append((pc, d, nf, nb))
    n = len(prev)
    peers: list = [[] for _ in range(n)]          # per node: [(peer node, [slots])]
    for key, nodes in holder.items():
        if len(nodes) != 2:
            raise ValueError(f"1F1B call streams: transfer {key} posted by {len(nodes)} calls")
        for a, b in (nodes, nodes[::-1]):
            slot = next(s for k, s in trans[a] if k == key)
            for e in peers[a]:
                if e[0] == b:
                    e[1].append(slot)
                    break
            else:
                peers[a].append((b, [slot]))
    # a topological order (Kahn's): a call waits for its own device's previous call and each peer's
    deps = [sorted({x for x in (prev[i], *(prev[b] for b, _ in peers[i])) if x}) for i in range(n)]
    users: list = [[] for _ in range(n)]
    need = [0] * n
    for i in range(1, n):
        need[i] = len(deps[i])
        for x in deps[i]:
            users[x].append(i)
    order, ready = [], [i for i in range(1, n) if need[i] == 0]
    while ready:
        i = ready.pop()
        order.append(i)
        for u in users[i]:
            need[u] -= 1
            if need[u] == 0:
                ready.append(u)
    if len(order) != n - 1:
        raise ValueError(f"1F1B call streams deadlock (p={p}, m={m})")
    # per call (old numbers): its previous call, gap, slots, and its peers (repeated where one) with their slots
    prev_a, G0, lab = np.array(prev), np.array(gap), np.array(label)
    own0 = np.array([(t[0][1], t[-1][1]) if t else (0, 0) for t in trans])
    pe = [x if len(x) == 2 else x * 2 for x in peers]
    peer = np.array([[q for q, _ in x] if x else [0, 0] for x in pe])
    PS0 = np.array([[(sl[0], sl[-1]) for _, sl in x] if x else [(0, 0)] * 2 for x in pe])
    hi = m - p                                     # the first iteration with a cool-down call (stage 0's last)
    key = np.clip(lab, -1, max(hi, -1))
    order_a = np.array(order)
    pos = np.zeros(n, np.int64)
    dep = np.c_[prev_a, prev_a[peer]]              # (n, 3) old numbers, 0: none
    for srt in (order_a[np.argsort(key[order_a], kind="stable")], order_a):
        pos[srt] = np.arange(1, n)
        ok = bool(((pos[dep] < pos[:, None]) | (dep == 0))[1:].all())
        if ok:
            break                                  # else Kahn's order itself, without cuts
    inv = np.zeros(n, np.int64)
    inv[pos] = np.arange(n)                        # new number -> old
    A, P = pos[prev_a[inv]], pos[prev_a[peer[inv]]]
    G, own, L = G0[inv], own0[inv], lab[inv]
    PG, PS = G0[peer[inv]], PS0[inv]
    L[0] = m                                       # node 0: in no iteration (binds no cut)
    pos_l = pos.tolist()

    def renum(x):
        return pos_l[x] if x else 0

    tails = tuple((renum(pc), d, nf, nb) for pc, d, nf, nb in tail)
    cuts, ends = [], []
    if ok:
        dep_lab = np.minimum(L[A], np.minimum(L[P[:, 0]], L[P[:, 1]]))
        size = None
        for t in range(hi):
            at = np.flatnonzero(L == t)
            later = (L > t) & (L < m)
            if size is None:
                size = len(at)
            if len(at) != size or at[-1] - at[0] + 1 != size or not (dep_lab[later] >= t).all():
                break                              # cuts: a run of consecutive iterations, each the same calls
            cuts.append(t)
            ends.append(int(at[-1]) + 1)
    # the three weights of every node index one table of the few distinct (device, F ops, B ops, slot, slot)
    rows = np.concatenate([np.c_[G, own], np.c_[PG[:, 0], PS[:, 0]], np.c_[PG[:, 1], PS[:, 1]]])
    # unique rows through one mixed-radix key (entries >= 0): the same sorted table as np.unique(axis=0), ~10x faster
    base = rows.max(axis=0) + 1
    key = np.zeros(len(rows), np.int64)
    for col, k in zip(rows.T, base, strict=True):
        key = key * int(k) + col
    _, first, idx = np.unique(key, return_index=True, return_inverse=True)
    tab = rows[first]
    idx = idx.reshape(3, n)
    return (A.tolist(), P[:, 0].tolist(), P[:, 1].tolist(), idx[0].tolist(), idx[1].tolist(), idx[2].tolist(), tab,
            tails, tuple(cuts), tuple(ends), size if cuts else 0)


def _lock_step_weights(f: tuple, b: tuple, c: tuple, tab: np.ndarray) -> list:
    """_lock_step_dag's weight table on per-stage forward f, backward b and hop slots c (2 (p - 1), its slots):
    the compute between a call and its post plus the slower of its transfers' hops."""
    fa, ba, ca = np.asarray(f, float), np.asarray(b, float), np.asarray(c + (0.0,), float)
    d = tab[:, 0]
    return (tab[:, 1] * fa[d] + tab[:, 2] * ba[d] + np.maximum(ca[tab[:, 3]], ca[tab[:, 4]])).tolist()


def _lock_step_walk(f: tuple, b: tuple, m: int, c: tuple, steady: bool = True) -> tuple[float, int, tuple | None]:
    """(the makespan: each device's last call plus the compute after it, the latest; the calls timed; the steady
    state's (period q, shift D) where one was found, else None) of
    _lock_step_dag(p, m) on per-stage forward f, backward b (recompute included) and hop slots c. One pass in the
    DAG's order, iteration by iteration; with `steady`, once the state at a cut (the ends of iteration t's calls)
    equals the one q cuts before plus one D in every entry (vwalk.steady_shift, relative STEADY_TOL), the state at
    the last cut t' = t + k q is that plus k D and only the calls after it are timed. Max-plus argument (as
    _interleaved_steady's): the rest of the order reads only that state (the cuts' check), and between cuts the map
    is the same (the same calls, stage times and hops), so X_(t + kq) = X_t + k D; the makespan is then exact."""
    A, P1, P2, I0, I1, I2, tab, tails, cuts, ends, size = _lock_step_dag(len(f), m)
    w = _lock_step_weights(f, b, c, tab)
    n = len(A)
    e = [0.0] * n

    def run(lo, hi):
        for k, a, x1, x2, y0, y1, y2 in zip(range(lo, hi), A[lo:hi], P1[lo:hi], P2[lo:hi], I0[lo:hi], I1[lo:hi],
                                            I2[lo:hi]):
            t = e[a] + w[y0]
            u = e[x1] + w[y1]
            if u > t:
                t = u
            u = e[x2] + w[y2]
            e[k] = u if u > t else t

    lo, timed, found = 1, 0, None
    if steady and len(cuts) > 1:
        X = []
        for i, hi in enumerate(ends):
            run(lo, hi)
            timed += hi - lo
            lo = hi
            X.append(e[hi - size:hi])
            # a cheap screen (three entries) before the test itself
            qs = [q for q in LOCK_STEP_QS if q <= i and _near_shift(X[i], X[i - q])]
            hit = steady_shift(X, i, qs) if qs else None
            if hit is not None:
                q, D = found = hit
                k = (len(cuts) - 1 - i) // q
                last = ends[i + k * q]
                e[last - size:last] = [x + k * D for x in X[i]]
                lo = last
                break
    run(lo, n)
    timed += n - lo
    return max(e[pc] + nf * f[d] + nb * b[d] for pc, d, nf, nb in tails), timed, found


def _near_shift(x: list, y: list) -> bool:
    """Whether x - y is one constant on x's first, middle and last entries (STEADY_TOL): steady_shift's screen."""
    tol = STEADY_TOL * max(1.0, abs(x[-1]))
    d = x[0] - y[0]
    return abs(x[-1] - y[-1] - d) <= tol and abs(x[len(x) // 2] - y[len(x) // 2] - d) <= tol


def _short_m(p: int, m: int) -> int:
    """The micro-batch count whose DAG walks a 1F1B of m on p stages: m itself up to p + LOCK_STEP_SHORT +
    LOCK_STEP_MOD, else the count in [p + LOCK_STEP_SHORT, + LOCK_STEP_MOD) congruent to m mod LOCK_STEP_MOD."""
    lo = p + LOCK_STEP_SHORT
    return m if m < lo + LOCK_STEP_MOD else lo + (m - lo) % LOCK_STEP_MOD


def _dag_charge(p: int, m: int, ahead: bool = False) -> None:
    """Charge the build of _lock_step_dag(p, m) once per solve (work.charge_once in its work.once_scope; every call
    outside one): the cache serves a process's later solves, but each solve pays its builds, so its work depends on
    the plan alone. ahead: before the build (work.charge_once's)."""
    from planner.mapping import work  # here: planner.mapping imports this module

    work.charge_once(("lock_step_dag", p, m), 2 * p * m * work.ORDER_BUILD_OP_WORK_S, ahead)


def _lock_step_time(f: tuple, b: tuple, m: int, c: tuple) -> tuple[float, int, tuple]:
    """(lock_step_time's makespan, the calls its walks timed, the m of each DAG walked). Past _short_m, the walk of
    the shorter m' (same p, stage times and hops) stands for it: their DAGs are the same warm-up, the same steady
    iterations (m - p of them, as many cuts) and the same cool-down, so both walks find the steady state at the same
    iteration i with the same period q and shift D, jump k = (m - p - 1 - i) // q periods and time the same
    remainder (m = m' mod q); the max-plus walk is shift-invariant, so T(m) = T(m') + (m - m') / q * D
    (tests/test_lock_step_walk.py: equal to the whole walk). Without a steady state found, the whole DAG is walked.
    Its two walks are cached apart (_lock_step_short, _lock_step_whole), so lock_step_time charges each DAG before
    the walk that builds it."""
    p = len(f)
    if p < 2:
        return m * (f[0] + b[0]), 0, ()
    ms, timed = _short_m(p, m), 0
    if ms < m:
        t, timed = _lock_step_short(f, b, m, c)
        if t is not None:
            return t, timed, (ms,)
    t, more = _lock_step_whole(f, b, m, c)
    return t, timed + more, (ms, m) if ms < m else (m,)


@functools.lru_cache(maxsize=4096)
def _lock_step_short(f: tuple, b: tuple, m: int, c: tuple) -> tuple[float | None, int]:
    """(the makespan of m from the walk of _short_m(p, m), None where it found no steady state; the calls timed)."""
    ms = _short_m(len(f), m)
    t, timed, found = _lock_step_walk(f, b, ms, c)
    if found is None:
        return None, timed
    q, D = found
    return t + (m - ms) // q * D, timed


@functools.lru_cache(maxsize=4096)
def _lock_step_whole(f: tuple, b: tuple, m: int, c: tuple) -> tuple[float, int]:
    """(the makespan of the whole DAG's walk, the calls timed)."""
    t, timed, _ = _lock_step_walk(f, b, m, c)
    return t, timed


def lock_step_time(f, b, m: int, c=0.0, c_back=None) -> float:
    """Makespan of Megatron-Core's 1F1B with its waited p2p calls (the replay's simulator/mcore.py) on per-stage
    forward f and backward b (recompute included) of one micro-batch and one-way hops c: one for every boundary or
    one per boundary (c[j] between stages j and j + 1) for the activations, c_back for the gradients (default c).
    Equal to the replay's pipeline makespan on the same times and hops (tests/test_lock_step_walk.py); so
    lock_step_time(f, b, m, c) - lock_step_time(f, b, m) is the p2p time the waits expose, which the closed form
    lock_step_p2p_s approximates (over where an early stage paces: its steady state is m - (p - 2) micro-batches,
    not m - 2). A max-plus walk over the calls (_lock_step_dag, cached per (p, m); past _short_m a shorter m's DAG
    stands for it) that stops at the steady state's period and extrapolates it exactly (_lock_step_walk). Cached;
    each call charged its calls' work (work.ORDER_OP_WORK_S a call timed, cached or not) and each solve its DAGs'
    builds once (work.ORDER_BUILD_OP_WORK_S a call built). iteration.lock_step_walk_parts builds the mapping objective
    from it (two or more stages a node)."""
    from planner.mapping import work  # here: planner.mapping imports this module

    p = len(f)
    if p != len(b) or p < 1 or m < 1:
        raise ValueError(f"lock_step_time: {p} forward and {len(b)} backward times, m={m}")

    def hops(x):
        xs = tuple(map(float, x)) if np.ndim(x) else (float(x),) * (p - 1)
        if len(xs) != p - 1:
            raise ValueError(f"{len(xs)} hops for pp={p} (one per boundary)")
        return xs
    cf = hops(c)
    cb = cf if c_back is None else hops(c_back)
    f, b, m, c = tuple(map(float, f)), tuple(map(float, b)), int(m), cf + cb
    if p < 2:
        return _lock_step_time(f, b, m, c)[0]
    # each DAG charged before the walk that builds it (a pp 64 one takes seconds): a work ceiling stops there
    ms = _short_m(p, m)
    _dag_charge(p, ms, ahead=True)
    if ms < m:
        t, timed = _lock_step_short(f, b, m, c)
        work.charge(timed * work.ORDER_OP_WORK_S)
        if t is not None:
            return t
        _dag_charge(p, m, ahead=True)
    t, timed = _lock_step_whole(f, b, m, c)
    work.charge(timed * work.ORDER_OP_WORK_S)
    return t


@functools.lru_cache(maxsize=1024)
def _deepspeed_time(f: tuple, b: tuple, m: int, c: tuple) -> float:
    from planner.simulator import deepspeed, engine  # here: the simulator imports the cost modules at load time
    from planner.simulator.ops import F as OP_F
    from planner.simulator.orders import build

    p = len(f)
    g = engine.build_graph(build("1f1b", p, m))
    dev = np.repeat(np.arange(p), np.diff(g.offs))
    dur = np.where(g.kind == OP_F, np.asarray(f)[dev], np.asarray(b)[dev]).tolist()
    # lat_f[s]: the activation into stage s (boundary s - 1), lat_b[s]: the gradient into s (boundary s)
    lat_f, lat_b = [0.0, *c], [*c, 0.0]
    start, end, _ = deepspeed.run(deepspeed.instruction_streams(g, p, m, lat_f, lat_b), dur, len(dur))
    return max(end)


def deepspeed_time(f, b, m: int, c=0.0) -> float:
    """Makespan of DeepSpeed's pipeline engine (its TrainSchedule, every transfer a rendezvous holding both GPUs) on
    per-stage forward f and backward b (recompute included) of one micro-batch and one-way hops c, one for every
    boundary or one per boundary (c[j] between stages j and j + 1, both directions): the replay's own instruction
    streams and worklist (simulator/deepspeed.py, the one home of the order), run on these times, so equal to the
    replay's pipeline makespan. deepspeed_time(f, b, m, c) - deepspeed_time(f, b, m) is the p2p time the rendezvous
    expose: where a heavier stage paces, the others' four transfers a micro-batch hide in their slack, which the
    closed form 4m + 2(pp - 4) hops (pipeline.p2p_hops) charged in full (+9.4%: the fuzz of valid plans, seed 8
    case 304). Cached per (f, b, m, c); each solve charged its run once (work.DEEPSPEED_OP_WORK_S an op)."""
    p = len(f)
    if p != len(b) or p < 1 or m < 1:
        raise ValueError(f"deepspeed_time: {p} forward and {len(b)} backward times, m={m}")
    cs = tuple(map(float, c)) if np.ndim(c) else (float(c),) * (p - 1)
    if len(cs) != p - 1:
        raise ValueError(f"{len(cs)} hops for pp={p} (one per boundary)")
    from planner.mapping import work  # here: planner.mapping imports this module

    key = (tuple(map(float, f)), tuple(map(float, b)), int(m), cs)
    work.charge_once(("deepspeed", *key), 2 * p * m * work.DEEPSPEED_OP_WORK_S)   # per solve, cached or not
    return _deepspeed_time(*key)
