"""The recipe registry: each looped-model recipe by name, built in or from outside the package.

    from biosrecall.model.recipes import get_recipe, load_recipe_module, recipe_names
    recipe_names()                        # the built-in names, baseline first
    get_recipe("parcae")                  # the Recipe object (`base.Recipe`)
    get_preset("bios-tiny", **recipe_overrides("parcae", {}))   # a model config of that recipe
    load_recipe_module("my_recipe.py")    # import a user's file, check it, register its RECIPE

A recipe is one file defining `RECIPE`, an instance of a `base.Recipe` subclass (see `base.py` for
the contract, `docs/guides/add-a-recipe.md` for a worked example). Three ways in:

- built in: the files of this folder, listed in `BUILT_IN`;
- an installed package's entry point in the group `biosrecall.recipes`, whose object is such a file
  (a module holding `RECIPE`) or the recipe itself;
- `train --recipe-module FILE` (`load_recipe_module`), registered for this process.

An outside recipe is checked before it is used: its name must be well formed and no built-in's, and a
tiny model built with it must give finite logits of the right shape at K = 1 and 2, and (unless it
sets `prefix_consistent = False`) the same logits at depths 1 and 2 of one deeper pass. Every refusal is
one `BiosrecallError` line naming the recipe and the rule it broke.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from biosrecall.errors import BiosrecallError, first_line
from biosrecall.model.recipes.base import Recipe, check_recipe_name

BUILT_IN = {
    "baseline": "baseline",
    "huginn": "huginn",
    "deep-supervision": "deep_supervision",
    "parcae": "parcae",
    "loopformer": "loopformer",
    "ouro-gate": "ouro_gate",
}
"""Built-in recipe names and their module in this folder."""
ENTRY_POINT_GROUP = "biosrecall.recipes"
DEFAULT = "baseline"

_outside: dict[str, Recipe] = {}
"""Recipes registered from outside the package in this process."""


def recipe_names() -> tuple[str, ...]:
    return tuple(BUILT_IN)


def recipe_file(recipe: Recipe) -> Path:
    """The one file that defines `recipe` (copied into an export as `recipe.py`)."""
    return Path(sys.modules[type(recipe).__module__].__file__)


def get_recipe(name: str) -> Recipe:
    """The recipe called `name`: built in, registered in this process, or an installed entry point."""
    if name in BUILT_IN:
        module = importlib.import_module(f"{__name__}.{BUILT_IN[name]}")
        return module.RECIPE
    if name in _outside:
        return _outside[name]
    for entry in _entry_points():
        if entry.name == name:
            try:
                loaded = entry.load()
            except Exception as exc:
                raise BiosrecallError(
                    f"recipe {name}: its entry point {entry.value} fails to import ({first_line(exc)})"
                ) from None
            return register(_recipe_of(loaded, f"entry point {entry.value}"), name)
    raise BiosrecallError(
        f"recipe {name!r} is not installed (built in: {', '.join(BUILT_IN)}; another comes from an "
        f"installed package's {ENTRY_POINT_GROUP} entry point or from --recipe-module FILE)"
    )


def recipe_overrides(name: str, overrides: dict) -> dict:
    """Model-config overrides for a model of recipe `name`: its `model_defaults`, then `overrides` (the
    run's own choices win), then the name. Baseline adds nothing, so its configs stay as they were."""
    if name == DEFAULT:
        return dict(overrides)
    return {**get_recipe(name).model_defaults, **overrides, "recipe": name}


def check_config(config) -> None:
    """Refuse, in one line naming the recipe and its rule, a model config its recipe cannot build."""
    problem = get_recipe(config.recipe).check(config)
    if problem is not None:
        raise BiosrecallError(f"recipe {config.recipe}: {problem}")


def load_recipe_module(path: str | Path) -> Recipe:
    """Import the file `path`, check the recipe it defines as `RECIPE`, and register it."""
    path = Path(path)
    label = f"recipe module {path}"
    if not path.is_file() or path.suffix != ".py":
        raise BiosrecallError(f"{label}: no such Python file")
    module_name = f"biosrecall_recipe_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # recipe_file() finds the file through the module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise BiosrecallError(f"{label}: fails to import ({type(exc).__name__}: {first_line(exc)})") from None
    recipe = _recipe_of(module, label)
    return register(recipe, recipe.name)


def register(recipe: Recipe, name: str) -> Recipe:
    """Check an outside recipe against the contract and make it available as `name`."""
    problem = check_recipe_name(name)
    if problem is None and name in BUILT_IN:
        problem = "the name clashes with a built-in recipe; choose another"
    if problem is None and recipe.name != name:
        problem = f"it calls itself {recipe.name!r}"
    if problem is not None:
        raise BiosrecallError(f"recipe {name!r}: {problem}")
    if _outside.get(name) is recipe:
        return recipe
    _outside[name] = recipe
    try:
        check_contract(recipe)
    except BaseException:
        del _outside[name]
        raise
    return recipe


def check_contract(recipe: Recipe) -> None:
    """Run a tiny model built with `recipe` at K = 1 and 2: logits [B, T, V], finite, and a finite
    training loss. The global random state is left as it was."""
    import torch

    from biosrecall.model.config import ModelConfig
    from biosrecall.model.looped import LoopedTransformer

    label = f"recipe {recipe.name} breaks the recipe contract"
    shape = dict(vocab_size=17, d_model=16, n_heads=2, d_mlp=32, n_prelude=1, n_block=1, n_coda=1)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            config = ModelConfig(**{**shape, **recipe.model_defaults}, context_length=16, recipe=recipe.name)
            model = LoopedTransformer(config)
            tokens = torch.randint(0, 17, (2, 8))
            for depth in (1, 2):
                logits = model(tokens, depth)
                if tuple(logits.shape) != (2, 8, 17):
                    raise BiosrecallError(
                        f"logits of shape {tuple(logits.shape)} at K={depth}, not (2, 8, 17)"
                    )
                if not bool(torch.isfinite(logits).all()):
                    raise BiosrecallError(f"non-finite (NaN or inf) logits at K={depth}")
            loss = model(tokens, 1, targets=tokens)
            if loss.dim() != 0 or not bool(torch.isfinite(loss)):
                raise BiosrecallError("the training loss at K=1 is not one finite number")
            if recipe.prefix_consistent:
                _check_prefix_consistent(model, tokens)
    except BiosrecallError as exc:
        raise BiosrecallError(f"{label}: {exc}") from None
    except Exception as exc:
        raise BiosrecallError(f"{label}: {type(exc).__name__}: {first_line(exc)}") from None


def _check_prefix_consistent(model, tokens) -> None:
    """A recipe that says its state after i iterations does not depend on the call's K is read at
    every depth from one pass (`forward_all_depths`); refuse it if depths 1 and 2 of a 3-deep pass
    differ from calls of depth 1 and 2. The weights are moved off their initialisation first, since a
    zero-initialised conditioning (LoopFormer's) hides the dependence."""
    import torch

    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param), alpha=0.1)
        swept = dict(model.forward_all_depths(tokens, (1, 2, 3)))
        for depth in (1, 2):
            if not torch.allclose(swept[depth], model(tokens, depth), rtol=1e-4, atol=1e-4):
                raise BiosrecallError(
                    f"depth {depth} read from a 3-deep pass differs from a call of depth {depth} (its "
                    "iterations depend on the call's K); set prefix_consistent = False"
                )


def _recipe_of(loaded, where: str) -> Recipe:
    """The Recipe a module (its RECIPE), class or instance stands for."""
    recipe = getattr(loaded, "RECIPE", loaded)
    if isinstance(recipe, type) and issubclass(recipe, Recipe):
        recipe = recipe()
    if not isinstance(recipe, Recipe):
        raise BiosrecallError(
            f"{where}: defines no RECIPE (an instance of biosrecall.model.recipes.base.Recipe)"
        )
    return recipe


def _entry_points():
    from importlib.metadata import entry_points

    return entry_points(group=ENTRY_POINT_GROUP)
