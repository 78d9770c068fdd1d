"""`biosrecall generate` (write a bioS dataset folder, and its text) and `biosrecall pools` (rebuild the pools).

    biosrecall generate --out data/bios-1k --people 1000 --seed 0
    biosrecall generate --out data/bios-big --people 100000 --pool-size employer=256 --overwrite
    biosrecall generate --out data/bios-mine --pools-dir my_pools --pool-size birth_city=200
    biosrecall generate --out data/bios-1k --export-text jsonl --text-out data/bios-1k-text --exposures 100
    biosrecall generate --from-dataset data/bios-1k --export-text parquet --text-out data/bios-1k-parquet
    biosrecall pools --check          # do the committed pools match a rebuild?

Why the text export is part of `generate` and writes its own folder (`--text-out`): the text is another
view of a dataset, so one command makes both in one go, or the text alone of a dataset made earlier
(`--from-dataset`); and a separate folder keeps the dataset folder exactly the files its manifest lists,
each folder with its own lock, atomic swap and `--overwrite`. Every option names one thing whichever
way the command is used: `--out` is always the dataset to create, `--text-out` always the text folder.

The commands only parse options, call `biosrecall.bios`, and print a short summary.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from biosrecall.atomic import committed
from biosrecall.bios import ATTRIBUTES, DEFAULT_POOL_SIZES, NAME_PARTS, generate_dataset
from biosrecall.bios.dataset import FORMAT, MANIFEST
from biosrecall.bios.export_text import (
    DEFAULT_EXPOSURES,
    MAX_EXPOSURES,
    TEXT_FORMATS,
    TextExport,
    check_export_size,
    export_text,
)
from biosrecall.bios.pools import build_pools, pool_lengths, stale_pool_files
from biosrecall.bios.validation import read_manifest
from biosrecall.cli.config_file import config_option
from biosrecall.cli.options import Integer, field_options, refuse_given
from biosrecall.errors import BiosrecallError
from biosrecall.interrupts import work_done
from biosrecall.locking import output_lock
from biosrecall.numbers import SEED, counts, parse_int
from biosrecall.paths import POOLS_DIR, TEMPLATES_DIR, writable_pools_dir
from biosrecall.sizing import show_bytes

_DEFAULT_SIZES_TEXT = " ".join(f"{name}={size}" for name, size in DEFAULT_POOL_SIZES.items())
# Options that describe a dataset to generate, so they mean nothing with --from-dataset.
_GENERATION_OPTIONS = ("out", "people", "pool_sizes", "pools_dir", "holdout_eval_templates", "templates_dir")


@dataclass
class GenerateOptions:
    """The options of `generate`, one per field (`field_options`; the help of each is the docstring
    under it)."""

    out: Path | None = None
    """Dataset folder to create (must be new or empty); not with --from-dataset."""

    people: int = 1000
    """Number of fictional people."""

    seed: int = 0
    """Seed for names and attribute values, and for the phrasing and order of --export-text."""

    pool_sizes: tuple[str, ...] = ()
    """Use the first SIZE values of a pool (repeatable, NAME=SIZE); the defaults are
    `biosrecall.bios.DEFAULT_POOL_SIZES`."""

    pools_dir: Path | None = None
    """Folder of your own pool files, in the format of data/pools/ (first_name.txt ... employer.txt, one
    value per line); --pool-size and the default sizes still pick the first n lines of each.  [default:
    the package's data/pools/]"""

    holdout_eval_templates: bool = False
    """Keep the 5 evaluation phrasings out of training (an extraction variant of the task)."""

    templates_dir: Path | None = None
    """Folder holding train.toml and eval.toml.  [default: the package's templates/]"""

    text_format: str | None = None
    """Also write the training biographies and the evaluation prompts with answers as text (JSON Lines or
    parquet, for datasets.load_dataset) into --text-out."""

    text_out: Path | None = None
    """Folder for --export-text (must be new or empty; not inside the dataset)."""

    exposures: int = DEFAULT_EXPOSURES
    """With --export-text: how many times every person's biography is written, each time freshly phrased
    and ordered by the training sampler."""

    from_dataset: Path | None = None
    """Export the text of this existing dataset folder instead of generating one."""

    overwrite: bool = False
    """Replace existing non-empty output folders."""


CHECKED = {
    "people": {"type": Integer(counts())},
    "seed": {"type": Integer(SEED)},
    "pool_sizes": {
        "flag": "--pool-size",
        "type": str,
        "multiple": True,
        "metavar": "NAME=SIZE",
        "help": f"Use the first SIZE values of a pool (repeatable). Defaults, 33.39 bits/person: "
        f"{_DEFAULT_SIZES_TEXT}.",
    },
    "templates_dir": {"flag": "--templates"},
    "text_format": {"flag": "--export-text", "type": click.Choice(TEXT_FORMATS)},
    "exposures": {"type": Integer(counts(high=MAX_EXPOSURES, why="the text export's limit"))},
}
"""What the options of `GenerateOptions` take beyond their fields' types (`field_options`)."""


def parse_pool_sizes(items: tuple[str, ...]) -> dict[str, int]:
    """`("birth_city=128", ...)` -> `{"birth_city": 128}`; names are checked by the library."""
    sizes = {}
    for item in items:
        name, equals, size = item.partition("=")
        try:
            value = parse_int(size.strip())
        except BiosrecallError:
            value = None
        if not equals or not name.strip() or value is None:
            raise BiosrecallError(f"--pool-size expects NAME=SIZE with an integer SIZE, got '{item}'")
        sizes[name.strip()] = value
    return sizes


def _summary(path: Path, pools_dir: Path | None) -> list[str]:
    # From the manifest alone: reading the whole dataset back would double the memory generating it
    # took, and a dataset that only just fit would fail here, after it was written.
    _, manifest = read_manifest(path / MANIFEST, FORMAT)
    bits = ", ".join(f"{a} {manifest['bits_per_attribute'][a]:.2f}" for a in ATTRIBUTES)
    # with pools of one's own, show how much of each file is in use: sizes are not the files' lengths
    lengths = pool_lengths(pools_dir) if pools_dir is not None else {}
    sizes = ", ".join(
        f"{a} {manifest['pool_sizes'][a]}" + (f" of {lengths[a]}" if a in lengths else "") for a in ATTRIBUTES
    )
    names = " x ".join(str(manifest["name_pool_sizes"][part]) for part in NAME_PARTS)
    files = ", ".join(sorted(p.name for p in path.iterdir()))
    return [
        f"wrote {path}",
        f"  people        {manifest['num_people']} (seed {manifest['seed']})",
        f"  pool sizes    {sizes}; names {names}",
        f"  bits/person   {manifest['total_bits']:.2f} ({bits})",
        f"  chance bits   {manifest['chance_bits']:.2f} (always answering each attribute's most common value)",
        f"  vocab size    {manifest['tokenizer']['vocab_size']}",
        f"  files         {files}",
    ]


def _text_summary(path: Path, manifest: dict) -> list[str]:
    files = manifest["files"]
    train, evaluation = (f"{stem}.{manifest['text_format']}" for stem in ("train", "eval"))
    loader = "json" if manifest["text_format"] == "jsonl" else "parquet"
    return [
        f"wrote {path} ({manifest['dataset']['num_people']} people x {manifest['exposures']} exposures, "
        f"seed {manifest['seed']})",
        f"  {train:<13} {files[train]['records']:,} biographies, {show_bytes(files[train]['bytes'])}",
        f"  {evaluation:<13} {files[evaluation]['records']:,} prompts with answers "
        f"(6 attributes x 5 prompts per person), {show_bytes(files[evaluation]['bytes'])}",
        f'  load with     datasets.load_dataset("{loader}", data_files="{path / train}", split="train")',
    ]


def _text_export(ctx: click.Context, options: GenerateOptions) -> TextExport | None:
    """The export the options ask for, or None; text options without --export-text are refused."""
    if options.text_format is None:
        refuse_given(ctx, ("text_out", "exposures"), "only applies with --export-text FORMAT")
        return None
    if options.text_out is None:
        raise BiosrecallError("--export-text needs --text-out DIR, the folder to write the text files into")
    return TextExport(
        options.text_out, options.text_format, options.exposures, options.seed, options.overwrite
    )


def _dataset_to_read(ctx, out: Path | None, from_dataset: Path | None, exporting: bool) -> Path:
    """The dataset folder the command writes (--out) or only reads (--from-dataset)."""
    if from_dataset is None:
        if out is None:
            raise BiosrecallError("missing option --out (the dataset folder to create) or --from-dataset DIR")
        return out
    read_only = "describes a dataset to generate, not one read by --from-dataset"
    refuse_given(ctx, ("out",), f"{read_only}; the text folder is --text-out")
    refuse_given(ctx, _GENERATION_OPTIONS, read_only)
    if not exporting:
        raise BiosrecallError("--from-dataset exports an existing dataset's text: give --export-text FORMAT")
    return from_dataset


@click.command()
@config_option()
@field_options(GenerateOptions, CHECKED)
@click.pass_context
def generate(ctx: click.Context, **fields) -> None:
    """Generate a bioS dataset: people, manifest, tokenizer and pre-tokenized arrays; with
    --export-text, also its text for other trainers (or only that, --from-dataset)."""
    options = GenerateOptions(**fields)
    from_dataset, pools_dir = options.from_dataset, options.pools_dir
    dataset_dir = _dataset_to_read(ctx, options.out, from_dataset, exporting=options.text_format is not None)
    export = _text_export(ctx, options)
    if export is not None:  # refuse a bad text output before the dataset is written
        export.check(inputs=[dataset_dir, pools_dir or POOLS_DIR, options.templates_dir or TEMPLATES_DIR])
        if from_dataset is None:
            check_export_size(options.people, export)
    if from_dataset is None:
        try:
            generate_dataset(
                dataset_dir,
                people=options.people,
                seed=options.seed,
                pool_sizes=parse_pool_sizes(options.pool_sizes),
                holdout_eval_templates=options.holdout_eval_templates,
                overwrite=options.overwrite,
                templates_dir=options.templates_dir,
                pools_dir=pools_dir,
                report=lambda stage: click.echo(stage, err=True),
            )
            if export is None:
                work_done()  # the dataset is written: a Ctrl-C during the summary interrupts nothing
        except KeyboardInterrupt:
            # Stopped after the dataset was swapped into place (while letting go of the lock, or just
            # before `work_done`): nothing was interrupted, unless a text export was still to come.
            if export is not None or not committed(dataset_dir):
                raise
            work_done()
        click.echo("\n".join(_summary(dataset_dir, pools_dir)))
    if export is not None:
        manifest = export_text(dataset_dir, export)
        work_done()
        click.echo("\n".join(_text_summary(export.out_dir, manifest)))


@click.command()
@config_option()
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Folder for the pool files.  [default: the checkout's data/pools/; required for an installed package]",
)
@click.option("--overwrite", is_flag=True, help="Replace an existing non-empty folder.")
@click.option("--check", is_flag=True, help="Only compare the folder with a rebuild; fail if they differ.")
def pools(out: Path | None, overwrite: bool, check: bool) -> None:
    """Rebuild the frozen attribute pools from Faker with the fixed seed."""
    folder = (out if out is not None else POOLS_DIR) if check else writable_pools_dir(out)
    if check:
        stale = stale_pool_files(folder)
        if stale:
            raise BiosrecallError(f"pool files in {folder} differ from a rebuild: {', '.join(stale)}")
        click.echo(f"pools in {folder} match a rebuild")
        return
    with output_lock(folder):  # one rebuild at a time; leftovers of a killed one are cleaned
        build_pools(folder, overwrite=overwrite)
    counts = ", ".join(f"{p.stem} {len(p.read_text().splitlines())}" for p in sorted(folder.glob("*.txt")))
    click.echo(f"wrote {folder}: {counts}")
