"""Human-readable tables (rich, on stderr) for plans and comparisons."""
from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table


class StderrConsole(Console):
    """rich's Console on stderr whose broken pipe is planner's (exit 141, cli.main), not rich's SystemExit(1), which
    would read as "no feasible plan"."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def console(width: int = 120) -> Console:
    return StderrConsole(file=sys.stderr, width=width)


def mfu_text(spec, mfu: float) -> str:
    """An MFU as the solve and estimate tables print it: the planner's count (the full s x s attention, as NeMo 24.07
    reports it; an fp8 plan's against the bf16 peak, mfu_note) and the same run with the attention counted causally,
    as Megatron-Bridge 26.02 reports it (ModelSpec.causal_mfu). Long sequences separate them most."""
    from planner.costs.iteration import mfu_note
    causal = spec.model.causal_mfu(spec.training.seq_length, mfu)
    return (f"{mfu:.1%}{mfu_note(spec)} counting full s x s attention (as NeMo 24.07), {causal:.1%} counting it "
            "causally (as Megatron-Bridge 26.02)")


def train_text(spec, tokens_per_s: float, gpus: int) -> str | None:
    """Days, GPU-hours and dollars to train the spec's `training.tokens` at the plan's throughput (None without a
    token budget); dollars at the cluster's `price_per_gpu_hour_usd` when it has one (batch.sizing.train_cost)."""
    tokens = spec.training.tokens
    if not tokens or tokens_per_s <= 0:
        return None
    from planner.batch.sizing import train_cost
    price = spec.cluster.price_per_gpu_hour_usd
    c = train_cost(tokens, tokens_per_s, gpus, price)
    cost = f", ${_num(c.dollars)} at ${price:g}/GPU-h" if c.dollars is not None else ""
    return f"to train {_num(tokens / 1e9)}B tokens: {_num(c.days)} days, {_num(c.gpu_hours)} GPU-hours{cost}"


def _num(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def plan_table(sol) -> Table:
    from planner.config import FORK_NEEDED, fork_note
    c, e, s = sol.config, sol.estimate, sol.solver
    t = Table(title=f"plan: {sol.spec.name}", show_header=False)
    t.add_column("what", style="bold")
    t.add_column("value")
    cp = f"  cp={c.cp}" if c.cp > 1 else ""
    t.add_row("parallelism", f"tp={c.tp}{cp}  pp={c.pp}  dp={c.dp}  ({c.num_gpus} GPUs)")
    t.add_row("batch", f"micro-batch {c.micro_batch_size} x {c.num_microbatches} micro-batches")
    fork = fork_note(c)
    t.add_row("schedule", c.schedule + (f" (v={c.vpp})" if c.vpp > 1 else "")
              + (f"  [yellow]{FORK_NEEDED}: not stock Megatron-LM / NeMo[/yellow]" if fork else ""))
    # HSDP (dp_shard): the shard group and the replicas, as the label's hsdpN says; plain FSDP shards over all of dp
    zero = f"{c.zero} (HSDP {c.shard_size} x {c.replicas}: shard groups of {c.shard_size}, {c.replicas} replicas)" \
        if c.zero == 3 and c.dp_shard else str(c.zero)
    rc = c.recompute if c.recompute_layers is None else (
        f"{c.recompute} (every {c.recompute_layers}-th block of a rank: torchtitan's layer SAC)" if c.layer_sac else
        f"{c.recompute} (first {c.recompute_layers} layers per chunk)")
    t.add_row("recompute / ZeRO / SP", f"{rc} / {zero} / {'on' if c.sequence_parallel else 'off'}")
    per = "per node" if sol.layout.span == 1 else f"per {sol.layout.span} nodes (tp x cp spans them)"
    t.add_row("layout", f"{sol.layout.a} stage(s) x {sol.layout.b} replica(s) {per}, "
                        f"{sol.layout.rows} x {sol.layout.cols} node grid")
    on = "" if getattr(s, "robust", "none") == "none" else "on the cluster's bandwidth matrix, "
    t.add_row("iteration", f"{e.iteration_s:.3f} s  ({on}{e.tokens_per_s:,.0f} tokens/s)")
    t.add_row("MFU", mfu_text(sol.spec, e.mfu))
    train = train_text(sol.spec, e.tokens_per_s, c.num_gpus)
    if train:
        t.add_row("time to train", train.removeprefix("to train "))
    t.add_row("  compute | p2p | dp | emb",
              f"{e.compute_s:.3f} | {e.pp_comm_s:.4f} | {e.dp_comm_s:.4f} | {e.emb_comm_s:.4f} s")
    var = getattr(sol.spec.cluster.gpu, "variability", None)
    if var is not None:          # gpu.variability: say that the GPU work is the slowest of the plan's GPUs
        from planner.costs import default_costs
        k = default_costs(sol.spec.cluster).compute.straggler(sol.spec.cluster, c)
        t.add_row("  slowest GPU", f"GPU work x{k:.4f}: the expected slowest of {c.num_gpus} GPUs "
                                   f"(gpu.variability {var.label})")
    md = e.memory_dict()
    t.add_row("memory peak", f"{md['peak']:.1f} GiB of {md['limit']:.1f} GiB usable "
                             f"(w {md['weights']:.1f}, g {md['gradients']:.1f}, opt {md['optimizer']:.1f}, "
                             f"act {md['activations']:.1f}, logits {md['logits']:.1f}, "
                             f"bwd work {md.get('transient', 0):.1f}, "
                             f"fit+safety {md.get('correction', 0) + md.get('safety', 0):.1f}, "
                             f"frag {md.get('fragmentation', 0):.1f}, ovh {md['overhead']:.1f}"
                             + (f", fsdp buffers {md['fsdp']:.1f}" if "fsdp" in md else "") + ")")
    t.add_row("memory per stage", " ".join(f"{v:.1f}" for v in md["per_stage"]))
    if sol.simulated:
        t.add_row("simulated", f"{sol.simulated.get('iteration_s', 0):.3f} s, peak "
                               f"{sol.simulated.get('peak_memory_GiB', 0):.1f} GiB, estimate vs simulation "
                               f"{sol.simulated.get('estimate_vs_simulation', 0):+.1%}"
                               + ("" if sol.simulated.get("fits", True) else "  [red]over memory[/red]"))
    over = "" if getattr(s, "robust", "none") == "none" else f" ({s.robust} over the bandwidth snapshots)"
    t.add_row("solver", f"{s.method} {s.status}, stopped by {stopped_by_text(s)}: objective {s.objective:.4f} s"
                        f"{over}, bound {s.bound:.4f} s, gap {s.gap:.2%}, {s.wall_s:.1f} s")
    t.add_row("search", f"{s.candidates} configs, {s.pruned_memory} over memory, {s.pruned_bound} (config, "
                        f"layout) pairs pruned by bound, {s.mappings_solved} mappings solved, {s.mappings_proved} "
                        "settled by CP-SAT (proved optimal, or proved unable to beat the incumbent)")
    if getattr(s, "note", ""):
        t.add_row("note", s.note)
    return t


def stopped_by_text(s) -> str:
    """The solver record's stopped_by in words. `proof` with status FEASIBLE: the search proved the estimate's
    optimum (the bound), and the simulator then chose another plan (the note), whose estimate the gap measures."""
    by = getattr(s, "stopped_by", "work")
    if by == "proof" and s.status == "FEASIBLE":
        return "proof (of the estimate's optimum; the simulator re-ranked to this plan)"
    return {"proof": "proof (the plan is the estimate's optimum)", "work": "work (the deterministic budget)",
            "wall": "wall (the wall-clock safety stop: the plan may depend on the machine's load)"}.get(by, by)


def mapping_table(sol, max_rows: int = 16) -> Table:
    t = Table(title="node grid (rows: stage groups, columns: replica groups)")
    t.add_column("stages")
    for j in range(sol.layout.cols):
        t.add_column(f"dp {j * sol.layout.b}-{(j + 1) * sol.layout.b - 1}")
    for i, row in enumerate(sol.assign[:max_rows]):
        t.add_row(f"{i * sol.layout.a}-{(i + 1) * sol.layout.a - 1}", *[f"node {sol._node_id(k)}" for k in row])
    return t


def show_solution(sol, out: str, as_json: bool, footer: str | None = None) -> None:
    """Write the solution (atomically) and show it: JSON on stdout, or tables on stderr."""
    from planner.io import print_json
    sol.write(out)
    if as_json:
        d = sol.as_dict()
        d["solution_path"] = out
        print_json(d)
        return
    con = console()
    con.print(plan_table(sol))
    con.print(mapping_table(sol))
    con.print(footer or f"wrote {out}")
