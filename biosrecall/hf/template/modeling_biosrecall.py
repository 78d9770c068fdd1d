"""Hugging Face modeling code for a looped transformer exported by biosrecall (`biosrecall export`).

This file is copied unchanged into every export and needs only torch and transformers, so the
model loads without biosrecall installed:

    from transformers import AutoModelForCausalLM, AutoTokenizer
    model = AutoModelForCausalLM.from_pretrained("exported", trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained("exported")
    ids = tokenizer("Lindsey Eoghan Murphy was born in", return_tensors="pt").input_ids
    logits = model(ids, num_steps=8).logits            # 8 iterations of the recurrent block
    model.generate(ids, num_steps=8, max_new_tokens=3, do_sample=False)

The model is a middle-loop transformer: embedding, prelude layers once, one recurrent block applied
`num_steps` times (Huginn's argument name; default `config.num_steps`), coda layers once, head:
e = prelude(embed(x)); (inject, s_0) = recipe.begin(e); s_i = recipe.step(s_{i-1}, inject, block);
logits = head(final_norm(coda(state_norm(s_K)))). What an iteration computes is the run's recipe
(`config.recipe`), whose file ships beside this one as `recipe.py` (with `recipe_base.py`, the base it
builds on): the same code biosrecall runs, so the round trip is exact. The rest of the arithmetic is
biosrecall's, operation for operation (`biosrecall.model.looped` and `layers`), so logits equal
biosrecall's forward.

Padding. Without an attention mask, or with one that only pads on the right, the computation is
exactly biosrecall's (causal attention never lets a real token see a later pad). A mask with zeros
before real tokens (left padding, as batched `generate` uses) gives each real token its position
among the real tokens of its row (for RoPE, learned positions and the noise initial state) and hides
the pad keys; that path uses an explicit attention mask, so it agrees to float rounding only.

No KV cache: `generate` recomputes the whole sequence for every new token (a looped model's cache
holds one entry per iteration and layer; correctness first). `use_cache` is accepted and ignored.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers.generation import GenerationMixin
from transformers.modeling_outputs import CausalLMOutputWithPast

try:  # in an exported folder: the run's recipe, shipped beside this file
    from .recipe import RECIPE
except ImportError:  # loaded by biosrecall itself, which sets RECIPE before building a model
    RECIPE = None

MODEL_TYPE = "biosrecall_looped"
# Every biosrecall model-config field this file implements, with its default here, and the values it
# implements of those with choices; the exporter refuses a config holding any other field or value
# rather than export a model this code gets wrong.
MODEL_FIELDS = {
    "vocab_size": 256,
    "d_model": 32,
    "n_heads": 2,
    "d_mlp": 64,
    "n_prelude": 1,
    "n_block": 1,
    "n_coda": 1,
    "context_length": 128,
    "position": "rope",
    "rope_base": 10000.0,
    "norm": "pre",
    "norm_eps": 1e-6,
    "mlp": "swiglu",
    "injection": "concat",
    "init_state": "zeros",
    "init_state_std": math.sqrt(2 / 5),
    "init_state_seed": 0,
    "tie_embeddings": True,
    "backprop_depth": None,
    "init_mean_depth": 8.5,
    "recipe": "baseline",
}
SUPPORTED_FIELDS = tuple(MODEL_FIELDS)
SUPPORTED_CHOICES = {
    "position": ("rope", "learned"),
    "norm": ("pre", "sandwich"),
    "mlp": ("swiglu", "gelu"),
    "injection": ("concat", "add", "none"),
    "init_state": ("zeros", "noise"),
}


class BiosrecallLoopedConfig(PretrainedConfig):
    """The biosrecall `ModelConfig` fields under the same names (`MODEL_FIELDS`), plus `num_steps` (the
    default depth) and `biosrecall` (where the weights came from: run, checkpoint, schedule, budget,
    data)."""

    model_type = MODEL_TYPE
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "n_heads",
        "intermediate_size": "d_mlp",
        "max_position_embeddings": "context_length",
    }

    def __init__(self, num_steps: int = 8, biosrecall: dict | None = None, **kwargs) -> None:
        for name, default in MODEL_FIELDS.items():
            setattr(self, name, kwargs.pop(name, default))
        self.num_steps, self.biosrecall = num_steps, biosrecall or {}
        for name, choices in SUPPORTED_CHOICES.items():
            if getattr(self, name) not in choices:
                raise ValueError(f"{name} must be one of {', '.join(choices)}, got {getattr(self, name)!r}")
        # The head reads the embedding matrix directly when tied, so there is nothing for transformers
        # to tie (and no second tensor to keep in sync).
        kwargs["tie_word_embeddings"] = False
        for key, default in (("pad_token_id", 0), ("bos_token_id", 1), ("eos_token_id", 1)):
            kwargs.setdefault(key, default)
        super().__init__(**kwargs)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


def rope_table(config: BiosrecallLoopedConfig) -> torch.Tensor:
    """fp32 [context_length, head_dim / 2, 2]: (cos, sin) of t * theta_j, computed in fp64."""
    half = config.head_dim // 2
    inv_freq = 1.0 / (config.rope_base ** (torch.arange(half, dtype=torch.float64) / half))
    angles = torch.outer(torch.arange(config.context_length, dtype=torch.float64), inv_freq)
    return torch.stack((angles.cos().float(), angles.sin().float()), dim=-1)


def apply_rope(x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
    """Rotate adjacent channel pairs of x [B, T, n, H, hd] in fp32; rope is [T, hd/2, 2] (one position
    per column) or [B, T, hd/2, 2] (per row, for left-padded batches)."""
    pairs = x.float().unflatten(-1, (-1, 2))
    rotation = torch.view_as_complex(rope)
    rotation = rotation[:, None, None] if rope.dim() == 3 else rotation[:, :, None, None]
    return torch.view_as_real(torch.view_as_complex(pairs) * rotation).flatten(-2).to(x.dtype)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, self.weight.shape, self.weight.to(x.dtype), self.eps)


class Attention(nn.Module):
    """Causal self-attention with a fused, bias-free QKV projection and optional RoPE."""

    def __init__(self, config: BiosrecallLoopedConfig) -> None:
        super().__init__()
        self.n_heads, self.head_dim = config.n_heads, config.head_dim
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model, bias=False)
        self.proj = nn.Linear(config.d_model, config.d_model, bias=False)
        self.proj.is_residual_output = True

    def forward(self, x: torch.Tensor, rope: torch.Tensor | None, mask: torch.Tensor | None) -> torch.Tensor:
        batch, seq, width = x.shape
        qkv = self.qkv(x).view(batch, seq, 3, self.n_heads, self.head_dim)
        qk, v = qkv[:, :, :2], qkv[:, :, 2]
        if rope is not None:
            qk = apply_rope(qk, rope)
        q, k = qk.unbind(dim=2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if mask is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.proj(y.transpose(1, 2).reshape(batch, seq, width))


class MLP(nn.Module):
    """SwiGLU (one fused gate-and-up matrix) or tanh-GELU, bias-free."""

    def __init__(self, config: BiosrecallLoopedConfig) -> None:
        super().__init__()
        self.gated = config.mlp == "swiglu"
        hidden = 2 * config.d_mlp if self.gated else config.d_mlp
        self.w_in = nn.Linear(config.d_model, hidden, bias=False)
        self.w_out = nn.Linear(config.d_mlp, config.d_model, bias=False)
        self.w_out.is_residual_output = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.w_in(x)
        if self.gated:
            gate, up = h.chunk(2, dim=-1)
            return self.w_out(F.silu(gate) * up)
        return self.w_out(F.gelu(h, approximate="tanh"))


class LoopedLayer(nn.Module):
    """`pre`: x + attn(n1(x)), then + mlp(n2(x)); `sandwich`: n2(x + attn(n1(x))), n4(x + mlp(n3(x)))."""

    def __init__(self, config: BiosrecallLoopedConfig) -> None:
        super().__init__()
        self.sandwich = config.norm == "sandwich"
        self.attn = Attention(config)
        self.mlp = MLP(config)
        count = 4 if self.sandwich else 2
        self.norms = nn.ModuleList(RMSNorm(config.d_model, config.norm_eps) for _ in range(count))

    def forward(self, x: torch.Tensor, rope: torch.Tensor | None, mask: torch.Tensor | None) -> torch.Tensor:
        n = self.norms
        attended = self.attn(n[0](x), rope, mask)
        if self.sandwich:
            x = n[1](x + attended)
            return n[3](x + self.mlp(n[2](x)))
        x = x + attended
        return x + self.mlp(n[1](x))


class BiosrecallLoopedForCausalLM(PreTrainedModel, GenerationMixin):
    """A looped transformer whose depth is `num_steps`, chosen per call (see the module docstring)."""

    config_class = BiosrecallLoopedConfig
    base_model_prefix = "looped"
    main_input_name = "input_ids"
    _no_split_modules = ["LoopedLayer"]
    supports_gradient_checkpointing = False

    def __init__(self, config: BiosrecallLoopedConfig) -> None:
        super().__init__(config)
        d = config.d_model
        self.embed = nn.Embedding(config.vocab_size, d)
        self.pos_embed = nn.Embedding(config.context_length, d) if config.position == "learned" else None
        self.prelude = nn.ModuleList(LoopedLayer(config) for _ in range(config.n_prelude))
        if RECIPE is None or RECIPE.name != config.recipe:
            found = "none" if RECIPE is None else RECIPE.name
            raise ValueError(f"config.json names recipe {config.recipe!r} but recipe.py holds {found!r}")
        self.recipe = RECIPE
        self.recipe.build(self, config)
        self.block = nn.ModuleList(LoopedLayer(config) for _ in range(config.n_block))
        self.coda = nn.ModuleList(LoopedLayer(config) for _ in range(config.n_coda))
        self.state_norm = RMSNorm(d, config.norm_eps)
        self.final_norm = RMSNorm(d, config.norm_eps)
        self.head = None if config.tie_embeddings else nn.Linear(d, config.vocab_size, bias=False)
        # Plain dicts, not buffers: computed on first use, so loading on the meta device cannot lose them.
        self._rope_tables: dict = {}
        self._noise: dict = {}
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        """biosrecall's initialisation: normal(std sqrt(2 / (5 fan_in))), residual output projections
        further scaled by 1 / sqrt(2 x effective depth); norms at one."""
        cfg = self.config
        effective_depth = cfg.n_prelude + cfg.n_coda + cfg.n_block * cfg.init_mean_depth
        if isinstance(module, nn.Linear):
            std = math.sqrt(2.0 / (5.0 * module.in_features))
            if getattr(module, "is_residual_output", False):
                std /= math.sqrt(2.0 * effective_depth)
            nn.init.normal_(module.weight, std=std)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=math.sqrt(2.0 / (5.0 * cfg.d_model)))
        elif isinstance(module, RMSNorm):
            nn.init.ones_(module.weight)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed = value

    def get_output_embeddings(self):
        return self.head

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        num_steps: int | None = None,
        labels: torch.LongTensor | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        """Logits [B, T, V] after `num_steps` block iterations (default `config.num_steps`); with
        `labels`, also the mean next-token cross-entropy (labels equal to -100 carry no loss)."""
        depth = self._depth(num_steps)
        positions, mask = self._layout(input_ids, attention_mask)
        rope = self._rope(input_ids.shape[1], positions, input_ids.device)
        x = self.embed(input_ids)
        if self.pos_embed is not None:
            x = x + (
                self.pos_embed.weight[: input_ids.shape[1]]
                if positions is None
                else self.pos_embed(positions)
            )
        for layer in self.prelude:
            x = layer(x, rope, mask)
        inject, state = self._begin_state(x, positions)
        keep, done = self.config.backprop_depth, 0
        if keep is not None and depth > keep and torch.is_grad_enabled():
            with torch.no_grad():
                state = self._iterate(state, inject, 0, depth - keep, depth, rope, mask)
            done = depth - keep
        state = self._iterate(state, inject, done, depth, depth, rope, mask)
        logits = self._readout(state, rope, mask)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(
                logits[:, :-1].flatten(0, 1).float(),
                labels[:, 1:].flatten().to(logits.device),
                ignore_index=-100,
            )
        return CausalLMOutputWithPast(loss=loss, logits=logits)

    def _depth(self, num_steps) -> int:
        depth = self.config.num_steps if num_steps is None else num_steps
        if isinstance(depth, torch.Tensor):
            depth = int(depth)
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError(f"num_steps must be an integer >= 1, got {depth!r}")
        return depth

    def _layout(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None):
        """(positions, attention mask): both None when the plain causal computation is exact (no mask,
        or padding only after the real tokens), else per-row positions [B, T] and a bool [B, 1, T, T]."""
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be [batch, seq], got shape {tuple(input_ids.shape)}")
        if not 1 <= input_ids.shape[1] <= self.config.context_length:
            raise ValueError(
                f"sequence length {input_ids.shape[1]} is outside 1..{self.config.context_length} (context_length)"
            )
        if attention_mask is None:
            return None, None
        real = attention_mask.to(device=input_ids.device).bool()
        if bool((real[:, 1:] <= real[:, :-1]).all()):  # every row: real tokens, then only padding
            return None, None
        positions = (real.long().cumsum(dim=-1) - 1).clamp(min=0)
        seq = input_ids.shape[1]
        causal = torch.ones(seq, seq, dtype=torch.bool, device=input_ids.device).tril()
        # A pad query sees itself, so no row of the mask is empty (an empty row would give NaN).
        mask = (causal & real[:, None, :]) | torch.eye(seq, dtype=torch.bool, device=input_ids.device)
        return positions, mask[:, None]

    def _rope(self, seq: int, positions: torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
        if self.config.position != "rope":
            return None
        if device not in self._rope_tables:
            self._rope_tables[device] = rope_table(self.config).to(device)
        table = self._rope_tables[device]
        return table[:seq] if positions is None else table[positions]

    def _initial_noise(self, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """[context_length, d]: drawn once on the CPU from init_state_seed, whatever the device."""
        key = (device, dtype)
        if key not in self._noise:
            generator = torch.Generator().manual_seed(self.config.init_state_seed)
            shape = (self.config.context_length, self.config.d_model)
            noise = torch.randn(shape, generator=generator) * self.config.init_state_std
            self._noise[key] = noise.to(device=device, dtype=dtype)
        return self._noise[key]

    def _begin_state(self, x: torch.Tensor, positions: torch.Tensor | None):
        """(injected term, s_0) from the prelude output x [B, T, d], as the recipe begins."""
        noise = None
        if self.config.init_state == "noise":
            table = self._initial_noise(x.device, x.dtype)
            noise = table[: x.shape[1]] if positions is None else table[positions]
        return self.recipe.begin(self, x, noise)

    def _iterate(self, state, inject, done: int, last: int, depth: int, rope, mask) -> torch.Tensor:
        """Iterations done + 1 .. last of a call of total depth `depth`, each the recipe's step."""

        def block(x: torch.Tensor) -> torch.Tensor:
            for layer in self.block:
                x = layer(x, rope, mask)
            return x

        for index in range(done + 1, last + 1):
            state = self.recipe.step(self, state, inject, block, index, depth)
        return state

    def _readout(self, state: torch.Tensor, rope, mask) -> torch.Tensor:
        x = self.state_norm(state)
        for layer in self.coda:
            x = layer(x, rope, mask)
        x = self.final_norm(x)
        weight = self.embed.weight if self.head is None else self.head.weight
        return F.linear(x, weight)

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, num_steps=None, **kwargs):
        """The whole sequence at every step (there is no cache), with the depth passed through."""
        return {"input_ids": input_ids, "attention_mask": attention_mask, "num_steps": num_steps}
