"""Megatron-Core's 1F1B as its p2p calls run it: every call waits for its transfers (lock step between neighbours).

Megatron-Core's non-interleaved schedule (NVIDIA/Megatron-LM @ d98e8a64,
megatron/core/pipeline_parallel/schedules.py `forward_backward_pipelining_without_interleaving`) runs, on a stage
with w = min(p - s - 1, m) warm-up micro-batches and r = m - w remaining:

  warm-up, w times:  recv_forward, F, send_forward
  then:              recv_forward (if r > 0)
  steady, r times:   F, send_forward_recv_backward, (R) B, send_backward_recv_forward (the last: send_backward)
  cool-down, w times: recv_backward, (R) B, send_backward

Each call is `_communicate` (p2p_communication.py) with `wait_on_reqs=True` (arguments.py forces overlap_p2p_comm
off for this schedule) and, by default, batched isend / irecv followed by `torch.cuda.synchronize()`
(ModelParallelConfig batch_p2p_comm = batch_p2p_sync = True). An NCCL send does not complete before the peer's
matching receive runs (NCCL's ncclSend: "blocking for the GPU"), so a call returns when every transfer in it has met
its peer and finished: a transfer starts when both sides have posted it and lasts its one-way time; the two
directions of one batched call run at once. The first stage's receives from, and the last stage's sends to, a
neighbour it lacks are no-ops, as in the code (`is_pp_first_stage` / `is_pp_last_stage`).

The asynchronous model (engine.run) lets a send overlap the sender's next op; this one holds the sender until the
receiver posts, which is what makes a slow stage's neighbours wait. Not modelled: host launch gaps after the
synchronise, the shape exchange of variable sequence lengths, and the tensor-group gather of scatter-gather p2p
(priced in the transfer time by the costs).
"""
from __future__ import annotations

import numpy as np

from planner.simulator.engine import DeadlockError, Graph
from planner.simulator.ops import B, F, R

_COMP, _CALL = 0, 1


def _act(m: int, stage: int, k: int) -> int:
    """Message key of micro-batch k's activation into `stage` (sender and receiver use the same key)."""
    return 2 * (m * stage + k)


def _grad(m: int, stage: int, k: int) -> int:
    """Message key of micro-batch k's output gradient into `stage` (from stage + 1)."""
    return 2 * (m * stage + k) + 1


def call_streams(g: Graph, p: int, m: int, lat_f: list, lat_b: list) -> list[list[tuple]]:
    """Per device: [(_COMP, op index) | (_CALL, ((key, seconds), ...))] in Megatron-Core's 1F1B order.

    lat_f[s]: one-way time of the activation into stage s (from s - 1); lat_b[s]: of the gradient into s (from
    s + 1). Raises ValueError when g's device lists are not 1F1B's (one chunk per device, F / (R) B order)."""
    kinds, mbs = g.kind.tolist(), g.mb.tolist()
    offs = g.offs.tolist()
    return [_stage_stream(s, p, m, kinds, mbs, offs[s], offs[s + 1], lat_f, lat_b) for s in range(p)]


def _stage_stream(s: int, p: int, m: int, kinds: list, mbs: list, lo: int, hi: int, lat_f: list,
                  lat_b: list) -> list[tuple]:
    first, last = s == 0, s == p - 1
    ins: list = []
    i = lo

    def call(*transfers):
        t = tuple(x for x in transfers if x is not None)
        if t:
            ins.append((_CALL, t))

    def recv_fwd(k):
        return None if first else (_act(m, s, k), lat_f[s])

    def send_fwd(k):
        return None if last else (_act(m, s + 1, k), lat_f[s + 1])

    def recv_bwd(k):
        return None if last else (_grad(m, s, k), lat_b[s])

    def send_bwd(k):
        return None if first else (_grad(m, s - 1, k), lat_b[s - 1])

    def comp(forward, k):
        nonlocal i
        want = (F,) if forward else ((R, B) if i < hi and kinds[i] == R else (B,))
        for kind in want:
            if i >= hi or kinds[i] != kind or mbs[i] != k:
                raise ValueError(f"device {s}: op list does not follow Megatron-Core's 1F1B")
            ins.append((_COMP, i))
            i += 1

    w = min(p - s - 1, m)
    r = m - w
    for k in range(w):
        call(recv_fwd(k))
        comp(True, k)
        call(send_fwd(k))
    if r > 0:
        call(recv_fwd(w))
    for j in range(r):
        comp(True, w + j)
        call(send_fwd(w + j), recv_bwd(j))
        comp(False, j)
        if j == r - 1:
            call(send_bwd(j))
        else:
            call(send_bwd(j), recv_fwd(w + j + 1))
    for j in range(r, m):
        call(recv_bwd(j))
        comp(False, j)
        call(send_bwd(j))
    if i != hi:
        raise ValueError(f"device {s}: {hi - i} ops outside Megatron-Core's 1F1B")
    return ins


def run(streams: list[list[tuple]], dur: list, n_ops: int, lat: list) -> tuple[list, list]:
    """Start and end of every compute op. A device runs its stream until a call with a transfer whose peer has
    not posted it; the peer that posts it later times the transfer (start = the later post) and, when that was
    the call's last open transfer, wakes the waiting device at the call's end (its slowest transfer). The streams'
    transfers carry slots into `lat` (call_skeleton), so one build serves every pipeline's links."""
    D = len(streams)
    start = [0.0] * n_ops
    end = [0.0] * n_ops
    ptr = [0] * D
    free = [0.0] * D
    posted: dict = {}                 # key -> (device, post time)
    blocked = [False] * D             # waiting in a call (ptr at it) ...
    open_ = [0] * D                   # ... for this many of its transfers
    done = [0.0] * D                  # ... whose timed ones end by then
    stack = list(range(D - 1, -1, -1))
    while stack:
        d = stack.pop()
        ins = streams[d]
        i, t, n = ptr[d], free[d], len(ins)
        if blocked[d]:                # woken: the call ends with its slowest transfer
            blocked[d] = False
            t = done[d] if done[d] > t else t
            i += 1
        while i < n:
            kind, arg = ins[i]
            if kind == _COMP:
                start[arg] = t
                t += dur[arg]
                end[arg] = t
                i += 1
                continue
            waiting = 0
            fin = t
            for key, sec in arg:
                peer = posted.pop(key, None)
                if peer is None:
                    posted[key] = (d, t)
                    waiting += 1
                    continue
                od, ot = peer
                e = (t if t > ot else ot) + lat[sec]
                if e > fin:
                    fin = e
                if e > done[od]:
                    done[od] = e
                open_[od] -= 1
                if open_[od] == 0:
                    stack.append(od)
            if waiting:
                blocked[d], open_[d], done[d] = True, waiting, fin
                break
            t = fin
            i += 1
        ptr[d], free[d] = i, t
    left = [d for d in range(D) if ptr[d] < len(streams[d])]
    if left:
        raise DeadlockError(f"deadlock in Megatron-Core's 1F1B: devices {left[:8]} wait for a peer")
    return start, end


def call_skeleton(g: Graph, p: int, m: int) -> list[list[tuple]]:
    """call_streams with each transfer's seconds replaced by its slot: lat_f[s] is slot s, lat_b[s] slot p + s (the
    replay times each of a plan's pipelines on the one build: timeline's `skeleton`)."""
    return call_streams(g, p, m, list(range(p)), [p + s for s in range(p)])


def timeline(g: Graph, p: int, m: int, dur: list, lat_f: np.ndarray, lat_b: np.ndarray,
             skeleton: list | None = None) -> tuple[list, list]:
    """Start and end of every op of a 1F1B graph `g` run by Megatron-Core's waited p2p calls (one pipeline's
    links); `skeleton`: call_skeleton(g, p, m), built once for several pipelines."""
    skeleton = call_skeleton(g, p, m) if skeleton is None else skeleton
    lat = np.asarray(lat_f, float).tolist() + np.asarray(lat_b, float).tolist()
    return run(skeleton, dur, len(dur), lat)
