"""Agreement with published Megatron-LM memory figures (Korthikanti et al. 2022; SC21 weak scaling)."""

from benchmarks.memory_published import korthikanti_rows, sc21_rows


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
