"""Load a Hugging Face causal LM folder (model and tokenizer) for scoring, offline, with one-line errors.

    loaded = load_hf_model("exported/ff", device="cpu")      # loaded.model, loaded.tokenizer
    loaded.provenance       # the `biosrecall` section of a biosrecall export's config.json, else None

Only local folders are read (`local_files_only`), so nothing is downloaded and an offline machine
never waits on the Hub; a name that is no folder but looks like a Hub model (`someone/thing`) is
refused at once, saying how to download it. A folder whose config
names its own modeling code (`auto_map`) runs that code only with `trust_remote_code=True`; the one
exception is a biosrecall export whose code files (modeling, layers, recipe) are byte-identical to the
ones this package ships for a built-in recipe, since that code is biosrecall's own.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from pathlib import Path

import torch

from biosrecall.errors import BiosrecallError, first_line
from biosrecall.files import read_json_object
from biosrecall.hf import quiet_transformers, require_transformers
from biosrecall.hf.export import shipped_code
from biosrecall.hub import check_model_folder
from biosrecall.model.config import DEFAULT_RECIPE, ModelConfig
from biosrecall.model.recipes import BUILT_IN, get_recipe
from biosrecall.numbers import check_depth

CONFIG_FILE = "config.json"


@dataclass(frozen=True)
class LoadedModel:
    """A causal LM ready for inference, its tokenizer, and where it came from."""

    model: object
    tokenizer: object
    path: Path
    model_type: str
    provenance: dict | None


EXPORT_MODEL_TYPE = "biosrecall_looped"


def is_biosrecall_export(folder: Path, config_json: dict) -> bool:
    """The folder (whose config.json holds `config_json`) is a biosrecall export whose code is exactly
    what this package ships for a built-in recipe."""
    name = config_json.get("recipe", DEFAULT_RECIPE)
    if config_json.get("model_type") != EXPORT_MODEL_TYPE or name not in BUILT_IN:
        return False
    shipped = shipped_code(get_recipe(name))
    return all(
        (folder / file).is_file() and (folder / file).read_bytes() == source.read_bytes()
        for file, source in shipped.items()
    )


def check_export_config(folder: Path, config_json: dict) -> None:
    """A biosrecall export's config.json holds a valid model config and a default depth (`num_steps`)
    within the depth bounds: a hand-edited `num_steps: -3` is refused here, in one line, rather than
    run (transformers itself checks neither)."""

    where = f"--hf-model {folder}: {CONFIG_FILE}"
    names = {field.name for field in dataclasses.fields(ModelConfig)}
    try:
        check_depth(config_json.get("num_steps"), "num_steps")
        ModelConfig.from_dict({key: value for key, value in config_json.items() if key in names})
    except (TypeError, ValueError) as exc:  # a BiosrecallError is a ValueError
        raise BiosrecallError(f"{where} is not a valid biosrecall export: {first_line(exc)}") from None


def _not_a_causal_lm(folder: Path, why: str) -> BiosrecallError:
    return BiosrecallError(f"--hf-model {folder} is not a Hugging Face causal language model folder ({why})")


def load_hf_model(
    model_dir: str | Path, device: torch.device, trust_remote_code: bool | None = None
) -> LoadedModel:
    """The model (in eval mode on `device`) and tokenizer of a local folder; see the module docstring."""
    transformers = require_transformers()
    folder = check_model_folder(model_dir)
    if not (folder / CONFIG_FILE).is_file():
        raise _not_a_causal_lm(folder, f"no {CONFIG_FILE}")
    config_json = read_json_object(folder / CONFIG_FILE, "--hf-model config")
    if config_json.get("model_type") == EXPORT_MODEL_TYPE:
        check_export_config(folder, config_json)
    trust = is_biosrecall_export(folder, config_json) if trust_remote_code is None else trust_remote_code
    if config_json.get("auto_map") and not trust:
        raise BiosrecallError(
            f"--hf-model {folder} defines its own modeling code (auto_map in {CONFIG_FILE}); pass "
            "--trust-remote-code to run it"
        )
    with quiet_transformers():
        return _load(transformers, folder, config_json, trust, device)


def _load(transformers, folder: Path, config_json: dict, trust: bool, device: torch.device) -> LoadedModel:
    options = {"trust_remote_code": trust, "local_files_only": True}
    try:
        config = transformers.AutoConfig.from_pretrained(folder, **options)
        if not _causal(config, config_json):
            raise ValueError(f"transformers has no causal language model for its {type(config).__name__}")
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, config=config, **options)
    except Exception as exc:  # transformers raises ValueError, OSError, KeyError... for a foreign folder
        raise _not_a_causal_lm(folder, first_line(exc)) from None
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, **options)
    except Exception as exc:
        raise BiosrecallError(
            f"--hf-model {folder} has no tokenizer AutoTokenizer can load ({first_line(exc)})"
        ) from None
    model.to(device)
    model.eval()
    provenance = (
        getattr(config, "biosrecall", None) if config_json.get("model_type") == EXPORT_MODEL_TYPE else None
    )
    return LoadedModel(model, tokenizer, folder, str(getattr(config, "model_type", "")), provenance or None)


def _causal(config, config_json: dict) -> bool:
    """transformers knows a causal LM for this config, or the folder's own code declares one."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    return type(config) in MODEL_FOR_CAUSAL_LM_MAPPING or "AutoModelForCausalLM" in (
        config_json.get("auto_map") or {}
    )


def check_depth_argument(loaded: LoadedModel, depth_arg: str) -> None:
    """Refuse a depth argument the model's forward does not name (a `**kwargs` catch-all could drop it
    silently, giving the same curve at every depth)."""
    parameters = inspect.signature(loaded.model.forward).parameters
    if depth_arg not in parameters or parameters[depth_arg].kind not in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    ):
        named = [name for name, p in parameters.items() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        raise BiosrecallError(
            f"--depth-arg {depth_arg}: the forward of {loaded.path} ({type(loaded.model).__name__}) takes "
            f"no argument of that name (it takes {', '.join(named)})"
        )
