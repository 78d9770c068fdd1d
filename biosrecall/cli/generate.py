"""`biosrecall generate` (write a bioS dataset folder) and `biosrecall pools` (rebuild the frozen pools).

    biosrecall generate --out data/bios-1k --people 1000 --seed 0
    biosrecall generate --out data/bios-big --people 100000 --pool-size employer=256 --overwrite
    biosrecall pools --check          # do the committed pools match a rebuild?

The commands only parse options, call `biosrecall.bios`, and print a short summary.
"""

from __future__ import annotations

from pathlib import Path

import click

from biosrecall.bios import ATTRIBUTES, DEFAULT_POOL_SIZES, generate_dataset, load_dataset
from biosrecall.bios.pools import build_pools, stale_pool_files
from biosrecall.errors import BiosrecallError
from biosrecall.locking import output_lock
from biosrecall.paths import POOLS_DIR

_DEFAULT_SIZES_TEXT = " ".join(f"{name}={size}" for name, size in DEFAULT_POOL_SIZES.items())


def parse_pool_sizes(items: tuple[str, ...]) -> dict[str, int]:
    """`("birth_city=128", ...)` -> `{"birth_city": 128}`; names are checked by the library."""
    sizes = {}
    for item in items:
        name, equals, size = item.partition("=")
        try:
            value = int(size)
        except ValueError:
            value = None
        if not equals or not name.strip() or value is None:
            raise BiosrecallError(f"--pool-size expects NAME=SIZE with an integer SIZE, got '{item}'")
        sizes[name.strip()] = value
    return sizes


def _summary(path: Path) -> list[str]:
    dataset = load_dataset(path)
    bits = ", ".join(f"{a} {dataset.bits_per_attribute[a]:.2f}" for a in ATTRIBUTES)
    files = ", ".join(sorted(p.name for p in path.iterdir()))
    return [
        f"wrote {path}",
        f"  people        {dataset.num_people} (seed {dataset.manifest['seed']})",
        f"  bits/person   {dataset.total_bits:.2f} ({bits})",
        f"  chance bits   {dataset.chance_bits:.2f} (always answering each attribute's most common value)",
        f"  vocab size    {dataset.vocab_size}",
        f"  files         {files}",
    ]


@click.command()
@click.option(
    "--out",
    required=True,
    type=click.Path(path_type=Path),
    help="Dataset folder to create (must be new or empty).",
)
@click.option("--people", default=1000, show_default=True, type=int, help="Number of fictional people.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed for names and attribute values.")
@click.option(
    "--pool-size",
    "pool_sizes",
    multiple=True,
    metavar="NAME=SIZE",
    help=f"Use the first SIZE values of a pool (repeatable). Defaults, 33.39 bits/person: {_DEFAULT_SIZES_TEXT}.",
)
@click.option(
    "--holdout-eval-templates",
    is_flag=True,
    help="Keep the 5 evaluation phrasings out of training (an extraction variant of the task).",
)
@click.option(
    "--templates",
    "templates_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Folder holding train.toml and eval.toml.  [default: the package's templates/]",
)
@click.option("--overwrite", is_flag=True, help="Replace an existing non-empty output folder.")
def generate(
    out: Path,
    people: int,
    seed: int,
    pool_sizes: tuple[str, ...],
    holdout_eval_templates: bool,
    templates_dir: Path | None,
    overwrite: bool,
) -> None:
    """Generate a bioS dataset: people, manifest, tokenizer and pre-tokenized arrays."""
    path = generate_dataset(
        out,
        people=people,
        seed=seed,
        pool_sizes=parse_pool_sizes(pool_sizes),
        holdout_eval_templates=holdout_eval_templates,
        overwrite=overwrite,
        templates_dir=templates_dir,
    )
    click.echo("\n".join(_summary(path)))


@click.command()
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Folder for the pool files.  [default: the package's data/pools/]",
)
@click.option("--overwrite", is_flag=True, help="Replace an existing non-empty folder.")
@click.option("--check", is_flag=True, help="Only compare the folder with a rebuild; fail if they differ.")
def pools(out: Path | None, overwrite: bool, check: bool) -> None:
    """Rebuild the frozen attribute pools from Faker with the fixed seed."""
    folder = out if out is not None else POOLS_DIR
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
