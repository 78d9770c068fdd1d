"""`biosrecall export`: one checkpoint of a bioS run as a Hugging Face model folder.

    biosrecall export runs/ff --out exported/ff                       # the final checkpoint
    biosrecall export runs/ff --checkpoint 0.45 --num-steps 8 --out exported/ff-45 --overwrite

The folder loads with `AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)` and
`AutoTokenizer.from_pretrained(DIR)`, offline and without biosrecall; `forward` and `generate` take
the depth as `num_steps`. See `biosrecall.hf.export` for its contents. Needs the `hf` extra.
"""

from __future__ import annotations

from pathlib import Path

import click

from biosrecall.cli.config_file import config_option
from biosrecall.cli.options import Integer, checkpoint_option
from biosrecall.interrupts import work_done
from biosrecall.numbers import DEPTH


@click.command("export")
@config_option()
@click.argument("run_dir", type=click.Path(path_type=Path))
@checkpoint_option("The checkpoint to export (exactly one)", "final")
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path), help="Folder to write.")
@click.option(
    "--num-steps",
    type=Integer(DEPTH),
    default=None,
    help="Default depth of forward and generate [default: the run's mean training depth, rounded].",
)
@click.option(
    "--data",
    "data_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Dataset folder (for the tokenizer) instead of the one the run recorded (hash still checked).",
)
@click.option(
    "--overwrite", is_flag=True, help="Replace a non-empty --out folder (swapped in when complete)."
)
def export(run_dir, checkpoint, out_dir, num_steps, data_dir, overwrite):
    """Export a run's checkpoint as a Hugging Face transformers model folder with a model card."""
    from biosrecall.hf.export import export_run  # refuses a folder it did not export, before loading

    written = export_run(
        run_dir, out_dir, checkpoint, num_steps=num_steps, data_dir=data_dir, overwrite=overwrite
    )
    work_done()  # the folder is swapped in whole: a signal from here on changes nothing
    click.echo(f"wrote {written}")
