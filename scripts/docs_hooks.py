"""mkdocs hooks of the documentation site (mkdocs.yml names this file): results pages filled from the
archived study files at build time, and the Figure-1 notebook added as a page.

    make docs        # mkdocs build --strict: a results marker naming a missing file fails the build

A results page holds markers instead of numbers, each replaced when the page is built:

    <!-- results: study-default/claims -->                 docs/results/study-default/claims.md, with
                                                           the figure1 command that wrote it
    <!-- results-csv: study-default/exit_headline.csv -->  that CSV file as a Markdown table

So no result on the site is copied by hand: archive a study (`biosrecall figure1 --archive`)
and the next build shows it. The notebook stays in notebooks/ (where its test runs it) and is rendered,
not executed, by mkdocs-jupyter; this hook only hands it to mkdocs before that plugin looks for it.
"""

from __future__ import annotations

import csv
import importlib.util
import re
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "figure1.ipynb"
MARKER = re.compile(r"<!-- (results|results-csv): ([\w./-]+) -->")


def _readme_results():
    """scripts/readme_results.py, the one place that knows which command made an archived study."""
    spec = importlib.util.spec_from_file_location("readme_results", ROOT / "scripts" / "readme_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@event_priority(100)  # before mkdocs-jupyter's on_files, which turns .ipynb files into pages
def on_files(files, config):
    files.append(
        File(
            NOTEBOOK.name,
            src_dir=str(NOTEBOOK.parent),
            dest_dir=config["site_dir"],
            use_directory_urls=config["use_directory_urls"],
        )
    )
    return files


def on_page_markdown(markdown, page, config, files):
    results = Path(config["docs_dir"]) / "results"
    return MARKER.sub(lambda match: _expand(match.group(1), match.group(2), results, page), markdown)


def _expand(kind: str, name: str, results: Path, page) -> str:
    source = results / (f"{name}.md" if kind == "results" else name)
    if not source.is_file():
        raise PluginError(f"{page.file.src_uri}: results marker names {source}, which does not exist")
    where = source.relative_to(results.parent.parent).as_posix()
    made_by = f"*`{where}`, read when the site was built.*"
    if any((source.parent / record).is_file() for record in _readme_results().RECORDS):
        # an archived study: name the command that made it
        command = _readme_results().study_command(source.parent)
        made_by = f"*`{where}`, written by `{command}`, read when the site was built.*"
    body = source.read_text() if kind == "results" else _csv_table(source)
    return f"{made_by}\n\n{body}"


def _csv_table(path: Path) -> str:
    """A CSV file as a Markdown table; numbers shown to 3 significant digits, as the study's own tables."""
    with path.open(newline="") as handle:
        rows = list(csv.reader(handle))
    lines = ["| " + " | ".join(rows[0]) + " |", "|---" * len(rows[0]) + "|"]
    lines += ["| " + " | ".join(_cell(value) for value in row) + " |" for row in rows[1:]]
    return "\n".join(lines) + "\n"


def _cell(value: str) -> str:
    try:
        number = float(value)
    except ValueError:
        return value.replace("|", "\\|")
    return value if number.is_integer() and "." not in value else f"{number:.3g}"
