"""search.prove's passes: work an annealed candidate's share leaves unused goes round the open candidates again."""
from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np

from planner.mapping import work
from planner.mapping.result import MappingResult
from planner.search import prove as prove_mod
from planner.search.screen import Candidate


def _cand(obj, bound):
    probs = [SimpleNamespace(n=64)]          # beyond EXACT_NODES: annealed, on its share
    return Candidate(None, None, probs, MappingResult(np.zeros((1, 1), int), obj, bound, "FEASIBLE", 0.0, "anneal"))


def _spy(monkeypatch, improve_first_to=None):
    calls = []

    def fake(probs, *, time_limit_s, seed, hint, cutoff, **kw):
        share = time_limit_s * work.WORK_PER_S
        work.charge(share)                   # an anneal spends its whole share
        calls.append((id(probs), round(share, 9), seed))
        c = next(c for c in cands if c.probs is probs)
        obj = c.result.objective
        if improve_first_to is not None and len(calls) == 1:
            obj = improve_first_to
        return SimpleNamespace(status="FEASIBLE", objective=obj, assign=hint, bound=c.result.bound, wall_s=0.0,
                               method="anneal", stopped_by="work", work={})
    monkeypatch.setattr(prove_mod, "solve_mapping", fake)
    cands = []
    return calls, cands


def test_a_share_left_by_settled_candidates_goes_round_again(monkeypatch):
    calls, cands = _spy(monkeypatch, improve_first_to=9.0)
    cands += [_cand(10.0, 8.0), _cand(11.0, 9.5), _cand(12.0, 9.6)]
    with work.metered() as spent:
        proof = prove_mod.prove(cands, cands[0], method="auto", seed=0, robust="worst", budget=9.0, spent=spent,
                                deadline=time.perf_counter() + 60)
    # first pass: the incumbent on a third (three open), improved to 9.0, which settles the other two (bounds 9.5,
    # 9.6): their two thirds are left, and a second pass gives them to the incumbent, still open (bound 8.0)
    assert [s for _, s, _ in calls] == [3.0, 6.0]
    assert [sd for _, _, sd in calls] == [0, 1]
    assert abs(spent.used_s - 9.0) < 1e-9 and proof.best is cands[0]


def test_no_second_pass_when_the_shares_were_spent(monkeypatch):
    calls, cands = _spy(monkeypatch)
    cands += [_cand(10.0, 8.0), _cand(11.0, 9.0)]
    with work.metered() as spent:
        prove_mod.prove(cands, cands[0], method="auto", seed=0, robust="worst", budget=4.0, spent=spent,
                        deadline=time.perf_counter() + 60)
    assert [s for _, s, _ in calls] == [2.0, 2.0]           # each its share, nothing left


def test_an_exact_search_is_not_run_again(monkeypatch):
    """An exact search (up to EXACT_NODES) had everything left in its pass; stopping short of it unsettled, it gets
    no second pass (the 70B H100 spec spent 2.8 work s more on one before this)."""
    calls = []

    def fake(probs, *, time_limit_s, seed, hint, cutoff, **kw):
        work.charge(1.0)                     # stops short of its share, unsettled
        calls.append(seed)
        c = cands[0]
        return SimpleNamespace(status="FEASIBLE", objective=c.result.objective, assign=hint, bound=c.result.bound,
                               wall_s=0.0, method="exact", stopped_by="work", work={"exact_work_s": 1.0})
    monkeypatch.setattr(prove_mod, "solve_mapping", fake)
    cands = [_cand(10.0, 8.0)]
    cands[0].probs[0].n = 8
    with work.metered() as spent:
        prove_mod.prove(cands, cands[0], method="auto", seed=0, robust="worst", budget=9.0, spent=spent,
                        deadline=time.perf_counter() + 60)
    assert calls == [0]
