"""The column decomposition (planner/mapping/columns.py): the path enumeration keeps every path that could
beat the limit, covers found are covers, and solve_columns' answers and bounds equal brute force over the
CP-SAT model's integer objective on tiny grids (with tied embeddings, the interleaved wrap hop and spare
nodes)."""
import dataclasses
import itertools

import numpy as np
import pytest

from planner.config import ParallelConfig
from planner.costs.iteration import build_problem
from planner.mapping import layouts
from planner.mapping.bounds import emb_floor, path_lower_bound_int, row0_sets
from planner.mapping.bruteforce import column_paths
from planner.mapping.columns import (
    _best_with_sets,
    _cover,
    _dfs_cover,
    _reduce,
    column_items,
    read_path,
    solve_columns,
)
from planner.mapping.cpsat import solve_exact
from planner.mapping.units import int_objective, to_units

CASES = [  # nodes, (tp, pp, dp), schedule, vpp
    (6, (4, 2, 4), "1f1b", 1),           # 2 x 2 grid, 2 spare nodes
    (8, (4, 4, 4), "1f1b", 1),           # 4 x 2 and 2 x 4 grids, all nodes used
    (7, (4, 4, 2), "1f1b", 1),           # 2 x 2, 3 spare
    (6, (4, 6, 2), "interleaved", 2),    # 3 x 2 with the wrap hop
    (6, (4, 2, 6), "1f1b", 1),           # 2 x 3
]


def _grids(make_spec, seeds=(0, 1)):
    for k, (n, (tp, pp, dp), sched, v) in enumerate(CASES):
        for seed in seeds:
            spec = make_spec(nodes=n, seed=10 * k + seed, gbs=96 if dp == 6 else 64, layers=24)
            cfg = ParallelConfig(tp, pp, dp, 1, spec.training.global_batch_size // dp, sched, v, "selective")
            for lay in layouts(tp, pp, dp, 8):
                if lay.rows > 1 and lay.cols > 1:
                    # the decomposition scores paths as sums of hops: the problem without 1F1B's lock-step pace
                    # (which turns it off: test_the_decomposition_declines_the_pace)
                    yield dataclasses.replace(build_problem(spec, cfg, lay), pace=None)


def test_the_decomposition_declines_the_pace(make_spec):
    """A problem with Megatron-Core 1F1B's pace (a bottleneck over a column's hops) gets no decomposition: it would
    prove from sums of hops."""
    from planner.mapping import rows
    spec = make_spec(nodes=8, seed=0, gbs=64, layers=24)
    cfg = ParallelConfig(4, 4, 4, 1, 16, "1f1b", 1, "selective")
    lay = next(L for L in layouts(4, 4, 4, 8) if L.rows > 1 and L.cols > 1)
    prob = build_problem(spec, cfg, lay)
    assert prob.pace is not None
    a = prob.rank_order()
    lim = int_objective(prob, a)
    assert solve_columns(prob, [(0, tuple(a[0]))], lim, lambda b: int_objective(prob, b), 1.0) is None
    assert not rows.applies(prob)


def test_vectorised_reference_matches_the_model_objective(make_spec, int_values):
    prob = next(_grids(make_spec))
    vals, P = int_values(prob)
    for k in np.random.default_rng(0).choice(len(P), 25, replace=False):
        assert vals[k] == int_objective(prob, P[k])


def test_path_items_keep_every_path_under_the_limit(make_spec):
    """Every path from a head whose cost + max(embedding, floor) fits the limit is matched by an item on the
    same node set that is no dearer and has no dearer embedding; every item is a real path of its cost."""
    checked = 0
    for prob in _grids(make_spec, seeds=(0,)):
        R, N = prob.layout.rows, prob.n
        hop = to_units(prob.hop)
        wrap = to_units(prob.wrap) if prob.wrap is not None else None
        emb = to_units(prob.emb) if prob.emb is not None else None
        head, rest = 0, list(range(1, N))
        costs = column_paths(hop, wrap, emb, head, rest, R)
        ef = sorted(e for _, e, _ in costs)[len(costs) // 3]          # a floor that binds for some ends
        lim = int(np.median([c + max(e, ef) for c, e, _ in costs]))
        it = column_items(hop, wrap, emb, head, rest, R, lim, ef)
        by_set = {}
        for i in range(len(it.cost)):
            S = frozenset(rest[k] for k in range(len(rest)) if (int(it.mask[i]) >> k) & 1)
            by_set.setdefault(S, []).append((int(it.cost[i]), int(it.emb[i])))
            nodes = [head] + read_path(it, i, rest)
            c = int(sum(hop[nodes[j], nodes[j + 1]] for j in range(R - 1)))
            c += int(wrap[nodes[-1], head]) if wrap is not None else 0
            assert c == it.cost[i] and set(nodes[1:]) == S
            assert it.emb[i] == max(ef, int(emb[head, nodes[-1]]) if emb is not None else 0)
        for c, e, S in costs:
            e = max(e, ef)
            if c + e <= lim:
                assert any(ci <= c and ei <= e for ci, ei in by_set.get(S, [])), (c, e, S)
        checked += 1
    assert checked >= 5


def test_covers_found_are_covers_and_reduction_is_sound(make_spec):
    """Whatever the quick search or CP-SAT returns is one item per head on disjoint node sets (all nodes
    when every node is used) within the limit; when either says no cover exists, brute force over the item
    combinations agrees."""
    seen_yes = seen_no = 0
    for prob in _grids(make_spec):
        R, K, N = prob.layout.rows, prob.layout.cols, prob.n
        hop = to_units(prob.hop)
        wrap = to_units(prob.wrap) if prob.wrap is not None else None
        emb = to_units(prob.emb) if prob.emb is not None else None
        H = tuple(range(K))
        rest = [n for n in range(N) if n not in H]
        exact = N == R * K
        for q in (0.1, 0.4, 0.9):
            probe = [column_items(hop, wrap, emb, h, rest, R, 10 ** 9) for h in H]
            vals = np.concatenate([it.cost + it.emb for it in probe])
            lim = int(np.quantile(vals, q))
            its = [column_items(hop, wrap, emb, h, rest, R, lim) for h in H]
            full = (1 << len(rest)) - 1
            ok_any = False
            for combo in itertools.product(*[range(len(it.cost)) for it in its]):
                ms = [int(it.mask[c]) for it, c in zip(its, combo, strict=True)]
                if any(ms[i] & ms[j] for i in range(K) for j in range(i)):
                    continue
                if exact and sum(ms) != full:
                    continue
                if max(int(it.cost[c]) for it, c in zip(its, combo, strict=True)) + \
                        max(int(it.emb[c]) for it, c in zip(its, combo, strict=True)) <= lim:
                    ok_any = True
                    break
            alive = _reduce(its, [it.cost + it.emb <= lim for it in its], len(rest), exact)
            quick = _dfs_cover(its, alive, len(rest), lim, exact) if alive is not None else None
            st, ch = _cover(its, len(rest), lim, exact, 10.0, 0)
            assert (st == "FEASIBLE") == ok_any
            if alive is None or quick is None and st == "INFEASIBLE":
                assert not ok_any
            for chosen in (quick, ch):
                if chosen is None:
                    continue
                ms = [int(it.mask[c]) for it, c in zip(its, chosen, strict=True)]
                assert all(ms[i] & ms[j] == 0 for i in range(K) for j in range(i))
                assert not exact or sum(ms) == full
                assert max(int(it.cost[c]) for it, c in zip(its, chosen, strict=True)) + \
                    max(int(it.emb[c]) for it, c in zip(its, chosen, strict=True)) <= lim
            seen_yes += ok_any
            seen_no += not ok_any
    assert seen_yes >= 5 and seen_no >= 5


def test_solve_columns_equals_brute_force(make_spec, int_values):
    """From the rank order (limit: its value) the decomposition proves the optimum; asked for anything strictly
    better than the optimum it finds nothing and says so; its bound never exceeds the optimum."""
    proved = 0
    for prob in _grids(make_spec):
        vals, _ = int_values(prob)
        opt = int(vals.min())
        plb = path_lower_bound_int(prob)
        for limit in (int_objective(prob, prob.rank_order()), opt, opt - 1):
            sets = row0_sets(prob, limit - plb - emb_floor(prob), limit=10 ** 6)
            out = solve_columns(prob, sets, limit, lambda a, p=prob: int_objective(p, a), 30.0, path_floor=plb)
            assert out is not None
            assert out.bound <= opt
            if out.assign is not None:
                assert out.value == int_objective(prob, out.assign) <= limit
                prob.check(out.assign)
            if limit < opt:
                assert out.assign is None
            assert out.proved                # tiny grids: every row-0 set is closed
            proved += 1
            if limit >= opt:
                assert out.value == opt
            else:
                assert out.bound == limit + 1
    assert proved >= 20


@pytest.mark.parametrize("on", [True, False])
def test_solve_exact_with_and_without_the_decomposition(make_spec, monkeypatch, optimum, on):
    """solve_exact gives the brute-force optimum either way, and the decomposition does prove some."""
    import planner.mapping.cpsat as C
    calls = []
    orig = C.solve_columns

    def spy(*a, **k):
        out = orig(*a, **k)
        calls.append(out is not None and out.proved)
        return out
    monkeypatch.setattr(C, "solve_columns", spy)
    monkeypatch.setattr(C, "COLUMNS", on)
    for prob in _grids(make_spec, seeds=(1,)):
        best, _ = optimum(prob)
        ex = solve_exact(prob, time_limit_s=20, hint=prob.rank_order())
        assert ex.status == "OPTIMAL" and ex.objective == pytest.approx(best, rel=1e-9)
        assert ex.bound <= best + 1e-9
        pr = solve_exact(prob, time_limit_s=20, hint=prob.rank_order(), cutoff=best)
        assert pr.status == "PRUNED"
    if on:
        assert sum(calls) >= 3
    else:
        assert not calls


def test_best_with_given_node_sets_equals_brute_force(make_spec, int_values):
    """The exact answer for one cover: row 0 = the heads in any column order, each head's column through
    exactly its node set in any order; brute force over those placements."""
    rng = np.random.default_rng(3)
    checked = 0
    for prob in _grids(make_spec):
        R, K, N = prob.layout.rows, prob.layout.cols, prob.n
        vals, P = int_values(prob)
        nodes = rng.permutation(N)
        H = tuple(int(h) for h in nodes[:K])
        sets = {h: [int(n) for n in nodes[K + j * (R - 1): K + (j + 1) * (R - 1)]] for j, h in enumerate(H)}
        want = None
        for v, a in zip(vals, P, strict=True):
            if set(a[0].tolist()) != set(H):
                continue
            if all(set(a[1:, j].tolist()) == set(sets[int(a[0, j])]) for j in range(K)):
                want = int(v) if want is None else min(want, int(v))
        wrap = to_units(prob.wrap) if prob.wrap is not None else None
        emb = to_units(prob.emb) if prob.emb is not None else None
        v, a = _best_with_sets(prob, H, sets, to_units(prob.hop), wrap, emb, 10.0, 0)
        assert v == want == int_objective(prob, a)
        checked += 1
    assert checked >= 8


@pytest.mark.parametrize("steps", [64, 10 ** 6])
def test_decomposition_is_exact_when_the_other_rows_rings_bind(make_spec, monkeypatch, int_values, steps):
    """Slow links that only rows 1..R-1 can use make the relaxation's cheapest orders wrong; the exact
    answer for those node sets and the no-good keep solve_columns equal to brute force, and it proves. With
    tiny probe steps a cover under the probe's t often has its exact answer above t: the covers must then
    wait for a probe whose paths reach that far (they are only complete up to t)."""
    import planner.mapping.columns as Co
    monkeypatch.setattr(Co, "PROBE_STEPS", steps)
    calls = []
    orig = Co._best_with_sets

    def spy(*a, **k):
        calls.append(1)
        return orig(*a, **k)
    monkeypatch.setattr(Co, "_best_with_sets", spy)
    rng = np.random.default_rng(7)
    for prob in _grids(make_spec, seeds=(0, 1)):
        R, N = prob.layout.rows, prob.n
        link = prob.dp_link.copy()
        for i in range(1, R):                      # a few very slow pairs in every later row
            for _ in range(N):
                n, q = rng.choice(N, 2, replace=False)
                link[i, n, q] = link[i, q, n] = 10 * float(np.abs(prob.dp_base).max() + prob.dp_link.max())
        prob.dp_link = link
        vals, _ = int_values(prob)
        opt = int(vals.min())
        plb = path_lower_bound_int(prob)
        limit = int_objective(prob, prob.rank_order())
        sets = row0_sets(prob, limit - plb - emb_floor(prob), limit=10 ** 6)
        out = Co.solve_columns(prob, sets, limit, lambda a, p=prob: int_objective(p, a), 30.0, path_floor=plb)
        assert out.proved and out.bound <= opt
        assert (out.value if out.assign is not None else limit) == opt
    assert calls


def test_a_steep_probe_stops_at_the_work_left():
    """GPT-3 175B on the shipped 32-node heterogeneous A100 cluster (tp4 pp8 dp8, 8 x 4 grid): one probe of the path
    enumeration grows from about 12 thousand to 5.8 million paths, which the growth guess of the last probes let
    through; it ran 10 s past a 5 s limit (--method exact). Each head's enumeration now stops at the paths the work
    left pays for, and a probe given up is charged as if it had run to that cap."""
    from planner.mapping.anneal import anneal
    from planner.spec import parse_spec
    spec = parse_spec({"name": "g", "model": "../models/gpt3-175b.yaml", "cluster": "../clusters/a100-32x8-het.yaml",
                       "training": {"global_batch_size": 1536, "seq_length": 2048}}, "specs/x.yaml")
    cfg = ParallelConfig(4, 8, 8, 1, 192, "interleaved", 2, "none", 1, True)
    lay = next(L for L in layouts(4, 8, 8, 8) if (L.a, L.b) == (1, 2))
    prob = build_problem(spec, cfg, lay)
    hint = anneal(prob, seed=0, iterations=20000).assign
    r = solve_exact(prob, time_limit_s=0.5, wall_limit_s=60, seed=0, hint=hint)
    assert r.work_s <= 0.5 * 1.2          # was 5.8 work seconds
    assert prob.objective(r.assign) <= prob.objective(hint) + 1e-12
