"""`biosrecall gate`: the learned exit gate of a bioS or language-model run (`biosrecall.eval.gate`).

    biosrecall gate train runs/ff                       # the final checkpoint's gate
    biosrecall gate train runs/ff --checkpoint 0.45,final --confidence 0.9
    biosrecall recall-curve runs/ff --checkpoint final --exit gate:0.05
    biosrecall ask runs/ff "Ada Quill Morrison was born in" --exit gate:0.1

`gate train` fits the gate on the training phrasings of a seeded share of the people, calibrates its
threshold for each delta on the rest and writes RUN/gates/<label>/ (gate.json, calibration.npz); it
prints, per delta, the calibrated threshold and the calibration queries' mean exit depth. On an
`lm train` run it fits on training-shard windows and calibrates on the validation split
(`biosrecall.lm.gate`), for `biosrecall lm eval RUN --exit gate:0.05`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from biosrecall.cli.config_file import config_option
from biosrecall.cli.options import CHECKPOINT_LIST, Integer, Real, checkpoint_option, field_options
from biosrecall.interrupts import work_done
from biosrecall.numbers import DEPTH, SEED, counts, rates
from biosrecall.records import read_record
from biosrecall.train.run_folder import GATE_RECORD_FILE


@dataclass
class GateTrainOptions:
    """What one `gate train` call asks for, by the names of its options (the keywords of `fit_gates`)."""

    max_depth: int = 64
    """Deepest fixed depth searched for the reference (the best fixed depth, where the gate stops at the latest)."""

    seed: int = 0
    """Seed of the people split and the fit."""

    confidence: float = 0.95
    """Confidence of the calibration bound: recall lost <= delta with this probability."""

    batch_size: int = 256
    """Rows per forward pass."""

    device: str = "auto"
    """"auto" (CUDA when present), "cpu" or "cuda"."""

    data_dir: Path | None = None
    """Dataset folder."""


CHECKED = {
    "max_depth": {"type": Integer(DEPTH)},
    "seed": {"type": Integer(SEED)},
    "confidence": {"type": Real(rates(0, 1, low_open=True, high_open=True))},
    "batch_size": {"type": Integer(counts())},
}
"""What the options of `GateTrainOptions` take beyond their fields' types (`field_options`)."""


@click.group()
def gate() -> None:
    """Learned exit gate: fit and calibrate it on a bioS or LM run, then serve with --exit gate:DELTA."""


@gate.command("train", short_help="Fit and calibrate the exit gate of a run's checkpoints.")
@config_option()
@click.argument("run_dir", type=click.Path(path_type=Path))
@checkpoint_option("Checkpoints to fit a gate for (repeatable)", ("final",), multiple=True)
@field_options(GateTrainOptions, CHECKED)
def train(run_dir, **fields):
    """Fit the learned exit gate of RUN_DIR's checkpoints on the training phrasings of its dataset and
    calibrate its threshold per delta on held-out people (an LM run: on training-shard windows, then
    on the validation split); write RUN_DIR/gates/<label>/."""
    from biosrecall.lm.gate import fit_run_gates

    checkpoints = fields.pop(CHECKPOINT_LIST)
    written = fit_run_gates(run_dir, checkpoints, **fields)
    work_done()
    for folder in written:
        _report(folder)


def _report(folder: Path) -> None:
    from biosrecall.eval.gate import GateRecord

    record = read_record(folder / GATE_RECORD_FILE, GateRecord, "exit gate record")
    click.echo(f"wrote {folder}")
    click.echo(
        f"  reference depth {record.reference_depth} (best fixed depth on the fitting people), "
        f"confidence {record.confidence:g}"
    )
    for row in record.calibration.deltas:
        threshold = "never early" if row.threshold is None else f"logit >= {row.threshold:g}"
        click.echo(
            f"  gate:{row.delta:g}  {threshold}, mean depth {row.mean_depth:.2f}, "
            f"{row.losses}/{row.queries} calibration queries lost"
        )
