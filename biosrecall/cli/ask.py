"""`biosrecall ask`: greedy answer of a trained run to a prompt, with the depth each token used.

    biosrecall ask runs/uniform "Ada Quill Morrison was born in" --exit kl:1e-3
    biosrecall ask runs/fixed4 "What is the birth city of Ada Quill Morrison?" --exit fixed:4

Decodes with the KV-cached decoder (`biosrecall.model.decode`) and a per-token exit criterion
(`biosrecall.eval.exits`; default kl:1e-3, capped at --max-depth) and prints one line per generated
token: the word and its depth. A word outside the run's vocabulary is one error line naming it.
"""

from __future__ import annotations

from pathlib import Path

import click

from biosrecall.cli.config_file import config_option
from biosrecall.cli.options import Integer, checkpoint_option
from biosrecall.numbers import DEPTH, counts


@click.command("ask")
@config_option()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.argument("prompt")
@click.option(
    "--exit",
    "exit_spec",
    default="kl:1e-3",
    show_default=True,
    help="One exit criterion (recall-curve's; gate:DELTA needs `biosrecall gate train` first, cdf:Q an "
    "ouro-gate run).",
)
@click.option(
    "--max-depth", default=64, type=Integer(DEPTH), show_default=True, help="Most block iterations per token."
)
@checkpoint_option("One checkpoint", "final")
@click.option(
    "--max-new-tokens", default=8, type=Integer(counts()), show_default=True, help="Most tokens generated."
)
@click.option("--device", default="auto", help='"auto" (CUDA when present), "cpu" or "cuda".')
@click.option("--data", "data_dir", type=click.Path(path_type=Path), default=None, help="Dataset folder.")
def ask(run_dir, prompt, exit_spec, max_depth, checkpoint, max_new_tokens, device, data_dir):
    """Answer PROMPT with RUN_DIR's model, printing each token with the depth it used."""
    from biosrecall.eval.serving import answer_prompt

    answer = answer_prompt(run_dir, prompt, exit_spec, max_depth, checkpoint=checkpoint,
                           max_new_tokens=max_new_tokens, device=device, data_dir=data_dir)  # fmt: skip
    click.echo(" ".join(word for word, _ in answer))
    for word, depth in answer:
        click.echo(f"  {word!s:<20} depth {depth}")
