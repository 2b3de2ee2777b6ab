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
