"""What `planner profile network` is and takes, without the profiler's imports (numpy, torch), so that
building the command line stays light; planner.profile.network uses the same constants."""

DESCRIPTION = """Measure point-to-point bandwidth and latency between ranks with torch.distributed.

Launched like any distributed job (torchrun, srun, mpirun: rank and world come from the environment),
or with `--spawn N` as N local gloo processes on 127.0.0.1. Pairs are measured in rounds of a
round-robin tournament (a 1-factorization of the complete graph), so in every round each rank takes part
in at most one pair and no measured link is shared with another measurement of the same round.

Output: the node x node bandwidth matrix (GB/s = 1e9 B/s, [i, j] = i sends to j, at the largest message
size) in the cluster CSV format that `planner.spec.cluster.read_matrix` reads, plus a YAML sidecar with
the timestamp, host names, sizes, per-size matrices and the latency matrix.
"""
STATISTICS = ("median", "mean", "min", "max")
