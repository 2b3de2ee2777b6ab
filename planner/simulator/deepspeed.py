"""DeepSpeed's pipeline engine (PipelineEngine + TrainSchedule), as Megatron-DeepSpeed runs GPTModelPipe.

Its 1F1B is lock-step: every stage walks 2(m + p - 1) steps; in step t stage s runs the forward of
micro-batch k at t = 2k + s and the backward at t = 2k + 2p - 1 - s (`TrainSchedule._step_to_micro_batch`),
the same F/B order per device as Megatron-LM's 1F1B. What differs is the communication: each step issues
separate blocking instructions, in this order (`TrainSchedule.steps`):

  forward step:  RecvActivation(k) from s-1, SendGrad(previous step's micro-batch) to s-1, ForwardPass(k)
  backward step: SendActivation(previous step's micro-batch) to s+1, RecvGrad(k) from s+1, BackwardPass(k)

A send is an NCCL send paired with the peer's receive: neither completes before both are posted, and the
compute stream waits on it. So every transfer is a rendezvous: it starts when *both* devices reach it,
holds both for the transfer, and a device that reaches it first waits. Each activation is sent one step
late (with the next backward), after the receiver may already be waiting for it.

Not modelled: the tensor-group all-gather of pipe-partitioned activations after a receive (NVLink, small),
the first step's shape metadata exchange, host launch gaps.
"""
from __future__ import annotations

import numpy as np

from planner.simulator.engine import DeadlockError, Graph
from planner.simulator.ops import B, F, R

_COMP, _SEND, _RECV = 0, 1, 2


def step_to_microbatch(step: int, stage: int, p: int) -> tuple[int, bool]:
    """(micro-batch, is_forward) of `step` on `stage` (invalid micro-batches are < 0 or >= m)."""
    if step % 2 == stage % 2:
        return (step - stage) // 2, True
    return (step + stage + 1) // 2 - p, False


def instruction_streams(g: Graph, p: int, m: int, lat_f, lat_b) -> list[list[tuple]]:
    """Per device: [(kind, arg, seconds)]: compute (op index into g), send / receive (message key).

    lat_f[s]: transfer time of the activation into stage s (from s - 1); lat_b[s]: of the gradient into
    stage s (from s + 1). Keys: 2 * (m * stage + k) for the activation of micro-batch k into `stage`,
    + 1 for its gradient, so a send and the receive it pairs with carry the same key."""
    kinds, mbs = g.kind.tolist(), g.mb.tolist()
    offs = g.offs.tolist()
    out = []
    for s in range(p):
        ins = []
        i, stop = offs[s], offs[s + 1]
        prev = -1
        for t in range(2 * (m + p - 1)):
            k, fwd = step_to_microbatch(t, s, p)
            cur_ok, prev_ok = 0 <= k < m, 0 <= prev < m
            if fwd:
                if cur_ok and s > 0:
                    ins.append((_RECV, 2 * (m * s + k), lat_f[s]))
                if prev_ok and s > 0:
                    ins.append((_SEND, 2 * (m * (s - 1) + prev) + 1, lat_b[s - 1]))
            else:
                if prev_ok and s < p - 1:
                    ins.append((_SEND, 2 * (m * (s + 1) + prev), lat_f[s + 1]))
                if cur_ok and s < p - 1:
                    ins.append((_RECV, 2 * (m * s + k) + 1, lat_b[s]))
            if cur_ok:
                # the device's own ops for this pass, in its list order: F, or (R,) B
                want = (F,) if fwd else ((R, B) if i < stop and kinds[i] == R else (B,))
                for kind in want:
                    if i >= stop or kinds[i] != kind or mbs[i] != k:
                        raise ValueError(f"device {s}: op list does not follow DeepSpeed's 1F1B at step {t}")
                    ins.append((_COMP, i, 0.0))
                    i += 1
            prev = k
        if i != stop:
            raise ValueError(f"device {s}: {stop - i} ops outside DeepSpeed's 1F1B steps")
        out.append(ins)
    return out


def run(streams: list[list[tuple]], dur: list, n_ops: int) -> tuple[list, list, float]:
    """Start and end of every compute op, and the seconds devices spend in transfers (waits excluded).

    Devices run their streams until they reach a transfer whose peer has not posted it yet; they post it
    and yield. The peer that arrives completes the pair for both (start = the later arrival) and wakes the
    poster. Every instruction is touched once."""
    D = len(streams)
    start = [0.0] * n_ops
    end = [0.0] * n_ops
    ptr = [0] * D
    free = [0.0] * D
    posted: dict = {}
    comm = 0.0
    stack = list(range(D - 1, -1, -1))
    while stack:
        d = stack.pop()
        ins = streams[d]
        i, t, n = ptr[d], free[d], len(ins)
        while i < n:
            kind, arg, sec = ins[i]
            if kind == _COMP:
                start[arg] = t
                t += dur[arg]
                end[arg] = t
                i += 1
                continue
            peer = posted.pop(arg, None)
            if peer is None:
                posted[arg] = (d, t)
                break
            od, ot = peer
            t = (t if t > ot else ot) + sec
            comm += 2 * sec
            free[od] = t
            ptr[od] += 1
            stack.append(od)
            i += 1
        ptr[d], free[d] = i, t
    left = [d for d in range(D) if ptr[d] < len(streams[d])]
    if left:
        raise DeadlockError(f"deadlock in DeepSpeed's schedule: devices {left[:8]} wait for a peer")
    return start, end, comm


def timeline(g: Graph, p: int, m: int, dur: list, lat_f: np.ndarray, lat_b: np.ndarray) -> tuple[list, list]:
    """Start and end of every op of a 1F1B graph `g` run by DeepSpeed's engine (one pipeline's links)."""
    streams = instruction_streams(g, p, m, np.asarray(lat_f, float).tolist(), np.asarray(lat_b, float).tolist())
    start, end, _ = run(streams, dur, len(dur))
    return start, end
