"""Hidden communication of every published recipe row, and an overlap-interference sensitivity (#8 / #9).

Per row of both tables of benchmarks/published_recipes.py: the planner's iteration time with each overlap turned off
minus with it on (training.overlap: tensor-parallel userbuffers / asynchronous backward, data-parallel gradient reduce
and parameter gather, pipeline p2p), i.e. the communication the model takes as hidden behind compute; the slowdown
sigma of the overlapped compute that would close the row's gap; and the row's error if the compute beside every
hidden transfer ran `--sigma` slower (default 0.189: Lee et al., "Characterizing Compute-Communication Overlap in
GPU-Accelerated Distributed Deep Learning", arXiv 2507.03114, abstract: mean compute slowdown while communication
runs beside it, 4 GPUs of A100 / H100 / MI250 / MI210). A sensitivity, not a model term (docs/notes/gpu_h200.md,
"One H100"). Not counted: the context-parallel exchange hidden behind attention, and ZeRO-3's (FSDP2's) collectives,
which the overlap flags do not switch (FSDP2 always overlaps): their "dp" column reads 0.

    python benchmarks/hidden_comm.py [--sigma 0.189]
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]

OVERLAPS = (("tp", {"tp_comm": False, "tp_backward": False}), ("dp", {"param_gather": False, "grad_reduce": False}),
            ("p2p", {"p2p": False}))


def main(argv=None) -> int:
    import published_recipes as pr

    from planner.search.solve import estimate_plan
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sigma", type=float, default=0.189)
    a = ap.parse_args(argv)

    def t_of(spec, cfg):
        return estimate_plan(spec, cfg)[0].iteration_s
    print(f"{'row':34s} {'kind':7s} {'error':>7s} {'tp s':>7s} {'dp s':>7s} {'p2p s':>7s} {'sigma needed':>12s} "
          f"{'with sigma':>10s}")
    for data in (pr.DATA, os.path.join(HERE, "data", "published_recipes_fsdp.yaml")):
        for row in pr.load_rows(data)[1]:
            spec, cfg, _, _ = pr.build(row)
            pub, _ = pr.published_step_s(row, spec.model)
            t = t_of(spec, cfg)
            hidden = {}
            for name, off in OVERLAPS:
                ov = dataclasses.replace(spec.training.overlap, **off)
                s2 = dataclasses.replace(spec, training=dataclasses.replace(spec.training, overlap=ov))
                hidden[name] = t_of(s2, cfg) - t
            h = sum(hidden.values())
            need = f"{(pub - t) / h:12.2f}" if h > 1e-9 else f"{'-':>12s}"
            print(f"{row['id']:34s} {'partial' if pr.is_partial(row) else 'full':7s} {t / pub - 1:+7.1%} "
                  f"{hidden['tp']:7.3f} {hidden['dp']:7.3f} {hidden['p2p']:7.3f} {need} {(t + a.sigma * h) / pub - 1:+10.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
