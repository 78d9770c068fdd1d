"""`biosrecall ask`: greedy answer of a trained run to a prompt, with the depth each token used.

    biosrecall ask runs/uniform "Ada Quill Morrison was born in" --exit kl:1e-3
    biosrecall ask runs/fixed4 "What is the birth city of Ada Quill Morrison?" --exit fixed:4

Decodes with the KV-cached decoder (`biosrecall.model.decode`) and a per-token exit criterion
(`biosrecall.eval.exits`; default kl:1e-3, capped at --max-depth) and prints one line per generated
token: the word and its depth. A word outside the run's vocabulary is one error line naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from biosrecall.cli.config_file import config_option
from biosrecall.cli.options import Integer, checkpoint_option, field_options
from biosrecall.numbers import DEPTH, counts


@dataclass
class AskOptions:
    """What one `ask` call asks for, by the names of its options (the keywords of `answer_prompt`)."""

    exit_spec: str = "kl:1e-3"
    """One exit criterion (recall-curve's; gate:DELTA needs `biosrecall gate train` first, cdf:Q an
    ouro-gate run)."""

    max_depth: int = 64
    """Most block iterations per token."""

    max_new_tokens: int = 8
    """Most tokens generated."""

    device: str = "auto"
    """"auto" (CUDA when present), "cpu" or "cuda"."""

    data_dir: Path | None = None
    """Dataset folder."""


CHECKED = {
    "exit_spec": {"flag": "--exit"},
    "max_depth": {"type": Integer(DEPTH)},
    "max_new_tokens": {"type": Integer(counts())},
}
"""What the options of `AskOptions` take beyond their fields' types (`field_options`)."""


@click.command("ask")
@config_option()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.argument("prompt")
@checkpoint_option("One checkpoint", "final")
@field_options(AskOptions, CHECKED)
def ask(run_dir, prompt, **fields):
    """Answer PROMPT with RUN_DIR's model, printing each token with the depth it used."""
    from biosrecall.eval.serving import answer_prompt

    answer = answer_prompt(run_dir, prompt, **fields)
    click.echo(" ".join(word for word, _ in answer))
    for word, depth in answer:
        click.echo(f"  {word!s:<20} depth {depth}")
