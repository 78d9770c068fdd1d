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
    build_pools(out_dir, overwrite=True)      # rebuild the frozen files
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from faker import Faker

from biosrecall.atomic import atomic_directory
from biosrecall.errors import BiosrecallError
from biosrecall.paths import POOLS_DIR

ATTRIBUTES = ("birth_city", "birth_day", "birth_month", "university", "major", "employer")
NAME_PARTS = ("first_name", "middle_name", "last_name")
POOL_NAMES = NAME_PARTS + ATTRIBUTES

FROZEN_POOL_LENGTHS = {
    "first_name": 400,
    "middle_name": 400,
    "last_name": 1000,
    "birth_city": 500,
    "birth_day": 28,
    "birth_month": 12,
    "university": 500,
    "major": 100,
    "employer": 1000,
}
DEFAULT_POOL_SIZES = {
    "first_name": 400,
    "middle_name": 400,
    "last_name": 1000,
    "birth_city": 64,
    "birth_day": 28,
    "birth_month": 12,
    "university": 64,
    "major": 64,
    "employer": 128,
}
MIN_POOL_SIZE = 2
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

# A value is words separated by single spaces, starting with a letter or digit; a name part is one word.
_VALUE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9,.'&-]*( [A-Za-z0-9,.'&-]+)*")
_NAME_RE = re.compile(r"[A-Z][a-z]+")
# Read back, a name part only has to be one word, so "first middle last" maps back to one person.
_NAME_WORD_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9,.'&-]*")


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
    with atomic_directory(out_dir, overwrite=overwrite) as tmp:
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
    """Defaults updated with `overrides`; unknown pool names and non-integer sizes are errors."""
    sizes = dict(DEFAULT_POOL_SIZES)
    for name, size in (overrides or {}).items():
        if name not in sizes:
            raise BiosrecallError(
                f"unknown attribute '{name}' in pool sizes (known: {', '.join(POOL_NAMES)})"
            )
        if isinstance(size, bool) or not isinstance(size, int):
            raise BiosrecallError(f"pool size for {name} must be an integer, got {size!r}")
        sizes[name] = size
    for name, size in sizes.items():
        if size < MIN_POOL_SIZE:
            raise BiosrecallError(f"pool size {size} for {name} is below the minimum of {MIN_POOL_SIZE}")
    return sizes


def _read_pool_file(path: Path, pattern: re.Pattern) -> list[str]:
    if not path.is_file():
        raise BiosrecallError(f"pool file {path} not found (run `biosrecall pools` to rebuild it)")
    values = path.read_text(encoding="utf-8").splitlines()
    seen: dict[str, int] = {}
    for line_number, value in enumerate(values, start=1):
        if not pattern.fullmatch(value):
            raise BiosrecallError(f"{path} line {line_number}: malformed pool value {value!r}")
        if value in seen:
            raise BiosrecallError(f"{path} line {line_number}: duplicate of line {seen[value]} ({value!r})")
        seen[value] = line_number
    return values


def load_pools(
    overrides: Mapping[str, int] | None = None, pools_dir: str | Path | None = None
) -> dict[str, tuple[str, ...]]:
    """The first n values of every pool, n from `resolve_pool_sizes(overrides)`."""
    pools_dir = Path(pools_dir) if pools_dir is not None else POOLS_DIR
    pools = {}
    for name, size in resolve_pool_sizes(overrides).items():
        path = pools_dir / f"{name}.txt"
        values = _read_pool_file(path, _NAME_WORD_RE if name in NAME_PARTS else _VALUE_RE)
        if size > len(values):
            raise BiosrecallError(
                f"pool size {size} for {name} is above the pool length {len(values)} ({path})"
            )
        pools[name] = tuple(values[:size])
    return pools


def pool_file_hashes(pools_dir: str | Path | None = None) -> dict[str, str]:
    """sha256 of every frozen pool file (the whole file, not just the prefix in use)."""
    pools_dir = Path(pools_dir) if pools_dir is not None else POOLS_DIR
    return {
        f"{name}.txt": hashlib.sha256((pools_dir / f"{name}.txt").read_bytes()).hexdigest()
        for name in POOL_NAMES
    }


def attribute_bits(pool_sizes: Mapping[str, int]) -> dict[str, float]:
    """Information per attribute, log2(pool size): exact because values are drawn uniformly."""
    return {attribute: math.log2(pool_sizes[attribute]) for attribute in ATTRIBUTES}
