"""One home per cost rule (review of Nov 26 2026, findings 1, 2, 3, 6, 11): the pipeline p2p message, the gradient
wire bytes, the chunk count of a schedule, the padded vocabulary and the split-backward schedules are each written
once and used by the estimate, the simulator, the memory model and the exporter alike."""
import ast
import pathlib

import planner
from planner import config, export
from planner.costs import iteration
from planner.simulator import orders

PKG = pathlib.Path(planner.__file__).parent


def _tuple_literals(path: pathlib.Path):
    """Every tuple of string constants written in `path`, as a set of its strings."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Tuple) and node.elts and all(isinstance(e, ast.Constant) and isinstance(e.value, str)
                                                             for e in node.elts):
            yield {e.value for e in node.elts}


def test_split_schedules_have_one_home():
    split = getattr(config, "SPLIT_SCHEDULES", None)       # its home: planner/config.py, beside V_SHAPES
    assert split == ("zb-h1",) + config.V_SHAPES
    assert orders.SPLIT_SCHEDULES is split and getattr(iteration, "SPLIT_SCHEDULES", None) is split
    assert getattr(export, "SPLIT_SCHEDULES", None) is split
    # nobody lists them by value again (export.py:171 did, and iteration.py's dp_row_s wrote ("zb-h1",) + V_SHAPES)
    copies = [str(p.relative_to(PKG)) for p in PKG.rglob("*.py") if p.name != "config.py"
              for t in _tuple_literals(p) if t == set(split)]
    assert copies == []
    src = (PKG / "costs" / "iteration.py").read_text()
    assert '("zb-h1",) + V_SHAPES' not in src


def _chunk0_params(model, cfg):
    """The simulator's parameters of the chunk that holds stage 0 (replay.chunk_params on the schedule's order)."""
    import numpy as np

    from planner.simulator.replay import chunk_params
    sched = orders.build(cfg.schedule, cfg.pp, cfg.num_microbatches, cfg.vpp)
    stage_of = sched.stage_of()
    d0, c0 = np.argwhere(stage_of == 0)[0]
    return chunk_params(model, cfg, cfg.pp, cfg.chunks, stage_of)[d0, c0]


def test_first_chunk_params_is_the_simulators_first_chunk(make_spec):
    """Finding 3: a V-shape device holds two chunks; the bucketed first chunk is half of its layers (it was taken as
    the whole device, 11 buckets where the simulator's chunk holds 6 buckets' worth on GPT-3 13B)."""
    from planner.config import ParallelConfig
    model = make_spec(layers=32).model
    for sched, vpp in (("1f1b", 1), ("zb-h1", 1), ("interleaved", 2), ("interleaved", 4), ("v-half", 2),
                       ("v-min", 2), ("v-zb", 2)):
        cfg = ParallelConfig(8, 4, 1, 1, 8, sched, vpp, "none", 1, True)
        assert iteration.first_chunk_params(model, cfg) == _chunk0_params(model, cfg), sched
    one = iteration.first_chunk_params(model, ParallelConfig(8, 4, 1, 1, 8, "1f1b", 1, "none", 1, True))
    v = iteration.first_chunk_params(model, ParallelConfig(8, 4, 1, 1, 8, "v-half", 2, "none", 1, True))
    emb = model.embedding_params() / 8
    assert v - emb == (one - emb) / 2


def test_chunk_count_has_one_rule():
    """ParallelConfig.chunks and costs.pipeline.chunks_per_device are the same function (config.chunks_per_device),
    and iteration.py writes no schedule -> chunk count rule of its own."""
    from planner.config import SCHEDULES, ParallelConfig
    from planner.costs.pipeline import chunks_per_device
    assert chunks_per_device is getattr(config, "chunks_per_device", None)
    for s in SCHEDULES:
        assert ParallelConfig(1, 4, 1, 1, 8, s, 3).chunks == chunks_per_device(s, 3)
    src = (PKG / "costs" / "iteration.py").read_text()
    assert 'cfg.vpp if cfg.schedule == "interleaved"' not in src
