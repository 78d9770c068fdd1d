"""Recipes from outside the package, and every way a recipe can be wrong, through the command line.

    pytest -q tests/test_recipe_outside.py

The worked example (examples/my_recipe.py) is trained on the tiny preset with --recipe-module,
scored and exported. Bad input is one `error:` line naming the recipe and the rule it broke, exit 2,
and nothing written: an unknown recipe; a module that fails to import, breaks the contract (wrong
shapes, NaN at K = 1) or takes a built-in's name; a run whose recipe is not installed when it is
resumed, scored or exported. An installed package's `biosrecall.recipes` entry point is found.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from hf_fixtures import one_error_line, run_cli

from biosrecall.cli import main
from biosrecall.model import recipes
from biosrecall.model.recipes import get_recipe

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "my_recipe.py"
BASE_IMPORT = "from biosrecall.model.recipes.base import Recipe, torch_modules\n"


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("outside") / "data"
    main(["generate", "--out", str(out), "--seed", "3", "--people", "20", "--pool-size", "employer=64"])
    return out


def train_args(data: Path, out: Path, *extra) -> list:
    return ["train", "--data", data, "--out", out, "--preset", "bios-tiny", "--batch-size", "4",
            "--schedule", "uniform:1-4", "--updates", "4", "--save-every", "2", "--quiet", *extra]  # fmt: skip


@pytest.fixture(scope="module")
def example_run(data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("outside-run") / "run"
    main([str(a) for a in train_args(data, out, "--recipe-module", EXAMPLE, "--recipe", "my-recipe")])
    return out


@pytest.fixture
def forget_outside(monkeypatch):
    """This process as a fresh one: no recipe registered from outside, no entry points."""
    monkeypatch.setattr(recipes, "_outside", {})
    monkeypatch.setattr(recipes, "_entry_points", lambda: [])


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_example_trains_scores_and_exports(example_run, tmp_path, capsys):
    config = (example_run / "config.json").read_text()
    assert '"recipe": "my-recipe"' in config
    code, _, err = run_cli(["recall-curve", example_run, "--checkpoint", "final", "--max-depth", "4",
                            "--out", tmp_path / "curve"], capsys)  # fmt: skip
    assert code == 0, err
    assert any((tmp_path / "curve").iterdir())
    code, _, err = run_cli(["export", example_run, "--out", tmp_path / "hf"], capsys)
    assert code == 0, err
    assert (tmp_path / "hf" / "recipe.py").read_bytes() == EXAMPLE.read_bytes()


def test_an_unknown_recipe_is_refused_before_anything_is_written(data, tmp_path, capsys):
    code, _, err = run_cli(train_args(data, tmp_path / "run", "--recipe", "no-such"), capsys)
    one_error_line(code, err, "recipe 'no-such' is not installed", "--recipe-module")
    assert not (tmp_path / "run").exists()
    code, _, err = run_cli(train_args(data, tmp_path / "run", "--recipe", "Bad_Name"), capsys)
    one_error_line(code, err, "Bad_Name", "lower-case letters")
    # a run's own model choice that its recipe cannot build: named with the recipe's rule
    code, _, err = run_cli(
        train_args(data, tmp_path / "run", "--recipe", "parcae", "--injection", "concat"), capsys
    )
    one_error_line(code, err, "recipe parcae: injection must be none")
    assert not (tmp_path / "run").exists()


def test_a_module_whose_recipe_the_run_does_not_name_is_refused(data, tmp_path, capsys):
    code, _, err = run_cli(train_args(data, tmp_path / "run", "--recipe-module", EXAMPLE), capsys)
    one_error_line(
        code, err, "defines recipe 'my-recipe' but the run asks for 'baseline'", "--recipe my-recipe"
    )
    assert not (tmp_path / "run").exists()


BAD_MODULES = {
    "syntax": ("this is not python\n", "fails to import"),
    "raises": ("raise RuntimeError('no GPU here')\n", "fails to import (RuntimeError: no GPU here)"),
    "no-recipe": ("VALUE = 1\n", "defines no RECIPE"),
    "clash": (
        BASE_IMPORT + "class Mine(Recipe):\n    name = 'parcae'\nRECIPE = Mine()\n",
        "recipe 'parcae': the name clashes with a built-in recipe",
    ),
    "shape": (
        BASE_IMPORT
        + textwrap.dedent("""
            class Mine(Recipe):
                name = "wrong-shape"
                def step(self, model, state, inject, block, index, depth):
                    return block(state)[..., :-1]
            RECIPE = Mine()
        """),
        "recipe wrong-shape breaks the recipe contract",
    ),
    "nan": (
        BASE_IMPORT
        + textwrap.dedent("""
            class Mine(Recipe):
                name = "makes-nan"
                def step(self, model, state, inject, block, index, depth):
                    return block(state) * float("nan")
            RECIPE = Mine()
        """),
        "recipe makes-nan breaks the recipe contract: non-finite (NaN or inf) logits at K=1",
    ),
    "told-k": (  # its iterations depend on K, but it does not say so: a depth sweep would read it wrong
        BASE_IMPORT
        + textwrap.dedent("""
            class Mine(Recipe):
                name = "told-k"
                def step(self, model, state, inject, block, index, depth):
                    return super().step(model, state, inject, block, index, depth) + 1 / depth
            RECIPE = Mine()
        """),
        "recipe told-k breaks the recipe contract: depth 1 read from a 3-deep pass differs from a call "
        "of depth 1 (its iterations depend on the call's K); set prefix_consistent = False",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_MODULES))
def test_a_bad_recipe_module_is_one_line_and_nothing_written(case, data, tmp_path, capsys, forget_outside):
    source, needle = BAD_MODULES[case]
    module = tmp_path / f"bad_{case.replace('-', '_')}.py"
    module.write_text(source)
    code, _, err = run_cli(
        train_args(data, tmp_path / "run", "--recipe-module", module, "--recipe", "mine"), capsys
    )
    one_error_line(code, err, needle)
    assert not (tmp_path / "run").exists()


def test_a_run_whose_recipe_is_not_installed_is_refused_untouched(data, tmp_path, capsys, forget_outside):
    """The run records its --recipe-module file, which another process registers while it is there;
    once it is gone, and no package provides the recipe, the run is refused untouched."""
    module = tmp_path / "gone_recipe.py"
    module.write_bytes(EXAMPLE.read_bytes())
    example_run = tmp_path / "run"
    main([str(a) for a in train_args(data, example_run, "--recipe-module", module, "--recipe", "my-recipe")])
    recipes._outside.clear()  # this process as a fresh one
    module.unlink()
    before = snapshot(example_run)
    commands = {
        "resumed": train_args(data, example_run, "--recipe", "my-recipe", "--resume"),
        "scored": [
            "recall-curve",
            example_run,
            "--checkpoint",
            "final",
            "--max-depth",
            "2",
            "--refresh",
            "--out",
            tmp_path / "c",
        ],  # fmt: skip
        "exported": ["export", example_run, "--out", tmp_path / "hf"],
    }
    for what, argv in commands.items():
        code, _, err = run_cli(argv, capsys)
        assert code == 2, (what, err)
        one_error_line(code, err, "recipe 'my-recipe' is not installed")
        assert snapshot(example_run) == before, what
    assert not (tmp_path / "c").exists() and not (tmp_path / "hf").exists()


def test_an_installed_entry_point_is_found(tmp_path, monkeypatch, forget_outside):
    monkeypatch.undo()  # entry points on: the fake distribution below is what they find
    monkeypatch.setattr(recipes, "_outside", {})
    package = tmp_path / "site"
    (package / "their_recipes").mkdir(parents=True)
    (package / "their_recipes" / "__init__.py").write_text(
        BASE_IMPORT + "class Theirs(Recipe):\n    name = 'theirs'\nRECIPE = Theirs()\n"
    )
    info = package / "their_recipes-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: their-recipes\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[biosrecall.recipes]\ntheirs = their_recipes\n")
    monkeypatch.syspath_prepend(str(package))
    assert get_recipe("theirs").name == "theirs"
    monkeypatch.delitem(sys.modules, "their_recipes", raising=False)


@pytest.mark.parametrize("name", recipes.recipe_names())
def test_every_built_in_recipe_meets_the_contract_outside_ones_are_held_to(name):
    """The contract check builds its tiny model with the recipe's model defaults (Parcae's needs
    injection none) and accepts every built-in, LoopFormer's told-K iterations included."""
    recipes.check_contract(get_recipe(name))
