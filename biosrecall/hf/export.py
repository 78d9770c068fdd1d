"""Export one checkpoint of a bioS run as a Hugging Face model folder (`biosrecall export`).

    export_run("runs/ff", "exported/ff", checkpoint="final")           # num_steps: the run's mean depth
    export_run("runs/ff", "exported/ff-45", checkpoint=0.45, num_steps=8, overwrite=True)

The folder holds what `AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)` and
`AutoTokenizer.from_pretrained(DIR)` load, offline and without biosrecall installed:

    config.json                 biosrecall's model config fields, num_steps, auto_map, and a `biosrecall`
                                section naming the run, checkpoint, schedule, budget and dataset
    model.safetensors           the checkpoint's weights under biosrecall's parameter names
    modeling_biosrecall.py      the modeling code (a copy of this package's template, torch + transformers)
    layers.py                   the layers it builds on: a copy of `biosrecall/model/layers.py`
    recipe.py, recipe_base.py   the run's recipe (`config.json`'s `recipe`): a copy of its file, and of
                                `biosrecall/model/recipes/base.py` it builds on; what one iteration
                                computes, the same code biosrecall ran
    generation_config.json      <sep> as beginning and end of document, <pad> as padding, no cache
    tokenizer.json, tokenizer_config.json, ...   the dataset's word-level tokenizer as a
                                PreTrainedTokenizerFast that puts <sep> before every text, as training did
    README.md                   the model card (`card.py`)

Nothing is written unless the whole export succeeds: the checkpoint is chosen with the selector of
`biosrecall.train.run_folder` and loaded, its config is checked against what the modeling code implements, the
exported model's logits are compared with biosrecall's at depth 1 and at num_steps, and only then is
the folder built under a temporary name next to DIR and renamed into place. An existing non-empty
DIR is refused unless `overwrite` (then swapped, never half-replaced).

The default num_steps is the run's mean training depth (config.json's plan), rounded to the nearest
integer; a run that records none falls back to its model config's `init_mean_depth`, rounded.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer
from tokenizers.processors import TemplateProcessing

import biosrecall
from biosrecall.atomic import (
    OutputRecord,
    atomic_directory,
    check_output_dir,
    check_output_path,
    error_number,
    write_failed,
)
from biosrecall.bios import load_dataset
from biosrecall.bios.tokenizer import PAD_ID, PAD_TOKEN, SEP_ID, SEP_TOKEN, UNK_TOKEN
from biosrecall.errors import BiosrecallError
from biosrecall.hf import quiet_transformers, require_transformers
from biosrecall.hf.card import CardFacts, cached_recall, model_card
from biosrecall.hf.prompts import eval_texts
from biosrecall.locking import output_lock
from biosrecall.model import layers
from biosrecall.model.recipes import base as recipes_base
from biosrecall.model.recipes import recipe_file
from biosrecall.numbers import check_count
from biosrecall.train.checkpoint_files import load_checkpoint, read_meta
from biosrecall.train.run_folder import RunFolder, fraction_of

MODELING_FILE, LAYERS_FILE = "modeling_biosrecall.py", "layers.py"
RECIPE_FILE, RECIPE_BASE_FILE = "recipe.py", "recipe_base.py"
# A data folder, not a subpackage: the file imports transformers at its top, so it is kept out of the
# modules that a default install imports, and read with `modeling_module()` when exporting.
TEMPLATE = Path(__file__).with_name("template") / MODELING_FILE
CONFIG_CLASS, MODEL_CLASS = "BiosrecallLoopedConfig", "BiosrecallLoopedForCausalLM"
AUTO_MAP = {
    "AutoConfig": f"{Path(MODELING_FILE).stem}.{CONFIG_CLASS}",
    "AutoModelForCausalLM": f"{Path(MODELING_FILE).stem}.{MODEL_CLASS}",
}
VERIFY_TOLERANCE = 1e-5
VERIFY_TOKENS = 48


EXPORT_RECORD = OutputRecord("export", "config.json", "biosrecall")
"""What marks a folder as an export: its config.json carries the `biosrecall` section."""


def export_run(
    run_dir: str | Path,
    out_dir: str | Path,
    checkpoint="final",
    *,
    num_steps: int | None = None,
    data_dir: str | Path | None = None,
    overwrite: bool = False,
) -> Path:
    """Write the checkpoint `checkpoint` selects in `run_dir` as a Hugging Face folder `out_dir`."""
    require_transformers()
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    check_output_dir(out_dir, overwrite, EXPORT_RECORD)  # before the model loads
    folder = RunFolder(run_dir)
    label, path = folder.select_checkpoint(checkpoint)
    meta, record = read_meta(path), folder.read_config()
    task = (record.get("task") or {}).get("name", "bios")
    if task != "bios":
        raise BiosrecallError(f"{run_dir} is a {task} run; export handles bioS runs only")
    # the dataset the checkpoint was trained on (its tokenizer goes into the export), hash-checked
    data_path = folder.training_data(meta, data_dir)
    dataset = load_dataset(data_path)
    folder.check_training_data(meta, data_path, dataset.manifest_hash)
    model, _ = load_checkpoint(path)
    check_supported(model.config.to_dict())
    steps, steps_source = _num_steps(record, model.config, num_steps)
    provenance = _provenance(run_dir, label, meta, record, dataset, steps_source)
    check_output_path(out_dir, inputs=[run_dir, dataset.path])
    with output_lock(out_dir):
        check_output_dir(out_dir, overwrite, EXPORT_RECORD)  # a folder not exported here is never replaced
        hf_model = build_hf_model(model, steps, provenance)
        # person 0's evaluation rows check the logits, and the first gives the card its usage example
        person = dataset.eval_set(np.arange(1))
        verify_same_logits(model, hf_model, person.tokens, steps)
        texts = eval_texts(dataset, person)
        facts = CardFacts(
            provenance=provenance,
            record=record,
            parameters=model.num_parameters(),
            num_steps=steps,
            example_prompt=texts.prompts[0],
            example_answer=texts.answers[0],
        )
        recall, note = cached_recall(path, dataset.manifest_hash)
        with atomic_directory(out_dir, overwrite=overwrite) as tmp, quiet_transformers():
            _save_weights(hf_model, tmp)
            for name, source in shipped_code(model.recipe).items():
                shutil.copyfile(source, tmp / name)
            save_tokenizer(dataset.tokenizer, model.config.context_length, tmp)
            (tmp / "README.md").write_text(model_card(facts, recall, note), encoding="utf-8")
    return out_dir


def _save_weights(hf_model, folder: Path) -> None:
    """save_pretrained, whose safetensors error on a full disk names no file: name the weights file."""
    try:
        hf_model.save_pretrained(folder)
    except Exception as exc:
        if error_number(exc) is None:
            raise
        raise write_failed(folder / "model.safetensors", exc) from exc


def shipped_code(recipe) -> dict[str, Path]:
    """The code an export of a `recipe` model ships, byte for byte: {name in the folder: source}."""
    return {
        MODELING_FILE: TEMPLATE,
        LAYERS_FILE: Path(layers.__file__),
        RECIPE_FILE: recipe_file(recipe),
        RECIPE_BASE_FILE: Path(recipes_base.__file__),
    }


@functools.cache
def modeling_module():
    """The modeling file every export ships, imported from its template (this needs transformers)."""
    require_transformers()
    spec = importlib.util.spec_from_file_location("biosrecall_hf_modeling", TEMPLATE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # classes defined in it look their module up by name
    spec.loader.exec_module(module)
    return module


def check_supported(model_config: dict) -> None:
    """Refuse a model config with a field or value the exported modeling code does not implement."""
    modeling = modeling_module()
    for name, value in model_config.items():
        choices = modeling.SUPPORTED_CHOICES.get(name)
        if name not in modeling.MODEL_FIELDS or (choices is not None and value not in choices):
            implemented = "" if choices is None else f", which implements {', '.join(choices)}"
            raise BiosrecallError(
                f"cannot export: the model config field {name} = {value!r} is not implemented by the "
                f"exported modeling code ({MODELING_FILE}{implemented})"
            )


def _num_steps(record: dict, model_config, asked: int | None) -> tuple[int, str]:
    """The default depth and the sentence the card uses to explain it."""
    if asked is not None:
        return check_count(asked, "--num-steps"), "as chosen at export (--num-steps)"
    mean = (record.get("plan") or {}).get("mean_depth")
    if isinstance(mean, int | float) and not isinstance(mean, bool) and math.isfinite(mean) and mean > 0:
        return max(1, math.floor(mean + 0.5)), f"the run's mean training depth ({mean:.2f}), rounded"
    fallback = model_config.init_mean_depth
    return (
        max(1, math.floor(fallback + 0.5)),
        f"the model config's init_mean_depth ({fallback:g}), rounded (the run records no mean training depth)",
    )


def _provenance(run_dir: Path, label: str, meta: dict, record: dict, dataset, steps_source: str) -> dict:
    """The `biosrecall` section of config.json: where the weights came from (no machine paths)."""

    fraction = fraction_of(label)
    flops, budget = meta.get("flops"), meta.get("budget")
    if fraction is None and flops is not None and budget:
        fraction = float(flops) / float(budget)  # the switch checkpoint: the share of the budget spent
    return {
        "run": run_dir.resolve().name,
        "checkpoint": label,
        "fraction": fraction,
        "update": meta.get("update"),
        "flops": flops,
        "budget": budget,
        "schedule": meta.get("schedule") or (record.get("plan") or {}).get("schedule"),
        "task": record.get("task"),
        "dataset": {
            "manifest_hash": dataset.manifest_hash,
            **{key: dataset.manifest[key] for key in ("num_people", "seed", "total_bits", "chance_bits")},
        },
        "num_steps_source": steps_source,
        "biosrecall_version": biosrecall.__version__,
    }


def build_hf_model(model, num_steps: int, provenance: dict):
    """The Hugging Face model holding `model`'s weights (a copy), with `num_steps` as its default depth."""

    modeling = modeling_module()
    modeling.RECIPE = model.recipe  # what an export's `recipe.py` defines, here the object itself
    config = modeling.BiosrecallLoopedConfig(
        **model.config.to_dict(),
        num_steps=num_steps,
        biosrecall=provenance,
        pad_token_id=PAD_ID,
        bos_token_id=SEP_ID,
        eos_token_id=SEP_ID,
    )
    config.auto_map = dict(AUTO_MAP)
    config.architectures = [MODEL_CLASS]
    hf_model = modeling.BiosrecallLoopedForCausalLM(config)
    state = {name: tensor.detach().clone().contiguous() for name, tensor in model.state_dict().items()}
    hf_model.load_state_dict(state, strict=True)
    hf_model.generation_config.use_cache = False
    hf_model.eval()
    return hf_model


def verify_same_logits(model, hf_model, tokens, num_steps: int) -> None:
    """Refuse to export when the Hugging Face model's logits differ from biosrecall's on real bioS rows."""
    ids = torch.as_tensor(tokens[:, :VERIFY_TOKENS], dtype=torch.long)
    with torch.inference_mode():
        for depth in sorted({1, num_steps}):
            expected = model(ids, depth)
            found = hf_model(input_ids=ids, num_steps=depth).logits
            gap = float((expected - found).abs().max())
            if not gap <= VERIFY_TOLERANCE:
                raise BiosrecallError(
                    f"cannot export: the exported model's logits differ from biosrecall's by {gap:.3g} at "
                    f"K = {depth} (allowed {VERIFY_TOLERANCE:g}); nothing was written"
                )


def save_tokenizer(tokenizer, context_length: int, folder: Path) -> None:
    """The dataset tokenizer as a PreTrainedTokenizerFast that adds <sep> before every text."""
    from transformers import PreTrainedTokenizerFast

    wrapped = Tokenizer.from_str(tokenizer.to_str())
    wrapped.post_processor = TemplateProcessing(
        single=f"{SEP_TOKEN} $A", pair=f"{SEP_TOKEN} $A {SEP_TOKEN} $B", special_tokens=[(SEP_TOKEN, SEP_ID)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=wrapped,
        bos_token=SEP_TOKEN,
        eos_token=SEP_TOKEN,
        pad_token=PAD_TOKEN,
        unk_token=UNK_TOKEN,
        model_max_length=context_length,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    fast.save_pretrained(folder)
    # transformers 5 records its own class name; the classic name loads in transformers 4 and 5 alike.
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
