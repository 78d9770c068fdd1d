"""Frozen attribute pools: the values people's names and attributes are drawn from.

Each pool is a plain-text file under `data/pools/`, one value per line, built once by
`build_pools()` (or `biosrecall pools`) from Faker 40.54.0 with seed `POOLS_SEED` and committed, so a
dataset does not change when Faker does. A dataset uses the first n values of each pool.

Pools and their frozen lengths:

    first_name 400, middle_name 400, last_name 1000   Faker first/last names (US for first and last,
                                                      British, Irish and New Zealand for middle names,
                                                      disjoint from the first names): 160M full names
    birth_city 500        fictional Faker cities ("West Tammyfort")
    birth_day 28          1..28, so every day exists in every month
    birth_month 12        January..December
    university 500        patterns over Faker cities and surnames ("Hullport Institute of Technology")
    major 100             a hand-written list of real fields of study
    employer 1000         fictional Faker companies ("Summers, Barnett and Smith")

Default pool sizes (`DEFAULT_POOL_SIZES`) give the paper's 33.39 bits per person: the paper does not
state its pools, so we keep the natural 28 days and 12 months and use powers of two for the rest,
64 cities, 64 universities, 64 majors and 128 employers:
log2(64 * 28 * 12 * 64 * 64 * 128) = 4.807 + 3.585 + 6 + 6 + 6 + 7 = 33.392 bits. Values are drawn
uniformly, so log2(pool size) is exactly the information an attribute carries.

    pools = load_pools({"birth_city": 128})   # name -> tuple of the first n values
    pools = load_pools(pools_dir="my_pools")  # the same, from a folder of your own
    build_pools(out_dir, overwrite=True)      # rebuild the frozen files

A pool folder (`data/pools/` or one of your own, `biosrecall generate --pools-dir DIR`) holds the nine
files `first_name.txt`, `middle_name.txt`, `last_name.txt`, `birth_city.txt`, `birth_day.txt`,
`birth_month.txt`, `university.txt`, `major.txt` and `employer.txt`: UTF-8 text, one value per line
(`\n` or `\r\n`), no blank lines, no duplicates. A value is words of printable characters separated
by single spaces, starting with a letter or digit, without `{`, `}`, `<`, `>` or `▁` (they would clash
with templates, special tokens or the tokenizer's space mark); a name part is one such word. The size
rule is the same for every folder: a dataset uses the first n lines of each file, n being the
default size above or `--pool-size NAME=n`, so a file of your own must hold at least that many lines
(`--pool-size birth_city=200` uses 200 cities). Values are drawn uniformly, so the bits per person
are the sum of log2(n) over the six attributes, whatever the values are.
"""

from __future__ import annotations

import math
import os
import random
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated

import msgspec
from faker import Faker

from biosrecall.atomic import OutputRecord, atomic_directory
from biosrecall.bios.tokenizer import SPACE_MARK, split_words
from biosrecall.errors import BiosrecallError
from biosrecall.files import file_sha256, read_user_text
from biosrecall.paths import POOLS_DIR
from biosrecall.records import parse_record

ATTRIBUTES = ("birth_city", "birth_day", "birth_month", "university", "major", "employer")
NAME_PARTS = ("first_name", "middle_name", "last_name")
POOL_NAMES = NAME_PARTS + ATTRIBUTES
_FILES = ", ".join(f"{name}.txt" for name in NAME_PARTS + ATTRIBUTES)

POOL_SIZES = {  # pool: (its frozen length in data/pools/, the size a dataset uses by default)
    "first_name": (400, 400),
    "middle_name": (400, 400),
    "last_name": (1000, 1000),
    "birth_city": (500, 64),
    "birth_day": (28, 28),
    "birth_month": (12, 12),
    "university": (500, 64),
    "major": (100, 64),
    "employer": (1000, 128),
}
FROZEN_POOL_LENGTHS = {name: frozen for name, (frozen, _) in POOL_SIZES.items()}
DEFAULT_POOL_SIZES = {name: default for name, (_, default) in POOL_SIZES.items()}
MIN_POOL_SIZE = 2
PoolSize = Annotated[int, msgspec.Meta(ge=MIN_POOL_SIZE)]
"""A pool's size: at least two values, or the attribute tells nothing."""
PoolSizeChoice = msgspec.defstruct(
    "PoolSizeChoice",
    [(name, PoolSize, size) for name, size in DEFAULT_POOL_SIZES.items()],
    forbid_unknown_fields=True,
)
"""Every pool's size: the defaults, each overridable by name (an unknown name is refused)."""
POOLS_SEED = 3339

MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)

# Real fields of study; shuffled with the seed when the pool is built so any prefix is a mix.
# fmt: off
MAJORS = (
    "Accounting", "Aerospace Engineering", "African Studies", "Agricultural Science", "Anthropology",
    "Applied Mathematics", "Archaeology", "Architecture", "Art History", "Astronomy", "Astrophysics",
    "Biochemistry", "Bioengineering", "Biology", "Biomedical Engineering", "Biophysics", "Botany",
    "Business Administration", "Chemical Engineering", "Chemistry", "Civil Engineering", "Classics",
    "Cognitive Science", "Communication Studies", "Comparative Literature", "Computer Engineering",
    "Computer Science", "Creative Writing", "Criminology", "Dance", "Data Science", "Dentistry",
    "Earth Science", "Ecology", "Economics", "Education", "Electrical Engineering", "English Literature",
    "Entomology", "Environmental Engineering", "Environmental Science", "Epidemiology", "Film Studies",
    "Finance", "Fine Arts", "Forestry", "French", "Genetics", "Geography", "Geology", "German",
    "Graphic Design", "History", "Hospitality Management", "Industrial Design", "Industrial Engineering",
    "Information Systems", "International Relations", "Journalism", "Kinesiology",
    "Landscape Architecture", "Latin American Studies", "Law", "Library Science", "Linguistics",
    "Marine Biology", "Marketing", "Materials Science", "Mathematics", "Mechanical Engineering",
    "Medicine", "Meteorology", "Microbiology", "Molecular Biology", "Music", "Neuroscience",
    "Nuclear Engineering", "Nursing", "Nutrition", "Oceanography", "Operations Research", "Pharmacology",
    "Pharmacy", "Philosophy", "Photography", "Physics", "Physiology", "Political Science", "Psychology",
    "Public Health", "Public Policy", "Religious Studies", "Social Work", "Sociology", "Spanish",
    "Statistics", "Theater", "Urban Planning", "Veterinary Science", "Zoology",
)
# fmt: on

UNIVERSITY_PATTERNS = (
    "University of {city}",
    "{surname} University",
    "{city} State University",
    "{surname} College",
    "{city} Institute of Technology",
    "{city} College",
    "{surname} Institute",
)

# What the builder keeps from Faker (ASCII words separated by single spaces; names capitalised). Changing
# these would change the frozen pools, so reading uses the wider rule below.
_VALUE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9,.'&-]*( [A-Za-z0-9,.'&-]+)*")
_NAME_RE = re.compile(r"[A-Z][a-z]+")
# What a pool file may hold (see the module docstring). Braces would read as template placeholders,
# angle brackets can spell the special tokens, and "▁" is the tokenizer's space mark.
FORBIDDEN_CHARACTERS = "{}<>" + SPACE_MARK
MAX_POOL_FILE_BYTES = 16 << 20  # a million long values; keeps a wrong file from filling memory


def _draw_unique(draw: Callable[[], str], count: int, pattern: re.Pattern, exclude=()) -> list[str]:
    """Call `draw` until `count` distinct values matching `pattern` (and not in `exclude`) are found."""
    values: dict[str, None] = {}  # a dict keeps first-seen order, which a set would not
    for _ in range(count * 200):
        value = draw()
        if pattern.fullmatch(value) and value not in exclude:
            values[value] = None
            if len(values) == count:
                return list(values)
    raise RuntimeError(f"could not draw {count} distinct values; the Faker data is smaller than expected")


def make_pools(seed: int = POOLS_SEED) -> dict[str, list[str]]:
    """Build every pool in memory, deterministically from `seed` (Faker 40.54.0)."""
    us = Faker("en_US")
    us.seed_instance(seed)
    others = [Faker(locale) for locale in ("en_GB", "en_IE", "en_NZ")]
    for offset, fake in enumerate(others, start=1):
        fake.seed_instance(seed + offset)
    picker = random.Random(seed)
    lengths = FROZEN_POOL_LENGTHS
    pools: dict[str, list[str]] = {}
    pools["first_name"] = _draw_unique(us.first_name, lengths["first_name"], _NAME_RE)
    pools["middle_name"] = _draw_unique(
        lambda: picker.choice(others).first_name(),
        lengths["middle_name"],
        _NAME_RE,
        exclude=set(pools["first_name"]),
    )
    pools["last_name"] = _draw_unique(
        lambda: picker.choice([us, *others]).last_name(), lengths["last_name"], _NAME_RE
    )
    pools["birth_city"] = _draw_unique(us.city, lengths["birth_city"], _VALUE_RE)
    pools["birth_day"] = [str(day) for day in range(1, 29)]
    pools["birth_month"] = list(MONTHS)

    def university() -> str:
        return picker.choice(UNIVERSITY_PATTERNS).format(city=us.city(), surname=us.last_name())

    pools["university"] = _draw_unique(university, lengths["university"], _VALUE_RE)
    majors = list(MAJORS)
    picker.shuffle(majors)
    pools["major"] = majors
    pools["employer"] = _draw_unique(us.company, lengths["employer"], _VALUE_RE)
    return {name: pools[name] for name in POOL_NAMES}


def pool_file_text(values: list[str]) -> str:
    return "\n".join(values) + "\n"


def build_pools(out_dir: str | Path | None = None, overwrite: bool = False, seed: int = POOLS_SEED) -> Path:
    """Write `<name>.txt` for every pool into `out_dir` (default `data/pools/`) atomically."""
    out_dir = Path(out_dir) if out_dir is not None else POOLS_DIR
    pools = make_pools(seed)
    # A pools folder holds its pool files and nothing else: --overwrite replaces no other folder.
    record = OutputRecord("pools", f"{POOL_NAMES[0]}.txt", only=tuple(f"{name}.txt" for name in POOL_NAMES))
    with atomic_directory(out_dir, overwrite=overwrite, record=record) as tmp:
        for name, values in pools.items():
            (tmp / f"{name}.txt").write_text(pool_file_text(values), encoding="utf-8")
    return out_dir


def stale_pool_files(pools_dir: str | Path | None = None, seed: int = POOLS_SEED) -> list[str]:
    """Names of pool files in `pools_dir` that are missing or differ from a fresh rebuild."""
    pools_dir = Path(pools_dir) if pools_dir is not None else POOLS_DIR
    stale = []
    for name, values in make_pools(seed).items():
        path = pools_dir / f"{name}.txt"
        if not path.is_file() or path.read_text(encoding="utf-8") != pool_file_text(values):
            stale.append(path.name)
    return stale


def resolve_pool_sizes(overrides: Mapping[str, int] | None = None) -> dict[str, int]:
    """Defaults updated with `overrides`; an unknown pool name, a size that is not an integer or one
    below `MIN_POOL_SIZE` is a `BiosrecallError` naming the pool."""
    return msgspec.structs.asdict(parse_record(dict(overrides or {}), PoolSizeChoice, "pool sizes"))


def _value_problem(value: str, one_word: bool, seen: Mapping[str, int]) -> str | None:
    """Why `value` cannot be a pool value (a name part when `one_word`; `seen`: the line of each value
    before it), or None."""
    if value == "":
        return "empty value (a pool holds one value per line, without blank lines)"
    if all(word == SPACE_MARK for word in split_words(value)):
        return f"value {value!r} tokenizes to nothing (it is only spaces)"
    if value != value.strip(" ") or "  " in value:
        return f"value {value!r} has leading, trailing or doubled spaces"
    if not value.isprintable():
        return f"value {value!r} holds an unprintable character (a tab, a control or format character)"
    forbidden = sorted(set(value) & set(FORBIDDEN_CHARACTERS))
    if forbidden:
        return f"value {value!r} holds {forbidden[0]!r}, which pools may not use"
    if not value[0].isalnum():
        return f"value {value!r} must start with a letter or digit"
    if one_word and " " in value:
        return f"name part {value!r} must be one word (full names are 'first middle last')"
    if value in seen:
        return f"duplicate of line {seen[value]} ({value!r})"
    return None


def _read_pool_file(folder: Path, name: str) -> list[str]:
    """The values of pool `name` in `folder`, each checked, with the file and line named in every error."""
    path = folder / f"{name}.txt"
    if not os.path.lexists(path):
        default = folder.resolve() == POOLS_DIR
        hint = "run `biosrecall pools` to rebuild it" if default else f"a pool folder holds {_FILES}"
        raise BiosrecallError(f"pool file {path} not found ({hint})")
    text = read_user_text(path, "pool file", MAX_POOL_FILE_BYTES)
    values = re.split(r"\r\n|\r|\n", text)  # universal newlines, as a text file reads
    if values[-1] == "":
        values.pop()  # the final newline ends the last line; it does not start an empty one
    seen: dict[str, int] = {}
    for line_number, value in enumerate(values, start=1):
        problem = _value_problem(value, one_word=name in NAME_PARTS, seen=seen)
        if problem:
            raise BiosrecallError(f"{path} line {line_number}: {problem}")
        seen[value] = line_number
    return values


def load_pools(
    overrides: Mapping[str, int] | None = None, pools_dir: str | Path | None = None
) -> dict[str, tuple[str, ...]]:
    """The first n values of every pool in `pools_dir` (default `data/pools/`), n from
    `resolve_pool_sizes(overrides)`; every line of every file is checked, not only the first n."""
    folder = Path(pools_dir) if pools_dir is not None else POOLS_DIR
    sizes = resolve_pool_sizes(overrides)
    pools = {}
    for name, size in sizes.items():
        values = _read_pool_file(folder, name)
        if size > len(values):
            raise BiosrecallError(
                f"pool size {size} for {name} is above the pool length {len(values)} ({folder / name}.txt); "
                f"use --pool-size {name}=N with N <= {len(values)}, or a longer file"
            )
        pools[name] = tuple(values[:size])
    return pools


def pool_lengths(pools_dir: str | Path | None = None) -> dict[str, int]:
    """How many values each pool file of `pools_dir` holds (every file checked as `load_pools` does)."""
    folder = Path(pools_dir) if pools_dir is not None else POOLS_DIR
    return {name: len(_read_pool_file(folder, name)) for name in POOL_NAMES}


def pool_file_hashes(pools_dir: str | Path | None = None) -> dict[str, str]:
    """sha256 of every pool file in `pools_dir` (default `data/pools/`): whole files, not the prefix in use."""
    pools_dir = Path(pools_dir) if pools_dir is not None else POOLS_DIR
    return {f"{name}.txt": file_sha256(pools_dir / f"{name}.txt") for name in POOL_NAMES}


def attribute_bits(pool_sizes: Mapping[str, int]) -> dict[str, float]:
    """Information per attribute, log2(pool size): exact because values are drawn uniformly."""
    return {attribute: math.log2(pool_sizes[attribute]) for attribute in ATTRIBUTES}
