"""Published Megatron-LM memory figures the memory model is checked against.

Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models": Table 2 gives the
activation memory per transformer layer (bytes) for each technique; Table 3 the 22B / 175B / 530B / 1T
configurations (s = 2048, micro-batch 1, vocab 51200, t = 8). With 1F1B the first stage holds p micro-batches
of L/p layers, i.e. L layers' worth (their Section 4.2). Weights + gradients + optimizer state: Megatron-LM's
mixed-precision Adam holds 18 bytes per parameter (16-bit weights, fp32 main gradients, fp32 master weights and
two Adam moments), 6 + 12/d with the distributed optimizer (Megatron-LM distributed-optimizer documentation).

Narayanan et al. 2021 (SC21), Table 1: the weak-scaling runs on 80 GB A100s, with their t, p and GPU count.
"""
from __future__ import annotations

from dataclasses import dataclass

from planner.spec.model import ModelSpec

SEQ, VOCAB = 2048, 51200


@dataclass(frozen=True)
class Published:
    name: str
    heads: int
    hidden: int
    layers: int
    tp: int
    pp: int
    gpus: int
    batch: int

    def model(self) -> ModelSpec:
        return ModelSpec(name=self.name, family="gpt", num_layers=self.layers, hidden_size=self.hidden,
                         num_attention_heads=self.heads, num_kv_heads=self.heads, ffn_hidden_size=4 * self.hidden,
                         vocab_size=VOCAB, tied_embeddings=True, max_position_embeddings=SEQ)


# Korthikanti et al. 2022, Table 3
KORTHIKANTI = (Published("22B", 64, 6144, 48, 8, 1, 8, 4), Published("175B", 96, 12288, 96, 8, 8, 64, 64),
               Published("530B", 128, 20480, 105, 8, 35, 280, 280), Published("1T", 160, 25600, 128, 8, 64, 512, 512))

# Narayanan et al. 2021, Table 1 (weak scaling, 80 GB A100)
SC21 = (Published("1.7B", 24, 2304, 24, 1, 1, 32, 512), Published("3.6B", 32, 3072, 30, 2, 1, 64, 512),
        Published("7.5B", 32, 4096, 36, 4, 1, 128, 512), Published("18.4B", 48, 6144, 40, 8, 1, 256, 1024),
        Published("39.1B", 64, 8192, 48, 8, 2, 512, 1536), Published("76.1B", 80, 10240, 60, 8, 4, 1024, 1792),
        Published("145.6B", 96, 12288, 80, 8, 8, 1536, 2304), Published("310.1B", 128, 16384, 96, 8, 16, 1920, 2160),
        Published("529.6B", 128, 20480, 105, 8, 35, 2520, 2520),
        Published("1008.0B", 160, 25600, 128, 8, 64, 3072, 3072))


def korthikanti_layer_bytes(s: int, b: int, h: int, a: int, t: int, technique: str) -> float:
    """Table 2 of Korthikanti et al. 2022: activation bytes per layer."""
    return {"none": s * b * h * (10 + 24 / t + 5 * a * s / (h * t)),
            "sp": s * b * h / t * (34 + 5 * a * s / h),
            "selective": s * b * h * (10 + 24 / t),
            "sp+selective": s * b * h / t * 34,
            "full": 2 * s * b * h}[technique]


MEGATRON_BYTES_PER_PARAM = 18.0      # 2 (bf16 weight) + 4 (fp32 main grad) + 12 (fp32 master, Adam m and v)


# ----------------------------------------------------------------------------------------------------------
# Published figures (numbers printed in the sources, not formulas evaluated here), each with where it is printed.

SOURCES = {
    "megatron_dist_opt": "Megatron Core developer guide, 'Distributed Optimizer': theoretical bytes per parameter, "
                         "bf16 parameters + fp32 gradients: 18 (non-distributed), 6 + 12/d (distributed optimizer); "
                         "https://docs.nvidia.com/megatron-core/developer-guide/latest/api-guide/dist_optimizer.html",
    "korthikanti_abstract": "Korthikanti et al. 2022, abstract: sequence parallelism + selective activation "
                            "recomputation 'reduces activation memory by 5x' (arXiv 2205.05198; "
                            "https://huggingface.co/papers/2205.05198, MLSys 2023 proceedings page)",
    "korthikanti_sec4": "Korthikanti et al. 2022, Sec. 4.2.2 as quoted by the Ultra-Scale Playbook (seed 003: 'For "
                        "a GPT-3 (175B) model this means 70% activation memory reduction at a 2.7% compute cost') "
                        "and by public paper notes ('MT-NLG: 65% for 1.6%')",
    "korthikanti_table3": "Korthikanti et al. 2022, Table 3: model sizes 22B, 175B, 530B, 1T with their heads, hidden "
                          "size, layers, t, p and GPU count",
}


@dataclass(frozen=True)
class PublishedFigure:
    key: str            # what is compared
    model: str          # Table 3 model name
    value: float
    unit: str
    source: str         # key of SOURCES


PUBLISHED_PARAMS = {"22B": 22e9, "175B": 175e9, "530B": 530e9, "1T": 1e12}     # Table 3's names
BYTES_PER_PARAM_BF16_FP32 = 18.0          # non-distributed optimizer (megatron_dist_opt)


def bytes_per_param_distributed(d: int) -> float:
    """Distributed optimizer (ZeRO-1 over d data-parallel ranks), bf16 params + fp32 grads (megatron_dist_opt)."""
    return 6.0 + 12.0 / d


PUBLISHED_FIGURES = (
    PublishedFigure("selective_activation_saving", "175B", 0.70, "fraction", "korthikanti_sec4"),
    PublishedFigure("selective_activation_saving", "530B", 0.65, "fraction", "korthikanti_sec4"),
    PublishedFigure("sp_selective_reduction_vs_tp", "all", 5.0, "x (headline, rounded)", "korthikanti_abstract"),
)
