"""One parallel configuration: what the search chooses (the mapping is separate)."""
from __future__ import annotations

from dataclasses import asdict, dataclass

SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1", "v-min", "v-half", "v-zb")
RECOMPUTE = ("none", "selective", "full")
ZERO_STAGES = (0, 1, 2)
V_SHAPES = ("v-min", "v-half", "v-zb")
# the software that runs the pipeline: Megatron-LM's schedules (batched send/recv pairs) or DeepSpeed's
# PipelineEngine (Megatron-DeepSpeed's GPTModelPipe: its own 1F1B, separate blocking sends and receives)
PIPELINE_ENGINES = ("megatron", "deepspeed")


@dataclass(frozen=True, order=True)
class ParallelConfig:
    """How one training step is split over the GPUs (the mapping onto nodes is separate).

    Unlike the spec dataclasses it stays positional: the search space and many tests build it compactly, and
    it sorts in field order (`order=True`). `from_dict` is the one parser of its serialised forms."""

    tp: int
    """Tensor-parallel degree (inside a node)."""
    pp: int
    """Pipeline stages."""
    dp: int
    """Data-parallel replicas."""
    micro_batch_size: int
    """Sequences per micro-batch."""
    num_microbatches: int
    """Micro-batches per step per replica (global batch = micro_batch_size * num_microbatches * dp)."""
    schedule: str = "1f1b"
    """Pipeline schedule, one of SCHEDULES."""
    vpp: int = 1
    """Model chunks per device (interleaved: v; V-shapes: 2; otherwise 1)."""
    recompute: str = "none"
    """Activation recomputation, one of RECOMPUTE."""
    zero: int = 0
    """ZeRO stage (ZERO_STAGES): 1 shards optimizer state, 2 also gradients, over dp."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism (norms and dropout split over tp)."""

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def global_batch_size(self) -> int:
        return self.micro_batch_size * self.num_microbatches * self.dp

    def layers_per_stage(self, num_layers: int) -> int:
        return num_layers // self.pp

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d, file: str | None = None, field: str = "config") -> ParallelConfig:
        """The one parser of a configuration: a solution's `config:`, a CSV row (strings), a dict.

        Bad input raises SpecError naming `file` and `field.<key>`."""
        from planner.errors import SpecError
        if not isinstance(d, dict):
            raise SpecError(file, field, "must be a mapping")
        try:
            cfg = cls(int(d["tp"]), int(d["pp"]), int(d["dp"]), int(d["micro_batch_size"]),
                      int(d["num_microbatches"]), str(d.get("schedule", "1f1b")), int(d.get("vpp", 1)),
                      str(d.get("recompute", "none")), int(d.get("zero", 0)),
                      _flag(d.get("sequence_parallel", False)))
        except KeyError as e:
            raise SpecError(file, f"{field}.{e.args[0]}", "is missing") from None
        except (TypeError, ValueError) as e:
            raise SpecError(file, field, f"has a bad value ({e})") from None
        if cfg.schedule not in SCHEDULES:
            raise SpecError(file, f"{field}.schedule", f"must be one of {list(SCHEDULES)}")
        if cfg.recompute not in RECOMPUTE:
            raise SpecError(file, f"{field}.recompute", f"must be one of {list(RECOMPUTE)}")
        return cfg

    def label(self) -> str:
        v = f" v{self.vpp}" if self.vpp > 1 else ""
        sp = " sp" if self.sequence_parallel else ""
        return (f"tp{self.tp} pp{self.pp} dp{self.dp} mbs{self.micro_batch_size} m{self.num_microbatches} "
                f"{self.schedule}{v} rc={self.recompute} z{self.zero}{sp}")


def _flag(v) -> bool:
    # CSV cells arrive as the strings "True" / "False"; YAML and JSON give real booleans
    return v == "True" if isinstance(v, str) else bool(v)
