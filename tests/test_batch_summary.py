"""The batch summary and cost plot with several batch sizes per model (tryout 3, item 12): the
cheapest-vs-fastest table names the batch, and the cost plot draws one line per batch size."""
from __future__ import annotations

from planner.batch.plots import cost_lines, varies_within
from planner.batch.sizing import cheapest_vs_fastest
from planner.cli.batch import cheapest_table


def _row(model, gpus, gbs, days, tokens=1e10, seq=2048):
    return {"case_id": f"{model}-{gpus}-{gbs}", "model": model, "params": 8e9, "cluster": "a100", "gpus": gpus,
            "global_batch_size": gbs, "seq_length": seq, "tokens": tokens, "status": "OPTIMAL", "tp": 1, "pp": 1,
            "dp": gpus, "tokens_per_s": 1.0, "mfu": 0.5, "train_days": days, "gpu_hours": days * 24 * gpus,
            "cost_usd": 2 * days * 24 * gpus}


# odd.yaml's shape: one model at batch 96 and 100 on 8 and 16 GPUs, where 100 is slower on 16 than on 8
TWO_BATCHES = [_row("llama", 8, 96, 3.1), _row("llama", 16, 96, 1.5), _row("llama", 8, 100, 3.3),
               _row("llama", 16, 100, 1.8)]


def _columns(table) -> dict[str, list[str]]:
    return {str(c.header): list(c.cells) for c in table.columns}


def test_table_has_a_batch_column_when_a_model_has_several():
    t = _columns(cheapest_table(cheapest_vs_fastest(TWO_BATCHES), TWO_BATCHES))
    assert t["model"] == ["llama", "llama"]
    assert t["batch"] == ["96", "100"]          # the two lines of one model are told apart
    assert "seq" not in t and "tokens" not in t


def test_table_has_no_batch_column_for_one_batch():
    rows = [r for r in TWO_BATCHES if r["global_batch_size"] == 96]
    t = _columns(cheapest_table(cheapest_vs_fastest(rows), rows))
    assert "batch" not in t and t["model"] == ["llama"]


def test_cost_plot_draws_one_line_per_batch():
    lines = cost_lines(TWO_BATCHES)
    assert [label for label, _ in lines] == ["llama on a100, batch 96", "llama on a100, batch 100"]
    for label, rs in lines:
        assert [r["gpus"] for r in rs] == [8, 16]       # each line runs once along the GPU axis
        assert {r["global_batch_size"] for r in rs} == {int(label.rsplit(" ", 1)[1])}


def test_cost_plot_labels_stay_short_when_nothing_varies_within_a_model():
    # a Chinchilla budget differs between models but not within one: it needs no label
    rows = [_row("a", 8, 64, 2.0, tokens=1e10), _row("a", 16, 64, 1.0, tokens=1e10),
            _row("b", 8, 64, 4.0, tokens=2e10), _row("b", 16, 64, 2.0, tokens=2e10)]
    assert [label for label, _ in cost_lines(rows)] == ["a on a100", "b on a100"]
    assert not varies_within(rows, "tokens", ("model",)) and varies_within(TWO_BATCHES, "global_batch_size",
                                                                            ("model",))


def test_cost_plot_lines_run_by_model_size():
    """Tryout 8: the legend listed gpt-2.02b, gpt-3.99b, gpt-7.93b, gpt-986m (by name); lines now run by parameter
    count, then name."""
    rows = []
    for name, params in (("gpt-2.02b", 2.02e9), ("gpt-986m", 0.986e9), ("gpt-7.93b", 7.93e9)):
        rows += [dict(_row(name, g, 64, 1.0), params=params) for g in (8, 16)]
    assert [label for label, _ in cost_lines(rows)] == ["gpt-986m on a100", "gpt-2.02b on a100", "gpt-7.93b on a100"]
