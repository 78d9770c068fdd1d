"""Sentence templates: training sentences and evaluation prompts, read from TOML and validated.

`templates/train.toml` holds, per attribute, at least `MIN_TRAIN_TEMPLATES` sentences with one
`{name}` and one `{value}`; `templates/eval.toml` holds exactly `EVAL_TEMPLATES` prompts per attribute
with one `{name}` that end right where the answer starts. Each evaluation prompt also becomes the
training sentence `"<prompt> {value}."` unless the eval phrasings are held out.

    templates = load_templates()                 # or load_templates(folder_with_both_files)
    templates.training(holdout_eval=False)       # attribute -> training templates
    render(templates.eval["major"][0], name="Ann Lee Smith")

Every problem is a `BiosrecallError` naming the file and the line (or the entry) at fault; a file
whose structure is wrong (a table or key other than the attribute tables and their one list, a
value that is not a string) is read as a record (`biosrecall.records`), whose error names the field.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from pathlib import Path

import msgspec

from biosrecall.bios.pools import ATTRIBUTES
from biosrecall.errors import BiosrecallError
from biosrecall.files import file_sha256, parse_toml_text, read_user_text
from biosrecall.paths import TEMPLATES_DIR
from biosrecall.records import exact_keys, parse_record

TRAIN_FILE = "train.toml"
EVAL_FILE = "eval.toml"
MIN_TRAIN_TEMPLATES = 10
EVAL_TEMPLATES = 5
NAME = "{name}"
VALUE = "{value}"

_PLACEHOLDER_RE = re.compile(r"\{([^{}]*)\}")


@dataclass(frozen=True)
class Templates:
    """Validated templates: `train` (train.toml) and `eval` (eval.toml), attribute -> texts."""

    train: dict[str, tuple[str, ...]]
    eval: dict[str, tuple[str, ...]]
    file_hashes: dict[str, str]

    def training(self, holdout_eval: bool = False) -> dict[str, tuple[str, ...]]:
        """Training templates per attribute: train.toml's, then (unless held out) the eval completions."""
        if holdout_eval:
            return dict(self.train)
        return {a: self.train[a] + tuple(eval_completion(p) for p in self.eval[a]) for a in ATTRIBUTES}


def eval_completion(prompt: str) -> str:
    """The training sentence that teaches an evaluation prompt: the prompt, the value, a full stop."""
    return f"{prompt} {VALUE}."


def render(template: str, name: str, value: str = "") -> str:
    return template.replace(NAME, name).replace(VALUE, value)


class _Source:
    """One TOML file's text, for error messages that point at a line."""

    def __init__(self, path: Path):
        self.path = path
        # Phrasings, not data: bounded like a config file (and a FIFO named train.toml is refused).
        self.text = read_user_text(path, "template file")
        self.lines = self.text.splitlines()

    def where(self, table: str, entry: str | None = None, index: int = 0) -> str:
        """'<file> line N' for a table header or for an entry inside it; '[table] entry i' as a fallback."""
        header = re.compile(rf"^\s*\[\s*{re.escape(table)}\s*\]")
        start = next((i for i, line in enumerate(self.lines) if header.match(line)), None)
        if start is None:
            return str(self.path)
        if entry is None:
            return f"{self.path} line {start + 1}"
        quoted = ('"' + entry + '"', "'" + entry + "'")
        for i in range(start, len(self.lines)):
            if any(q in self.lines[i] for q in quoted):
                return f"{self.path} line {i + 1}"
        return f"{self.path} [{table}] entry {index + 1}"

    def error(self, message: str, table: str, entry: str | None = None, index: int = 0) -> BiosrecallError:
        return BiosrecallError(f"{self.where(table, entry, index)}: {message}")


def _file_type(key: str) -> type:
    """A template file's record type: one table per attribute, no other, each holding only `key`, a
    list of strings."""
    table = msgspec.defstruct(f"{key}_table", [(key, list[str])], forbid_unknown_fields=True)
    return exact_keys(f"{key}_file", ATTRIBUTES, table)


_FILE_TYPES = {key: _file_type(key) for key in ("templates", "prompts")}


def _parse(source: _Source, key: str) -> dict[str, list[str]]:
    """The `key` list of every attribute table, with the file's structure checked."""
    where = f"template file {source.path}"
    data = parse_record(parse_toml_text(source.text, where), _FILE_TYPES[key], where)
    return {attribute: getattr(getattr(data, attribute), key) for attribute in ATTRIBUTES}


def _placeholder_problem(text: str, required: tuple[str, ...]) -> str | None:
    """Why `text` is not a well-formed template with exactly the `required` placeholders, or None."""
    if text != text.strip() or "  " in text or not text.isprintable():
        return "has leading/trailing or doubled spaces or unprintable characters"
    names = _PLACEHOLDER_RE.findall(text)
    unknown = sorted({f"{{{n}}}" for n in names} - {NAME, VALUE})
    if unknown:
        return f"uses unknown placeholder {unknown[0]} (allowed: {', '.join(required)})"
    stray = _PLACEHOLDER_RE.sub("", text)
    if "{" in stray or "}" in stray:
        return "has an unmatched brace"
    for placeholder in (NAME, VALUE):
        count = text.count(placeholder)
        wanted = 1 if placeholder in required else 0
        if count != wanted:
            return f"must contain {placeholder} {wanted} time(s), found {count}"
    for match in re.finditer(r"\{(name|value)\}", text):
        before = text[match.start() - 1] if match.start() > 0 else " "
        after = text[match.end()] if match.end() < len(text) else " "
        if before != " " or not (after == " " or after in string.punctuation):
            return (
                f"{match.group()} must follow a space (or start the text) and precede a space or punctuation"
            )
    return None


def _check_entries(
    source: _Source, parsed: dict[str, list[str]], required: tuple[str, ...], count: int, exact: bool
) -> None:
    """Every attribute's list holds `count` templates (exactly, or at least), each well formed with the
    `required` placeholders, none twice."""
    for attribute, entries in parsed.items():
        if (len(entries) != count) if exact else (len(entries) < count):
            wanted = f"exactly {count}" if exact else f"at least {count}"
            raise source.error(f"[{attribute}] has {len(entries)} templates, needs {wanted}", attribute)
        seen: dict[str, int] = {}
        for i, text in enumerate(entries):
            problem = _placeholder_problem(text, required)
            if problem:
                raise source.error(f"template {text!r} {problem}", attribute, text, i)
            if text in seen:
                raise source.error(
                    f"duplicate template {text!r} (also entry {seen[text] + 1})", attribute, text, i
                )
            seen[text] = i


def _occurrences(text: str, phrase: str) -> list[int]:
    """Start indices of `phrase` in `text` as whole words."""
    found = []
    for match in re.finditer(re.escape(phrase), text):
        start, end = match.start(), match.end()
        if (start == 0 or text[start - 1] == " ") and not text[end : end + 1].isalnum():
            found.append(start)
    return found


def _check_against_prompts(train_src: _Source, train, eval_src: _Source, prompts) -> None:
    """Training text may hold an evaluation prompt only as that prompt's own completion.

    A train.toml template that contains a prompt would leak a held-out phrasing, and any sentence
    that continues a prompt with something other than the prompt's answer makes the answer ambiguous.
    """
    # (attribute, training sentence, file, entry index, entry text as written in the file)
    sentences = [(a, t, train_src, i, t) for a in ATTRIBUTES for i, t in enumerate(train[a])]
    sentences += [
        (a, eval_completion(p), eval_src, i, p) for a in ATTRIBUTES for i, p in enumerate(prompts[a])
    ]
    for prompt_attribute in ATTRIBUTES:
        for prompt in prompts[prompt_attribute]:
            for attribute, text, source, i, entry in sentences:
                if source is eval_src and entry == prompt:
                    continue
                if source is train_src and attribute == prompt_attribute and text == eval_completion(prompt):
                    message = "repeats the evaluation prompt {p}, which is added to training automatically"
                elif source is train_src and _occurrences(text, prompt):
                    message = "contains the {a} evaluation prompt {p}; it would leak a held-out phrasing"
                elif any(
                    not (text.startswith(f"{prompt} {VALUE}", at) and attribute == prompt_attribute)
                    for at in _occurrences(text, prompt)
                ):
                    message = "continues the {a} evaluation prompt {p} with something other than its answer"
                else:
                    continue
                detail = message.format(a=prompt_attribute, p=repr(prompt))
                raise source.error(f"{attribute} template {text!r} {detail}", attribute, entry, i)


def load_templates(templates_dir: str | Path | None = None) -> Templates:
    """Read and validate `train.toml` and `eval.toml` from `templates_dir` (default `templates/`)."""
    folder = Path(templates_dir) if templates_dir is not None else TEMPLATES_DIR
    if not folder.is_dir():
        raise BiosrecallError(f"templates folder {folder} not found")
    train_src, eval_src = _Source(folder / TRAIN_FILE), _Source(folder / EVAL_FILE)
    train, prompts = _parse(train_src, "templates"), _parse(eval_src, "prompts")
    _check_entries(train_src, train, (NAME, VALUE), MIN_TRAIN_TEMPLATES, exact=False)
    _check_entries(eval_src, prompts, (NAME,), EVAL_TEMPLATES, exact=True)
    _check_against_prompts(train_src, train, eval_src, prompts)
    return Templates(
        train={a: tuple(train[a]) for a in ATTRIBUTES},
        eval={a: tuple(prompts[a]) for a in ATTRIBUTES},
        file_hashes={TRAIN_FILE: file_sha256(train_src.path), EVAL_FILE: file_sha256(eval_src.path)},
    )
