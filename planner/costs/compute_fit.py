"""Fitting the compute model: two estimators with scikit-learn's contract (hyper-parameters in __init__,
fit(X, y) returns self, fitted attributes end in `_`, predict, save / load as a compute profile JSON).

- IterationTimeFit: measured training iterations (vTrain's rows) through the planner's own iteration model;
- LayerTimeFit: `planner profile compute` layer samples (forward and backward of one layer).

Both minimise squared log(predicted / measured) within physically plausible bounds (scipy least_squares).
`cross_validate` gives out-of-fold predictions over sklearn's KFold.
"""
from __future__ import annotations

import math

import numpy as np

from planner.costs.compute import DEFAULT_FIT, ComputeModel, load_profile, save_profile
from planner.costs.metrics import percent_errors

# physically plausible ranges (A100-class GPUs). max_efficiency <= 0.83: cuBLAS reaches 258 of the A100's 312 TFLOP/s
# on an 8192^3 bf16 matmul of random data (H. He, "Strangely, Matrix Multiplications on GPUs Run Faster When Given
# 'Predictable' Data!", thonking.ai, 2024; the A100 draws more power on random bits and lowers its clock), the best
# shape there is; the iteration fit cannot tell 0.83 from 0.85 (vTrain's single-node models are small: rms log error
# 0.0884 either way) and sat on the old 0.85 bound, which made every large GEMM 2-3% too fast (docs/notes/compute.md)
FIT_BOUNDS = {
    "max_efficiency": (0.2, 0.83), "half_size": (1e6, 1e11), "attn_efficiency": (0.05, 1.0),
    "hbm_GBps": (100.0, 1555.0), "layer_overhead_s": (0.0, 2e-3), "iteration_overhead_s": (0.0, 0.2),
    "backward_ratio": (1.5, 3.5), "tp_sync_s": (0.0, 1e-3),
}
LAYER_FIT = ("max_efficiency", "half_size", "attn_efficiency", "hbm_GBps", "layer_overhead_s")
# any device (a CPU as well as a GPU), so wider than the A100 iteration-fit bounds; attn_efficiency is a share of the
# GEMM curve's rate (itself at most max_efficiency of peak), so above 1.0 attention could run past the peak: a CPU
# fit reached the old 2.0 bound (tryout 8). The shipped H100 fit has 0.368 (eager_stack_fit), off either bound.
LAYER_BOUNDS = {"max_efficiency": (0.01, 1.0), "half_size": (1e3, 1e12), "attn_efficiency": (0.01, 1.0),
                "hbm_GBps": (0.5, 10000.0), "layer_overhead_s": (0.0, 0.1), "backward_ratio": (1.0, 4.0)}
LOG_PARAMS = ("half_size",)      # fitted in log space (spans orders of magnitude)


class _ComputeFit:
    """Shared machinery: parameter packing, bounded least squares, profile save / load."""
    bounds: dict = FIT_BOUNDS
    max_nfev: int = 200
    _hyper: tuple = ("base", "params")

    def get_params(self) -> dict:
        return {k: getattr(self, k) for k in self._hyper}

    def _pack(self, model: ComputeModel) -> np.ndarray:
        return np.array([math.log(getattr(model, n)) if n in LOG_PARAMS else getattr(model, n) for n in self.params])

    def _unpack(self, x) -> ComputeModel:
        return self.base.with_params(**{n: (math.exp(v) if n in LOG_PARAMS else float(v))
                                        for n, v in zip(self.params, x, strict=True)})

    def _least_squares(self, resid):
        from scipy.optimize import least_squares
        names, b = list(self.params), self.bounds
        lo = [math.log(b[n][0]) if n in LOG_PARAMS else b[n][0] for n in names]
        hi = [math.log(b[n][1]) if n in LOG_PARAMS else b[n][1] for n in names]
        x0 = np.clip(self._pack(self.base), lo, hi)
        x_scale = np.array([b[n][1] - b[n][0] if n not in LOG_PARAMS else 1.0 for n in names]) / 10
        res = least_squares(resid, x0, bounds=(lo, hi), x_scale=x_scale, diff_step=1e-3, max_nfev=self.max_nfev)
        return self._unpack(res.x), res

    def save(self, path: str, fit: dict | None = None, allreduce_tables: str | None = None) -> dict:
        """The fitted model as a compute profile JSON; `fit`: how it was fitted (recorded as is)."""
        return save_profile(path, self.model_, dict(fit or {}), allreduce_tables)

    @classmethod
    def load(cls, path: str, **params):
        """An estimator whose fitted model is the profile at `path` (SpecError on unknown keys or format)."""
        est = cls(**params)
        est.model_ = load_profile(path)
        return est


class IterationTimeFit(_ComputeFit):
    """Fit on measured iterations: X = vTrain rows (planner.profile.validate.Row), y = measured seconds
    (default: the rows' own). Rows the planner cannot represent are left out of the fit.

    base: the ComputeModel to start from (its comm model and any unfitted parameter stay as they are);
    defaults: overrides of the vTrain run settings (e.g. {"pipeline_engine": "megatron"})."""

    _hyper = ("cluster", "base", "params", "defaults")

    def __init__(self, cluster, base: ComputeModel | None = None, params=DEFAULT_FIT, defaults: dict | None = None):
        self.cluster = cluster
        self.base = base if base is not None else ComputeModel()
        self.params = tuple(params)
        self.defaults = defaults

    def fit(self, X, y=None) -> IterationTimeFit:
        from planner.costs import costs_with_compute
        from planner.profile.validate import predict, unsupported_reason
        keep = [i for i, r in enumerate(X) if unsupported_reason(r, self.cluster) is None]   # as supported()
        use = [X[i] for i in keep]
        meas = np.array([r.measured_s for r in use]) if y is None else np.asarray(y, float)[keep]

        # its times carry the slowest GPU of runs this large (a cluster's gpu.variability charges beyond it): the
        # model is fitted with the reference it is saved with
        ref = float(max(r.gpus for r in use))

        def resid(x):
            costs = costs_with_compute(self._unpack(x).with_params(reference_gpus=ref))
            pred = np.array([predict(r, self.cluster, costs, self.defaults) for r in use])
            return np.log(pred / meas)

        self.model_, self.result_ = self._least_squares(resid)
        self.model_ = self.model_.with_params(reference_gpus=ref)
        self.n_fit_ = len(use)
        self.rms_log_error_ = float(np.sqrt(np.mean(self.result_.fun ** 2)))
        return self

    def predict(self, X) -> np.ndarray:
        """Iteration seconds of each row (rows must be ones the planner represents)."""
        from planner.costs import costs_with_compute
        from planner.profile.validate import predict
        costs = costs_with_compute(self.model_)
        return np.array([predict(r, self.cluster, costs, self.defaults) for r in X])


def layer_times(model: ComputeModel, sample, peak_flops: float) -> tuple[float, float]:
    """(forward s, backward s) the ComputeModel gives one profiled layer (no TP collectives: one rank alone)."""
    from types import SimpleNamespace

    from planner.config import ParallelConfig
    from planner.spec.cluster import GPUSpec, Link
    from planner.spec.model import ModelSpec
    from planner.spec.plan import TrainingSpec
    m = ModelSpec(name="p", family="gpt", num_layers=1, hidden_size=sample.hidden, num_attention_heads=sample.heads,
                  num_kv_heads=sample.heads, ffn_hidden_size=4 * sample.hidden, vocab_size=50257,
                  tied_embeddings=True)
    # the layer profiler (planner.profile.compute) runs the explicit softmax path
    tr = TrainingSpec(global_batch_size=sample.mbs, seq_length=sample.seq, precision=sample.precision,
                      attention="unfused")
    cfg = ParallelConfig(sample.tp, 1, 1, sample.mbs, 1)
    # a one-GPU stand-in: layer_parts reads the peak and (for its TP term, ignored here) the link
    cl = SimpleNamespace(gpu=GPUSpec(type="profiled", memory_GiB=0, peak_tflops={sample.precision: peak_flops / 1e12}),
                         intra=Link(bandwidth_GBps=1.0, latency_us=0.0))
    return model.pass_times(model.layer_parts(m, cl, tr, cfg))


class LayerTimeFit(_ComputeFit):
    """Fit on layer samples: X = LayerSample list (planner.profile.compute), y = (n, 2) forward / backward
    seconds (default: the samples' own). Sets errors_pct_: the in-sample percent errors, (n, 2)."""

    bounds = LAYER_BOUNDS
    max_nfev = 300
    _hyper = ("peak_flops", "base", "params")

    def __init__(self, peak_flops: float, base: ComputeModel | None = None, params=LAYER_FIT):
        self.peak_flops = peak_flops
        self.base = base if base is not None else ComputeModel(layer_overhead_s=1e-5)
        self.params = tuple(params)

    def fit(self, X, y=None) -> LayerTimeFit:
        meas = (np.array([[s.forward_ms * 1e-3, s.backward_ms * 1e-3] for s in X]) if y is None
                else np.asarray(y, float))

        def resid(x):
            m = self._unpack(x)
            return np.log(np.array([layer_times(m, s, self.peak_flops) for s in X]) / meas).ravel()

        self.model_, self.result_ = self._least_squares(resid)
        self.errors_pct_ = percent_errors(self.predict(X), meas)
        return self

    def predict(self, X) -> np.ndarray:
        return np.array([layer_times(self.model_, s, self.peak_flops) for s in X])


def cross_validate(estimator: _ComputeFit, X, y=None, k: int = 5, seed: int = 0):
    """Out-of-fold predictions: every sample predicted by a clone of `estimator` fitted without it. The folds
    are sklearn's KFold over a seeded permutation (numpy default_rng(seed)). Returns (predictions, models)."""
    from sklearn.model_selection import KFold
    n = len(X)
    y = None if y is None else np.asarray(y, float)
    order = np.random.default_rng(seed).permutation(n)
    pred, models = [None] * n, []
    for tr, te in KFold(k).split(order):
        train, test = np.sort(order[tr]), order[te]     # training rows in their own order (the fit sees that)
        est = type(estimator)(**estimator.get_params()).fit([X[i] for i in train],
                                                             None if y is None else y[train])
        models.append(est.model_)
        for i, p in zip(test, est.predict([X[i] for i in test]), strict=True):
            pred[i] = p
    return np.array(pred), models


__all__ = ["IterationTimeFit", "LayerTimeFit", "cross_validate", "layer_times", "FIT_BOUNDS", "LAYER_BOUNDS",
           "LAYER_FIT", "LOG_PARAMS"]
