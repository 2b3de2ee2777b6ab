"""`planner fit KIND ...`: fit an estimator on profiled samples (KIND: compute, memory) and save it as JSON.
numpy, scipy and sklearn are imported only when a fit runs."""
from __future__ import annotations

import json
import os
import sys

from planner.cli.common import finite_float
from planner.errors import SpecError


def register(subparsers) -> None:
    p = subparsers.add_parser("fit", help="fit an estimator (memory, compute, ...) on profiled samples")
    sub = p.add_subparsers(dest="fit_kind", metavar="KIND")
    for add in (_add_memory, _add_compute):      # the order `--help` has always listed them in
        add(sub)
    p.set_defaults(func=lambda args: _missing(p))


def _missing(parser) -> int:
    from planner.cli.profile import missing_kind
    return missing_kind(parser)


# --- compute ----------------------------------------------------------------------------------------------

def _add_compute(sub) -> None:
    p = sub.add_parser("compute", help="fit the compute model to a layer profile or measured iterations")
    p.add_argument("--measured", help="iteration times in vTrain's CSV format (fits through the latency model)")
    p.add_argument("--profile", help="a `planner profile compute` CSV (layer-level fit)")
    p.add_argument("--cluster", help="cluster YAML the measurements ran on")
    p.add_argument("--nccl", help="directory of nccl-tests all-reduce tables (allreduce_<N>gpu.txt)")
    p.add_argument("--grad-bytes", type=int, choices=(2, 4), default=2,
                   help="bytes per gradient in the measured runs' DP all-reduce (fp16: 2; 4: reduced in fp32, "
                        "training.grad_reduce_in_fp32)")
    p.add_argument("--peak-tflops", type=finite_float, default=None,
                   help="with --profile: the device's dense peak TFLOP/s in the profile's precision (default: "
                        "--cluster's)")
    p.add_argument("--kfold", type=int, default=0, help="also cross-validate with k folds")
    p.add_argument("--pipeline-engine", choices=("deepspeed", "megatron"), default="deepspeed",
                   help="the engine that ran --measured (default deepspeed, as vTrain's Megatron-DeepSpeed runs)")
    p.add_argument("-o", "--output", default="compute_profile.json",
                   help="compute profile JSON to write (default compute_profile.json)")
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    p.set_defaults(func=run_compute)


def _compute_inputs(args) -> dict:
    """{path: what} of the files `fit compute` reads, which its --output must not overwrite."""
    import glob

    from planner.inputs import cluster_inputs
    out = {}
    if args.cluster:
        out.update(cluster_inputs(args.cluster))
    for flag in ("measured", "profile"):
        if getattr(args, flag):
            out[getattr(args, flag)] = f"the --{flag} file"
    if args.nccl:
        out.update(dict.fromkeys(glob.glob(os.path.join(args.nccl, "*gpu*")), "an nccl-tests table (--nccl)"))
    return out


def run_compute(args) -> int:
    import numpy as np

    from planner.costs.comm import CommModel, read_nccl_dir
    from planner.costs.compute import ComputeModel
    from planner.costs.compute_fit import IterationTimeFit, LayerTimeFit, cross_validate
    from planner.costs.metrics import mape, percent_errors
    from planner.io import check_out  # here: registering the command imports no numpy
    from planner.spec import load_cluster
    check_out(args.output, "--output", _compute_inputs(args))
    tables = read_nccl_dir(args.nccl) if args.nccl else {}
    base = ComputeModel(comm=CommModel(grad_bytes=args.grad_bytes, allreduce_tables=tables))
    if args.measured:
        from planner.profile.validate import read_vtrain_csv, supported
        if not args.cluster:
            raise SpecError(None, "--cluster", "is required with --measured")
        cluster = load_cluster(args.cluster)
        rows = read_vtrain_csv(args.measured)
        # the measured rows' wire bytes: the cost model takes them from the plan (iteration.grad_bytes)
        est = IterationTimeFit(cluster, base, defaults={"pipeline_engine": args.pipeline_engine,
                                                        "grad_reduce_in_fp32": args.grad_bytes == 4}).fit(rows)
        fit = {"kind": "iteration", "source": os.path.basename(args.measured), "rows": len(rows),
               "in_sample_rms_log_error": est.rms_log_error_}
        if args.kfold > 1:
            use = supported(rows, cluster)
            meas = [r.measured_s for r in use]
            pred, _ = cross_validate(est, use, k=args.kfold)
            fit["kfold"] = args.kfold
            fit["cv_mape_pct"] = mape(pred, meas)
            fit["cv_max_abs_pct_error"] = float(np.max(np.abs(percent_errors(pred, meas))))
    elif args.profile:
        from planner.profile.compute import read_profile_csv
        samples = read_profile_csv(args.profile)
        peak = args.peak_tflops * 1e12 if args.peak_tflops else None
        if peak is None:
            if not args.cluster:
                raise SpecError(None, "--peak-tflops", "give the device's peak, or --cluster to read it")
            from planner.spec.fields import FieldError
            try:
                peak = load_cluster(args.cluster).gpu.peak_flops(samples[0].precision)
            except FieldError as e:     # the profile's precision has no peak in the cluster file
                raise SpecError(args.cluster, f"gpu.{e.field}", f"{e.reason} (the profile {args.profile} is "
                                f"{samples[0].precision})") from None
        est = LayerTimeFit(peak, base).fit(samples)
        meas = [[s.forward_ms * 1e-3, s.backward_ms * 1e-3] for s in samples]
        devices = sorted({s.device for s in samples if s.device})
        if "cpu" in devices:
            print(f"planner: warning: {args.profile} was measured on cpu: the fitted profile describes that CPU, not "
                  "a GPU (a GPU cluster given it plans at the CPU's speed)", file=sys.stderr)
        fit = {"kind": "layer", "source": os.path.basename(args.profile), "device": devices, "samples": len(samples),
               "peak_tflops": peak / 1e12, "mape_pct": mape(est.predict(samples), meas),
               "max_abs_pct_error": float(np.max(np.abs(est.errors_pct_)))}
    else:
        raise SpecError(None, "--measured/--profile", "give measured iterations or a layer profile to fit")
    out = est.save(args.output, fit, allreduce_tables=args.nccl)
    print(json.dumps(out, indent=2) if args.json else f"wrote {args.output}: {fit}",
          file=sys.stdout if args.json else sys.stderr)
    return 0


# --- memory -----------------------------------------------------------------------------------------------

def _add_memory(sub) -> None:
    p = sub.add_parser("memory", help="fit the learned memory estimator on profiled samples (CSV)")
    p.add_argument("samples", help="CSV written by `planner profile memory`")
    p.add_argument("-o", "--output", required=True, help="estimator JSON to write")
    p.add_argument("--margin", type=finite_float, default=0.01,
                   help="extra relative safety on top of the worst (out-of-fold) under-estimate")
    p.add_argument("--overhead-GiB", type=finite_float, default=2.0, dest="overhead_GiB",
                   help="runtime overhead (CUDA context, cuBLAS workspaces, NCCL) added to every prediction")
    p.add_argument("--fragmentation", type=finite_float, default=0.02,
                   help="allocator reserve it cannot give back, as a fraction of the safe allocated prediction")
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    p.set_defaults(func=run_memory)


def run_memory(args) -> int:
    from planner.costs.learned import FEATURES, check_sample_count, fit_samples, read_samples
    from planner.costs.memory import GiB
    if not 0 <= args.fragmentation < 1:
        raise SpecError(None, "--fragmentation", "must be in [0, 1)")
    if args.margin < 0:           # a negative safety would scale every prediction down: plans that do not fit
        raise SpecError(None, "--margin", f"must be >= 0, got {args.margin:g}")
    if args.overhead_GiB < 0:
        raise SpecError(None, "--overhead-GiB", f"must be >= 0, got {args.overhead_GiB:g}")
    from planner.io import check_out
    check_out(args.output, "--output", {args.samples: "the samples file"})
    rows = read_samples(args.samples)
    check_sample_count(rows, args.samples)
    est = fit_samples(rows, args.margin, args.overhead_GiB, os.path.basename(args.samples), args.fragmentation)
    est.save(args.output)
    info = {"output": args.output, "coef": dict(zip(list(FEATURES) + ["const"], est.coef_, strict=True)),
            "safety": est.safety_, "safety_GiB": est.safety_bytes / GiB, "samples": len(rows)}
    if args.json:
        print(json.dumps(info, indent=1))
    else:
        print(f"fitted on {len(rows)} samples -> {args.output}; safety x{est.safety_:.3f} "
              f"+ {est.safety_bytes / GiB:.2f} GiB", file=sys.stderr)
        for k, v in info["coef"].items():
            print(f"  {k:12s} {v:.4g}", file=sys.stderr)
    return 0
