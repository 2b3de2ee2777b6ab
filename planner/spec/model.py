"""Model architecture spec: the shapes that set FLOPs, parameters and activations."""
from __future__ import annotations

import math
from dataclasses import dataclass

from planner.errors import SpecError
from planner.spec.fields import DEFAULT, FieldError, Fields

FAMILIES = ("gpt", "llama")


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """A decoder-only transformer; the per-family defaults are resolved in `__post_init__`."""

    name: str
    """Label used in reports, case ids and file names."""
    family: str = "gpt"
    """gpt: learned position embeddings, GeLU MLP, LayerNorm, biases; llama: RoPE, SwiGLU, RMSNorm, GQA
    (one of FAMILIES)."""
    num_layers: int
    """Transformer blocks."""
    hidden_size: int
    """Model width h."""
    num_attention_heads: int
    """Query heads; must divide hidden_size."""
    num_kv_heads: int | None = None
    """Key/value heads (grouped-query attention); must divide num_attention_heads.
    None: num_attention_heads (plain multi-head attention)."""
    ffn_hidden_size: int | None = None
    """MLP inner width. None: 4h for gpt; Llama's 2/3 * 4h rounded up to a multiple of 256 for llama."""
    vocab_size: int
    """Embedding rows (and output-projection columns)."""
    tied_embeddings: bool | None = None
    """The output projection reuses the input embedding. None: true for gpt, false for llama."""
    max_position_embeddings: int = 2048
    """Rows of gpt's learned position embedding (counted in its parameters; llama's RoPE has none)."""

    def __post_init__(self):
        # per-family defaults (frozen: set once, here)
        if self.num_kv_heads is None:
            object.__setattr__(self, "num_kv_heads", self.num_attention_heads)
        if self.ffn_hidden_size is None:
            ffn = 4 * self.hidden_size if self.family == "gpt" else _llama_ffn(self.hidden_size)
            object.__setattr__(self, "ffn_hidden_size", ffn)
        if self.tied_embeddings is None:
            object.__setattr__(self, "tied_embeddings", self.family == "gpt")
        if self.num_layers < 1:
            raise FieldError("num_layers", "must be positive")
        if self.hidden_size % self.num_attention_heads:
            raise FieldError("num_attention_heads", f"hidden_size {self.hidden_size} is not divisible by "
                                                    f"{self.num_attention_heads} heads")
        if self.num_attention_heads % self.num_kv_heads:
            raise FieldError("num_kv_heads", f"num_attention_heads {self.num_attention_heads} is not divisible by "
                                             f"{self.num_kv_heads} kv heads")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def kv_channels(self) -> int:
        """Width of K (or V) projections: heads_kv * head_dim (== hidden for plain MHA)."""
        return self.num_kv_heads * self.head_dim

    @property
    def gated_mlp(self) -> bool:
        return self.family == "llama"

    # --- parameter counts (exact for Megatron-style GPT / Llama blocks) ---
    def layer_params(self) -> int:
        h, f, kv = self.hidden_size, self.ffn_hidden_size, self.kv_channels
        if self.family == "gpt":
            attn = h * (h + 2 * kv) + (h + 2 * kv) + h * h + h     # QKV + out, with biases
            mlp = 2 * h * f + f + h
            norms = 4 * h                                         # two LayerNorms (weight + bias)
        else:
            attn = h * (h + 2 * kv) + h * h                       # no biases
            mlp = 3 * h * f                                       # SwiGLU: gate, up, down
            norms = 2 * h                                         # two RMSNorms
        return attn + mlp + norms

    def embedding_params(self) -> int:
        pos = self.max_position_embeddings * self.hidden_size if self.family == "gpt" else 0
        return self.vocab_size * self.hidden_size + pos

    def output_params(self) -> int:
        """Final norm + (untied) output projection; the last stage holds these."""
        norm = (2 if self.family == "gpt" else 1) * self.hidden_size
        return norm + (0 if self.tied_embeddings else self.vocab_size * self.hidden_size)

    def num_params(self) -> int:
        return self.num_layers * self.layer_params() + self.embedding_params() + self.output_params()

    # --- FLOPs per token (matmuls only; 2 FLOPs per multiply-add) ---
    def layer_forward_flops_per_token(self, seq_length: int, causal: bool = False) -> float:
        """causal False: the full s x s attention (QK^T and AV), as NeMo 24.07's model TFLOP/s count it (its
        llama3-70b rows in benchmarks/data/published_recipes.yaml: 481.6 GFLOP per token, this count's 481.4);
        True: half of it, the causal mask's work, as Megatron-Bridge 26.02's figures count it (449.1 per token)."""
        h, f, kv = self.hidden_size, self.ffn_hidden_size, self.kv_channels
        proj = 2 * h * (h + 2 * kv) + 2 * h * h
        mlp = 2 * h * f * (3 if self.gated_mlp else 2)
        attn = 2 * 2 * seq_length * h * (0.5 if causal else 1.0)  # QK^T and AV
        return float(proj + mlp + attn)

    def logits_forward_flops_per_token(self) -> float:
        return 2.0 * self.hidden_size * self.vocab_size

    def model_flops_per_token(self, seq_length: int, causal: bool = False) -> float:
        """Forward + backward (3x forward), no recompute: the FLOPs MFU is quoted against (the planner's `mfu`:
        causal False, the full attention; see layer_forward_flops_per_token)."""
        return 3.0 * (self.num_layers * self.layer_forward_flops_per_token(seq_length, causal)
                      + self.logits_forward_flops_per_token())

    def causal_mfu(self, seq_length: int, mfu: float) -> float:
        """The same run's MFU with the attention FLOPs counted causally (Megatron-Bridge 26.02) instead of in full
        (the planner's `mfu`, NeMo 24.07): the same time, fewer FLOPs."""
        return mfu * self.model_flops_per_token(seq_length, True) / self.model_flops_per_token(seq_length)


def parse_model(data, file: str | None, prefix: str = "") -> ModelSpec:
    f = Fields(data, file, prefix)
    kw = {
        "name": f.str("name"),
        "family": f.str("family", DEFAULT, choices=FAMILIES),
        "num_layers": f.int("num_layers"),
        "hidden_size": f.int("hidden_size"),
        "num_attention_heads": f.int("num_attention_heads"),
        "num_kv_heads": f.int("num_kv_heads", DEFAULT),
        "ffn_hidden_size": f.int("ffn_hidden_size", DEFAULT),
        "vocab_size": f.int("vocab_size"),
        "tied_embeddings": f.bool("tied_embeddings", DEFAULT),
        "max_position_embeddings": f.int("max_position_embeddings", DEFAULT),
    }
    f.raw("parameters_B", None)   # informational (published size), checked below when given
    f.raw("source", None)
    f.done()
    spec = f.build(ModelSpec, **kw)
    # parameters_B is not part of the model, only a check of the file's shapes against the stated size
    published = data.get("parameters_B")
    if published is not None:
        if (isinstance(published, bool) or not isinstance(published, (int, float)) or not math.isfinite(published)
                or published <= 0):       # NaN and infinity compared with nothing: read as a match
            raise SpecError(file, f.path("parameters_B"), f"must be a positive number, got {published!r}")
        got = spec.num_params() / 1e9
        if abs(got - published) / published > 0.1:
            raise SpecError(file, f.path("parameters_B"),
                            f"shapes give {got:.2f}B parameters, more than 10% from the stated {published}B")
    return spec


def _llama_ffn(hidden: int) -> int:
    # Llama's rule: 2/3 * 4h rounded up to a multiple of 256
    f = int(2 * 4 * hidden / 3)
    return 256 * ((f + 255) // 256)
