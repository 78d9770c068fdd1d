"""Templates: the shipped files' shape, the eval/training relation, and validation errors on load."""

from __future__ import annotations

import re

import pytest

from biosrecall.bios import ATTRIBUTES, load_templates
from biosrecall.bios.templates import EVAL_TEMPLATES, MIN_TRAIN_TEMPLATES, eval_completion, render
from biosrecall.errors import BiosrecallError
from biosrecall.paths import TEMPLATES_DIR


@pytest.fixture(scope="module")
def templates():
    return load_templates()


def edited_templates(tmp_path, file: str, old: str, new: str):
    """A copy of the shipped templates folder with one exact text edit in `file`."""
    for name in ("train.toml", "eval.toml"):
        text = (TEMPLATES_DIR / name).read_text(encoding="utf-8")
        if name == file:
            assert old in text, f"{old!r} not in {name}"
            text = text.replace(old, new, 1)
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


def line_of(folder, file: str, needle: str) -> int:
    lines = (folder / file).read_text(encoding="utf-8").splitlines()
    return next(i + 1 for i, line in enumerate(lines) if needle in line)


def test_shipped_templates_have_the_required_counts(templates):
    for attribute in ATTRIBUTES:
        assert len(templates.train[attribute]) >= MIN_TRAIN_TEMPLATES
        assert len(templates.eval[attribute]) == EVAL_TEMPLATES


def test_eval_phrasings_are_trained_by_default_and_held_out_on_request(templates):
    default, holdout = templates.training(), templates.training(holdout_eval=True)
    for attribute in ATTRIBUTES:
        completions = {eval_completion(p) for p in templates.eval[attribute]}
        assert completions <= set(default[attribute])
        assert not completions & set(holdout[attribute])
        assert len(default[attribute]) == len(holdout[attribute]) + EVAL_TEMPLATES
        assert len(holdout[attribute]) >= MIN_TRAIN_TEMPLATES


def test_eval_prompts_end_where_the_answer_starts(templates):
    for prompts in templates.eval.values():
        for prompt in prompts:
            assert "{value}" not in prompt and prompt.count("{name}") == 1
            assert not prompt.endswith((" ", "."))
            assert render(eval_completion(prompt), "A B C", "X Y") == render(prompt, "A B C") + " X Y."


def test_eval_prompts_appear_in_training_only_as_their_own_completion(templates):
    sentences = [(a, t) for a, ts in templates.training().items() for t in ts]
    for attribute, prompts in templates.eval.items():
        for prompt in prompts:
            holders = [(a, t) for a, t in sentences if prompt + " " in t or t.startswith(prompt + " ")]
            assert holders == [(attribute, eval_completion(prompt))]


@pytest.mark.parametrize(
    ("file", "old", "new", "message", "needle"),
    [
        (
            "train.toml",
            '"{name} hails from {value}."',
            '"{name} hails from {city}."',
            "unknown placeholder {city}",
            "hails from",
        ),
        (
            "train.toml",
            '"{name} hails from {value}."',
            '"{name} hails from here."',
            r"must contain \{value\} 1 time",
            "hails from",
        ),
        (
            "train.toml",
            '"{name} hails from {value}."',
            '"{name} comes from {value}."',
            "duplicate template",
            "comes from",
        ),
        (
            "train.toml",
            '"{name} hails from {value}."',
            '"{name} hails from{value}."',
            "must follow a space",
            "hails from",
        ),
        (
            "train.toml",
            '"{name} hails from {value}."',
            '"{name} hails from {value}s."',
            "precede a space",
            "hails from",
        ),
        (
            "train.toml",
            '"{name} hails from {value}."',
            '"{name} was born in {value}."',
            "repeats the evaluation prompt",
            "was born in {value}",
        ),
        (
            "train.toml",
            '"{name} hails from {value}."',
            '"{name} was born in the town of {value}."',
            "contains the birth_city evaluation prompt",
            "town of",
        ),
        (
            "train.toml",
            '"{name} hails from {value}."',
            '"Records say {name} was born in {value}."',
            "contains the birth_city evaluation prompt",
            "Records say",
        ),
        (
            "eval.toml",
            '"{name} was born during the month of",',
            '"{name} was born in the month of",',
            "continues the birth_city evaluation prompt",
            "born in the month of",
        ),
        (
            "train.toml",
            '"{name} has a birthday in {value}."',
            '"{name} works for {value}."',
            "contains the employer evaluation prompt",
            "works for {value}",
        ),
        (
            "eval.toml",
            '"{name} studied at",',
            '"{name} studied at {value}",',
            r"must contain \{value\} 0 time",
            "studied at {value}",
        ),
    ],
)
def test_bad_templates_name_the_file_and_line(tmp_path, file, old, new, message, needle):
    folder = edited_templates(tmp_path, file, old, new)
    with pytest.raises(BiosrecallError, match=message) as info:
        load_templates(folder)
    text = str(info.value)
    assert "\n" not in text
    located = re.match(r"(.*?) line (\d+): ", text)
    assert located, text
    assert located.group(1) == str(folder / file)
    assert needle in (folder / file).read_text().splitlines()[int(located.group(2)) - 1]


def test_an_eval_prompt_continued_by_another_attribute_names_the_training_line(tmp_path):
    folder = edited_templates(tmp_path, "eval.toml", '"{name} studied at",', '"{name} studied",')
    with pytest.raises(
        BiosrecallError, match="major template .* contains the university evaluation prompt"
    ) as info:
        load_templates(folder)
    assert str(info.value).startswith(
        f"{folder / 'train.toml'} line {line_of(folder, 'train.toml', '{name} studied {value}.')}:"
    )


def test_wrong_counts_are_errors(tmp_path):
    folder = edited_templates(tmp_path, "eval.toml", '    "{name} works for",\n', "")
    with pytest.raises(
        BiosrecallError, match=r"eval.toml line \d+: \[employer\] has 4 templates, needs exactly 5"
    ):
        load_templates(folder)
    folder = edited_templates(
        tmp_path, "train.toml", "[birth_city]\ntemplates = [\n", "[birth_city]\ntemplates = [\n"
    )
    text = (folder / "train.toml").read_text()
    drop = ("{name} is a native of", "{name} comes from", "{name} hails from")
    kept = [line for line in text.splitlines() if not any(d in line for d in drop)]
    (folder / "train.toml").write_text("\n".join(kept) + "\n")
    header = line_of(folder, "train.toml", "[birth_city]")
    with pytest.raises(
        BiosrecallError, match=rf"train.toml line {header}: \[birth_city\] has 9 templates, needs at least 10"
    ):
        load_templates(folder)


def test_missing_and_malformed_files(tmp_path):
    folder = edited_templates(tmp_path, "train.toml", "[major]", "[major")
    with pytest.raises(BiosrecallError, match=r"train.toml is not valid TOML: .*line \d+"):
        load_templates(folder)
    (folder / "eval.toml").unlink()
    with pytest.raises(BiosrecallError, match="template file .*eval.toml does not exist"):
        load_templates(folder)
    with pytest.raises(BiosrecallError, match="templates folder .* not found"):
        load_templates(tmp_path / "nowhere")
    folder = edited_templates(tmp_path, "eval.toml", "[major]\nprompts", "[major]\nphrases")
    with pytest.raises(
        BiosrecallError, match=r"eval.toml: field 'major.phrases' is unknown \(known: prompts\)"
    ):
        load_templates(folder)


def test_an_unknown_attribute_table_is_named(tmp_path):
    folder = edited_templates(tmp_path, "train.toml", "[employer]", "[planet]")
    with pytest.raises(BiosrecallError, match=r"train.toml: field 'planet' is unknown \(known: birth_city"):
        load_templates(folder)


def test_missing_attribute_table(tmp_path):
    text = (TEMPLATES_DIR / "eval.toml").read_text()
    cut = text[: text.index("[employer]")]
    folder = edited_templates(tmp_path, "eval.toml", text, cut)
    with pytest.raises(BiosrecallError, match=r"eval.toml: field 'employer' is missing"):
        load_templates(folder)
