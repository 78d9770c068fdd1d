"""Hugging Face modeling code for a looped transformer exported by biosrecall (`biosrecall export`).

This file is copied unchanged into every export, with biosrecall's `layers.py` beside it, and needs
only torch and transformers, so the model loads without biosrecall installed:

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
builds on): the same code biosrecall runs, so the round trip is exact. The layers are biosrecall's own
(`layers.py`, a copy of `biosrecall.model.layers`) and the rest of the arithmetic is
`biosrecall.model.looped`'s, operation for operation, so logits equal biosrecall's forward.

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

try:  # in an exported folder: biosrecall's layers and the run's recipe, shipped beside this file
    from .layers import RMSNorm, TransformerLayer, rope_tables
    from .recipe import RECIPE
except ImportError:  # loaded by biosrecall itself, which sets RECIPE before building a model
    from biosrecall.model.layers import RMSNorm, TransformerLayer, rope_tables

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


class BiosrecallLoopedForCausalLM(PreTrainedModel, GenerationMixin):
    """A looped transformer whose depth is `num_steps`, chosen per call (see the module docstring)."""

    config_class = BiosrecallLoopedConfig
    base_model_prefix = "looped"
    main_input_name = "input_ids"
    _no_split_modules = ["TransformerLayer"]
    supports_gradient_checkpointing = False

    def __init__(self, config: BiosrecallLoopedConfig) -> None:
        super().__init__(config)
        d = config.d_model
        self.embed = nn.Embedding(config.vocab_size, d)
        self.pos_embed = nn.Embedding(config.context_length, d) if config.position == "learned" else None
        self.prelude = nn.ModuleList(TransformerLayer(config) for _ in range(config.n_prelude))
        if RECIPE is None or RECIPE.name != config.recipe:
            found = "none" if RECIPE is None else RECIPE.name
            raise ValueError(f"config.json names recipe {config.recipe!r} but recipe.py holds {found!r}")
        self.recipe = RECIPE
        self.recipe.build(self, config)
        self.block = nn.ModuleList(TransformerLayer(config) for _ in range(config.n_block))
        self.coda = nn.ModuleList(TransformerLayer(config) for _ in range(config.n_coda))
        self.state_norm = RMSNorm(d, config.norm_eps)
        self.final_norm = RMSNorm(d, config.norm_eps)
        self.head = None if config.tie_embeddings else nn.Linear(d, config.vocab_size, bias=False)
        # Plain dicts, not buffers: computed on first use, so loading on the meta device cannot lose them.
        self._rope_tables: dict = {}
        self._noise: dict = {}
        self._residual_outputs = {
            module for name, module in self.named_modules() if name.endswith(("attn.proj", "mlp.w_out"))
        }
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        """biosrecall's initialisation: normal(std sqrt(2 / (5 fan_in))), residual output projections
        further scaled by 1 / sqrt(2 x effective depth); norms at one."""
        cfg = self.config
        effective_depth = cfg.n_prelude + cfg.n_coda + cfg.n_block * cfg.init_mean_depth
        if isinstance(module, nn.Linear):
            std = math.sqrt(2.0 / (5.0 * module.in_features))
            if module in self._residual_outputs:
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
            x = layer(x, rope, mask=mask)
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
            self._rope_tables[device] = torch.stack(rope_tables(self.config), dim=-1).to(device)
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
                x = layer(x, rope, mask=mask)
            return x

        for index in range(done + 1, last + 1):
            state = self.recipe.step(self, state, inject, block, index, depth)
        return state

    def _readout(self, state: torch.Tensor, rope, mask) -> torch.Tensor:
        x = self.state_norm(state)
        for layer in self.coda:
            x = layer(x, rope, mask=mask)
        x = self.final_norm(x)
        weight = self.embed.weight if self.head is None else self.head.weight
        return F.linear(x, weight)

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, num_steps=None, **kwargs):
        """The whole sequence at every step (there is no cache), with the depth passed through."""
        return {"input_ids": input_ids, "attention_mask": attention_mask, "num_steps": num_steps}
