"""The options of `biosrecall recall-curve`: one dataclass, whose field docstrings are the command's --help.

    options = RecallCurveOptions(out_dir=Path("recall-curve"), max_depth=16, exits=("kl:1e-3,oracle",))
    score_and_write(["runs/fixed4", "runs/uniform"], "0.45,final", options)   # biosrecall.eval.recall_curve

The command (`biosrecall.cli.recall`) builds its options from these fields (`field_options`), with the
checked click types a field's annotation cannot say, so an option's name is its field's and a `--config`
key is either. It lives outside `biosrecall.eval`, whose package import loads torch and matplotlib, so
that `recall-curve --help` loads neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

METRICS = ("bits", "attribute")


@dataclass
class RecallCurveOptions:
    """What one `recall-curve` call asks for, by the names of its options."""

    out_dir: Path = Path("recall-curve")
    """Folder for the tables and the figure."""

    max_depth: int = 64
    """Evaluate serving depths 1..max-depth (runs, and a looped --hf-model)."""

    threshold: int = 4
    """A fact is recalled when this many of its templates are exact."""

    metric: str = "bits"
    """bits: recalled bits per person; attribute: share of facts recalled per attribute."""

    people: int | None = None
    """Score only the first N people (faster) [default: everyone]."""

    batch_size: int | None = None
    """Evaluation rows per forward pass [default: 256 for runs, 64 with --hf-model]."""

    device: str = "auto"
    """Where to score: "auto" (CUDA when present), "cpu" or "cuda"."""

    data_dir: Path | None = None
    """Dataset folder to use instead of the one recorded in the checkpoints (hash still checked); with
    --hf-model, the bioS dataset to score on (required)."""

    refresh: bool = False
    """Re-evaluate even when a cached result is current."""

    overwrite: bool = False
    """Replace an earlier recall-curve folder --out (swapped in whole once complete; a folder recall-curve
    did not write is refused)."""

    exits: tuple[str, ...] = ()
    """Exit criteria to score (repeatable or a comma list): fixed:K, kl:EPS, stable:M, entropy:H,
    latent:EPS, accel:EPS (no readout: the recurrent state's change), gate:DELTA (the learned gate of
    `biosrecall gate train`, recall lost <= DELTA), cdf:Q (the exit gate an ouro-gate run trained: stop
    where the exit CDF reaches Q), oracle; a bare name sweeps its thresholds. Capped at --max-depth."""

    per_token: bool = False
    """With --exit: also decide each criterion per answer token in the KV-cached decoder and compare its
    recall with whole-query exit at the same mean depth (exit_token_gap.*; slower)."""

    applicable_exits: bool = False
    """With --exit: score each checkpoint on the criteria its recipe can serve (cdf:Q needs a trained exit
    gate; latent, accel and gate:DELTA one trajectory over depths, not loopformer's pass per depth) and
    name each one left out, instead of refusing the call."""

    state_norms: bool = False
    """Also measure the recurrent state's RMS after each depth 1..--max-depth on 64 evaluation rows of
    each checkpoint, cached as checkpoints/<label>/state_norm.parquet (`biosrecall.eval.state_norms`)."""

    aggregate_seeds: bool = False
    """Runs sharing a folder name are seeds of one configuration (figure1's runs/seed*/NAME): report each
    group's mean, 95% t interval and seed count (recall_curve_seeds.*, summary.csv). Refused when a
    group's runs differ in more than the seed."""

    hf_model: Path | None = None
    """Score this Hugging Face causal LM folder on the --data dataset instead of runs."""

    depth_arg: str | None = None
    """With --hf-model: the forward argument that sets a looped model's depth, e.g. num_steps [default:
    num_steps for a biosrecall export, none (one depth) otherwise]."""

    depths: tuple[int, ...] | None = None
    """With --hf-model and a depth argument: depths to score, a comma list [default: 1..--max-depth, as
    for runs]."""

    trust_remote_code: bool = False
    """With --hf-model: run modeling code the folder ships (needed for most looped models; a biosrecall
    export's own code is trusted without it)."""
