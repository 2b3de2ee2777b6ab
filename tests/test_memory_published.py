"""Agreement with published Megatron-LM memory figures (Korthikanti et al. 2022; SC21 weak scaling)."""

from benchmarks.memory_published import korthikanti_rows, published_rows, sc21_rows


def test_korthikanti_weights_optimizer_within_5pct_and_activations_within_10pct():
    for r in korthikanti_rows():
        tol = 5.0 if r["technique"].startswith("weights") else 10.0
        assert abs(r["err_pct"]) <= tol, r


def test_sc21_weak_scaling_runs_are_feasible_on_80GB():
    rows = sc21_rows()
    assert len(rows) == 10
    for r in rows:
        assert r["feasible"], r


def test_sc21_check_can_fail():
    # on a 20 GiB GPU not all of them fit: the feasibility check is not vacuous
    rows = sc21_rows(limit_GiB=20.0)
    assert not all(r["feasible"] for r in rows)


def test_profiler_measures_table2_at_175b_shapes():
    from benchmarks.memory_published import KORTHIKANTI, korthikanti_profiled_rows
    rows = korthikanti_profiled_rows(KORTHIKANTI[1:2])
    assert len(rows) == 5
    for r in rows:
        assert abs(r["err_pct"]) <= 1.0, r


def test_against_printed_figures():
    """Numbers printed in the sources (planner/costs/published.py SOURCES), not formulas: 18 and 6 + 12/d bytes per
    parameter (Megatron docs) with Table 3's model sizes within 5%; selective recompute's 70% (175B) and 65% (530B)
    activation saving within 10%; the '5x' headline of SP + selective within 10% for 175B, 530B and 1T."""
    rows = published_rows()
    static = [r for r in rows if r["kind"].startswith("weights")]
    assert len(static) == 8 and all(abs(r["err_pct"]) <= 5.0 for r in static)
    sel = [r for r in rows if r["kind"].startswith("activation saving")]
    assert {r["model"] for r in sel} == {"175B", "530B"} and all(abs(r["err_pct"]) <= 10.0 for r in sel)
    five = {r["model"]: r for r in rows if r["kind"].startswith("activation reduction")}
    assert all(abs(five[m]["err_pct"]) <= 10.0 for m in ("175B", "530B", "1T"))
    # 22B: the headline is rounded over the four models; the paper's own Table 2 gives 6.2x there, as we do
    assert 6.0 < five["22B"]["ours"] < 6.4


def test_printed_figure_check_can_fail():
    # an estimator that forgets the fp32 master weights (14 bytes/param) misses the 18 bytes/param figure by > 5%
    from planner.costs.memory import AnalyticalMemory
    rows = published_rows(AnalyticalMemory(master_weights=False))
    assert any(abs(r["err_pct"]) > 5.0 for r in rows if r["kind"].startswith("weights"))
