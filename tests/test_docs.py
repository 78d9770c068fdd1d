"""The documentation site and the README: `make docs` builds in strict mode and fails on a broken link,
the CLI reference lists every command and option, and the README's commands run.

    pytest -q tests/test_docs.py    # builds the site twice and runs the README tour: a few minutes

The builds need the `docs` extra (`make test` installs it).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
# What `make docs` reads besides the package: copied to build a planted mistake without touching the tree.
SITE_SOURCES = ("mkdocs.yml", "docs", "ARCHITECTURE.md", "notebooks/figure1.ipynb", "scripts")

# README commands run by test_the_readme_commands_run, in order, in an empty folder.
CHEAP = (
    "biosrecall generate --out runs/tour/data --people 200 --overwrite",
    "biosrecall flops --preset bios-tiny --data runs/tour/data",
    "biosrecall train --data runs/tour/data --out runs/tour/ff --preset bios-tiny"
    " --schedule fixed_first:k0=4,switch=0.8,finish=uniform --budget-of fixed:4:30 --batch-size 16 --overwrite",
    "biosrecall recall-curve runs/tour/ff --checkpoint final --max-depth 16 --out runs/tour/recall --overwrite",
    'biosrecall ask runs/tour/ff "Lindsey Eoghan Murphy was born in" --exit kl:1e-3',
)
# README commands not run here, each with the reason.
SKIPPED = {
    "make demo": "installs a virtual environment and trains for minutes; its steps are CHEAP and figure1",
    "make test": "the whole test suite",
    "biosrecall figure1 --preset quick --out runs/demo": "trains a study for minutes; tests/test_figure1.py "
    "runs figure1 on the quick preset",
    "biosrecall figure1 --preset quick --out runs/demo --seeds 0,1,2": "three times the study above",
    "biosrecall figure1 --out runs/study --seeds 0,1,2 --update-matched --lr-grid 3e-3,1e-2 --fixed-sweep 8": (
        "the default-size study: hours of training"
    ),
    "biosrecall figure1 --out runs/study --seeds 0,1,2,3,4,5 --update-matched --lr-grid 3e-3,1e-2 --fixed-sweep 8": (
        "the same study extended to six seeds: hours more"
    ),
    "biosrecall figure1 --out runs/study --archive docs/results/study-default --overwrite": "needs that study",
    "biosrecall figure1 --out runs/sweep-middle --preset middle --seeds 0,1,2,3,4,5 --budgets 0.25,0.5,1,2,4 "
    "--update-matched": "the middle-size budget sweep: an hour of training",
    "python scripts/readme_results.py docs/results/study-default --only claims,exit_summary": (
        "tests/test_readme_results.py checks what it would write"
    ),
    "biosrecall capacity --out runs/capacity --preset bios-tiny --people 250,500,1000 --seeds 0,1,2 "
    "--exposures 100": "the capacity study: hours of training; tests/test_capacity.py runs a tiny one",
    "biosrecall lm prepare pkg:kjv --out data/lm-kjv --vocab-size 512 --val-fraction 0.05": (
        "needs the lm-corpus extra; tests/test_lm_study.py prepares this corpus and continues the archived study"
    ),
    "biosrecall lm study --data data/lm-kjv --out runs/lm-study --preset small --seeds 0,1,2,3,4,5,6,7": (
        "the LM study: over an hour of training; tests/test_lm_study.py runs it on a tiny corpus"
    ),
    "biosrecall generate --out data/bios-50 --people 50 --export-text jsonl --text-out data/bios-50-text "
    "--exposures 100": "the Hugging Face route; tests/test_hf_trainer_example.py runs it on a tiny config",
    "python examples/hf_trainer_gpt2.py --data data/bios-50 --text data/bios-50-text --out models/gpt2-bios": (
        "trains GPT-2 for two minutes; tests/test_hf_trainer_example.py trains it for a few steps"
    ),
    "biosrecall recall-curve --hf-model models/gpt2-bios --data data/bios-50 --out recall-gpt2-bios": (
        "needs that model; tests/test_hf_trainer_example.py scores its tiny one"
    ),
}


def readme_commands() -> list[str]:
    """Every command line of the README's ```bash blocks and indented blocks, continuations joined,
    comments dropped."""
    commands, in_bash = [], False
    lines = README.read_text().splitlines()
    joined = []
    for line in lines:
        if joined and joined[-1].endswith("\\"):
            joined[-1] = joined[-1][:-1].rstrip() + " " + line.strip()
        else:
            joined.append(line)
    for line in joined:
        if line.startswith("```"):
            in_bash = line.strip() == "```bash"
            continue
        code = line.strip() if in_bash else line[4:] if line.startswith("    ") else ""
        code = re.sub(r"\s+#.*$", "", code).strip()
        if code.startswith(("biosrecall ", "make ", "python ")):
            commands.append(code)
    return commands


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)]
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)


class _Text(HTMLParser):
    """The text of a page's <article> (the content, without navigation), one string per text node."""

    def __init__(self):
        super().__init__()
        self.parts, self._inside, self._skip = [], 0, 0

    def handle_starttag(self, tag, attrs):
        self._inside += tag == "article"
        self._skip += tag in ("script", "style")

    def handle_endtag(self, tag):
        self._inside -= tag == "article"
        self._skip -= tag in ("script", "style")

    def handle_data(self, data):
        if self._inside and not self._skip:
            self.parts.append(data)


def page_text(path: Path) -> str:
    parser = _Text()
    parser.feed(path.read_text())
    return "".join(parser.parts)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    result = build(ROOT / "mkdocs.yml", out)
    assert result.returncode == 0, result.stderr[-3000:]
    return out


@pytest.mark.slow
def test_the_site_has_every_page_of_the_nav(site):
    for page in ("index", "getting-started", "guides/figure1", "results/figure1", "reference/cli", "figure1"):
        assert (site / f"{page}.html").is_file(), page
    home = page_text(site / "index.html")
    assert "docs/results/study-default/claims.md, written by biosrecall figure1" in home
    results = page_text(site / "results" / "figure1.html")
    first_row = (ROOT / "docs/results/study-default/summary.md").read_text().splitlines()[2]
    for cell in first_row.strip("| ").split(" | "):  # the archived summary, read at build time
        assert cell in results, cell
    assert "plot_recall_curves" in page_text(site / "reference" / "api.html")


@pytest.mark.slow
def test_a_broken_internal_link_fails_the_build_and_is_named(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")
    for name in SITE_SOURCES:
        source, copy = ROOT / name, tmp_path / name
        copy.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if source.is_dir() else shutil.copyfile)(source, copy)
    (tmp_path / "biosrecall").symlink_to(ROOT / "biosrecall")  # the API reference reads the package
    page = tmp_path / "docs" / "concepts" / "schedules.md"
    page.write_text(page.read_text() + "\nSee [the budgets](no-such-page.md).\n")
    result = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-page.md" in result.stdout + result.stderr
    assert "concepts/schedules.md" in result.stdout + result.stderr


def command_tree(command: click.Command, path: tuple[str, ...], ctx: click.Context):
    """(path, command) for the group and every command under it, as `--help` lists them."""
    yield path, command
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if not sub.hidden:
                yield from command_tree(sub, (*path, name), click.Context(sub, parent=ctx, info_name=name))


@pytest.mark.slow
def test_the_cli_reference_lists_every_command_and_option(site):
    from biosrecall.cli import cli

    text = page_text(site / "reference" / "cli.html")
    sections = {}
    for chunk in text.split("Usage:")[1:]:
        usage = chunk.split("[OPTIONS]")[0].strip()
        sections[usage] = chunk
    tree = list(command_tree(cli, ("biosrecall",), click.Context(cli, info_name="biosrecall")))
    assert sorted(sections) == sorted(" ".join(path) for path, _ in tree)
    for path, command in tree:
        section = sections[" ".join(path)]
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                for flag in (*param.opts, *param.secondary_opts):
                    assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", section), (path, flag)


def test_every_readme_command_is_run_or_skipped_with_a_reason():
    assert sorted(readme_commands()) == sorted([*CHEAP, *SKIPPED])


def test_the_readme_is_short_and_its_links_exist():
    text = README.read_text()
    assert len(text.splitlines()) <= 300
    for target in re.findall(r"\]\(([^)#:]+)\)", text):
        assert (ROOT / target).exists(), target


@pytest.mark.slow
def test_the_readme_commands_run(tmp_path):
    printed = {}
    for line in CHEAP:
        command = [sys.executable, "-m", "biosrecall", *shlex.split(line)[1:]]
        result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
        assert result.returncode == 0, (line, result.stderr[-2000:])
        printed[line.split()[1]] = result.stdout
    table = printed["recall-curve"].split("recalled bits per person:")[1].strip().splitlines()[1:]
    rows = [row for row in table if not row.startswith("wrote ")]
    assert rows and all("ff" in row and "fixed_first:k0=4" in row for row in rows)  # run and schedule
    # flops counts the run's own parameters: its embedding holds the dataset's vocabulary
    assert "vocab 2,137 (of runs/tour/data" in printed["flops"] and " 101,408" in printed["flops"]
