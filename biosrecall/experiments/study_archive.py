"""A finished study copied without its weights: small enough to commit, and still a study.

    archive_study("runs/study", "docs/results/study-default", overwrite=True)
    # later, anywhere: copy the archive and continue it with more seeds
    #   cp -r docs/results/study-default runs/study
    #   biosrecall figure1 --out runs/study <the same options> --seeds 0,1,2,3,4,5

A study is a `biosrecall figure1` output, a `biosrecall capacity` one (whose per-checkpoint
stored-bits tables are cached the same way) or a `biosrecall lm study` one (each run's NLL table
lies in its eval/ folder, the update diagnostic's tables under diagnose/); `figure1 --archive`,
`capacity --archive` and `lm study --archive` call this.

An archive holds results, not copies of run folders. Everything in the output is copied except what
only training or fresh scoring reads: each checkpoint's weights and training state, the resumable
states (`state-*`, `update-*`, `latest`), locks and temporaries, the sweep's bookkeeping
(`runs/.sweep/`: the command lines, process ids and logs of the machine it ran on), each run's
per-update `metrics.jsonl` (its final loss, FLOPs, tokens and wall time are in the final checkpoint's
meta.json), and inside a run's or a diagnosis's folder the CSV twin of a parquet table and the
figures (per-run views; the study's own tables and figures hold the results). What stays is what the
study's command reads to tabulate a finished run: the record, the dataset, each run's config and
per-checkpoint meta.json with the evaluation tables cached next to it as parquet
(`biosrecall.eval.table_cache`, an LM run's eval/nll.parquet, a diagnosis's tables and options), and
every result table and figure of the study (a CSV table over `LARGE_CSV_BYTES` only as its parquet
twin).

A study declared on the engine (`biosrecall study NAME --archive`, `leaderboard --archive`) keeps
those run files packed in one file, `runs.tar.xz` (`PACKED_RUNS`), instead of a runs/ folder: the
study's command on a copy unpacks it before it asks which runs are done, so a rerun still trains
nothing and added seeds or recipes train only themselves. figure1's, capacity's and the LM study's
archives keep their runs/ folder, as the archives already committed do.

An archive written by an earlier release (with those files) still loads; to slim it once, archive it
again: `biosrecall figure1 --out OLD --archive NEW` (any study's archive; trains nothing), then
replace OLD with NEW. A rerun of the same
command on a copy therefore retrains and re-evaluates nothing; added seeds train only themselves.
What a run's weights would be needed for (another serving criterion, a deeper recall curve, a
learned gate) is refused with the file it lacks.

An archive names no folder of the machine that wrote it: the paths a JSON record holds inside the
study (a run's dataset, in config.json and each meta.json; the run an LM diagnosis read) are written
relative to the run's folder, those outside the study but under the folder the archive was made
from (an LM study's corpus) relative to that folder, as a command run there names them (a path
among the words of a record's command line too), and each cached table is re-keyed to its rewritten
meta.json (`table_cache.rekey_cached`).

The archive is built under a temporary name and renamed into place, so it is complete or absent.
"""

from __future__ import annotations

import lzma
import os
import shutil
import tarfile
from pathlib import Path, PurePosixPath

from biosrecall.atomic import atomic_directory, atomic_write_json, check_output_path
from biosrecall.errors import BiosrecallError, excerpt
from biosrecall.eval.table_cache import meta_digest, rekey_cached
from biosrecall.experiments.capacity import RECORD as CAPACITY_RECORD
from biosrecall.experiments.figure1 import RECORD, RUNS
from biosrecall.experiments.lm_grid import DIAGNOSE
from biosrecall.experiments.lm_grid import RECORD as LM_RECORD
from biosrecall.files import parse_json_text
from biosrecall.locking import ASIDE_SUFFIX, TEMPORARY_SUFFIX, output_lock
from biosrecall.sweep.jobs import BOOKKEEPING
from biosrecall.train.checkpoint_files import META_FILE, MODEL_FILE, STATE_FILE
from biosrecall.train.run_folder import CONFIG_FILE, LATEST, METRICS_FILE, RunFolder, is_resumable_state

LEFT_OUT_FILES = (MODEL_FILE, STATE_FILE, METRICS_FILE)
"""What a run holds that only training or a fresh evaluation reads: a kept checkpoint's weights and
state, and the per-update log."""
RUN_VIEWS = (".csv", ".png", ".pdf")
"""Inside a run's or a diagnosis's folder: a table's CSV twin (the parquet is kept) and the figures."""
PACKED_RUNS = "runs.tar.xz"
"""An engine study's archive keeps its runs' files (configs, meta.json, cached tables) in this one
file rather than in runs/: they repeat the same parquet and pandas metadata run after run, so xz
packs them about 10x (a leaderboard's 90 bioS runs: 2.51 MB in 453 files -> 0.24 MB)."""
MAX_UNPACKED_BYTES = 2_000_000_000
"""The most a pack may unpack to: an archive's runs hold kilobytes each, not gigabytes."""
LARGE_CSV_BYTES = 1_000_000
"""A result table's CSV copy above this size is left out when its parquet twin is kept (the long
recall table: megabytes of text); a rerun of the study writes it again."""


def archive_study(
    out_dir: str | Path, dest: str | Path, overwrite: bool = False, record: str | None = None
) -> tuple[int, int]:
    """Copy the finished study `out_dir` into `dest` without weights; returns (files, bytes) copied.
    `record`: the record file of a study declared on the engine (`biosrecall.experiments.engine`)."""
    out_dir = Path(out_dir)
    known = (RECORD, CAPACITY_RECORD, LM_RECORD) if record is None else (record,)
    packs = record is not None  # an engine study's archive packs its runs (PACKED_RUNS)
    has_runs = (out_dir / RUNS).is_dir() or (packs and (out_dir / PACKED_RUNS).is_file())
    if not any((out_dir / name).is_file() for name in known) or not has_runs:
        raise BiosrecallError(
            f"{out_dir} is not a {'figure1, capacity or lm study' if record is None else record[:-5]} output "
            f"(no {', '.join(known)} and {RUNS}/ in it)"
        )
    check_output_path(dest, inputs=[out_dir])
    files = size = 0
    roots = {str(out_dir.absolute()), str(out_dir.resolve())}
    with output_lock(out_dir, clean=False):  # refused while the study is still being written
        if packs:
            unpack_runs(out_dir)
        _check_finished(out_dir / RUNS)
        with atomic_directory(dest, overwrite=overwrite) as tmp:
            records = []
            for source in sorted(_kept(out_dir, out_dir)):
                target = tmp / source.relative_to(out_dir)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
                files, size = files + 1, size + source.stat().st_size
                if source.suffix == ".json":  # a run's config and meta, the diagnosis's options
                    records.append(target)
            for copied in records:  # after the copy: a meta.json's cached tables are beside it
                _write_paths_relative(copied, tmp, roots, out_dir, Path.cwd())
            if packs:
                _pack_runs(tmp)
    return files, size


def _pack_runs(archive: Path) -> None:
    """ARCHIVE/runs as one xz-compressed tar, ARCHIVE/runs.tar.xz, and the folder removed. Byte-stable:
    sorted names, and no times, owners or modes of this machine."""
    runs = archive / RUNS
    with tarfile.open(archive / PACKED_RUNS, "w:xz", preset=9) as tar:
        for path in sorted(p for p in runs.rglob("*") if p.is_file()):
            member = tarfile.TarInfo(path.relative_to(archive).as_posix())
            member.size, member.mode = path.stat().st_size, 0o644
            with path.open("rb") as handle:
                tar.addfile(member, handle)
    shutil.rmtree(runs)


def unpack_runs(out_dir: str | Path) -> None:
    """A copied archive's packed runs (OUT/runs.tar.xz) back into OUT/runs, before anyone asks which
    runs are done; the pack is removed once the folder is in place. Nothing happens where OUT/runs
    exists or nothing is packed. A pack holding anything but a run's files, or more than
    `MAX_UNPACKED_BYTES`, is refused in one line, and nothing is written."""
    out_dir = Path(out_dir)
    packed = out_dir / PACKED_RUNS
    if not packed.is_file() or (out_dir / RUNS).exists():
        return
    try:
        with tarfile.open(packed, "r:xz") as tar:
            members = tar.getmembers()
            for member in members:
                parts = PurePosixPath(member.name).parts
                if not member.isfile() or len(parts) < 2 or parts[0] != RUNS or ".." in parts:
                    raise BiosrecallError(f"{packed} holds {excerpt(member.name)}, which is not a run's file")
            if sum(member.size for member in members) > MAX_UNPACKED_BYTES:
                raise BiosrecallError(f"{packed} unpacks to more than {MAX_UNPACKED_BYTES:,} bytes")
            with atomic_directory(out_dir / RUNS) as tmp:
                for member in members:
                    target = tmp.joinpath(*PurePosixPath(member.name).parts[1:])
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with tar.extractfile(member) as source, target.open("wb") as sink:
                        shutil.copyfileobj(source, sink)
    except (tarfile.TarError, lzma.LZMAError, EOFError) as exc:
        raise BiosrecallError(f"{packed} is not a readable pack of runs ({exc})") from None
    packed.unlink()


def _write_paths_relative(record: Path, archive: Path, roots: set[str], out_dir: Path, here: Path) -> None:
    """Rewrite a run's JSON record in `archive` with each path under `roots` (the study's folder)
    relative to the run's folder (where `RunFolder.training_data` looks for it), and each other path
    under `here` relative to `here`; a checkpoint's cached tables follow its rewritten meta.json."""
    run_dir = next((folder for folder in record.parents if (folder / CONFIG_FILE).is_file()), record.parent)

    def relative(value: str) -> str:
        for root in roots:
            if value == root or value.startswith(root + os.sep):
                return os.path.relpath(archive / os.path.relpath(value, root), run_dir)
        if os.path.isabs(value) and value.startswith(str(here) + os.sep):
            return os.path.relpath(value, here)
        return value

    def relative_words(value: str) -> str:
        """A whole path, or each path among the words of a command line (a study record's `command`)."""
        whole = relative(value)
        return whole if whole != value else " ".join(map(relative, value.split(" ")))

    before = parse_json_text(record.read_text(encoding="utf-8"), str(out_dir / record.relative_to(archive)))
    after = _map_strings(before, relative_words)
    if after == before:
        return
    is_meta = record.name == META_FILE
    old_digest = meta_digest(record.parent) if is_meta else None
    atomic_write_json(record, after)  # the format every run record is written in
    if is_meta:
        new_digest = meta_digest(record.parent)
        for cached in record.parent.glob("*.parquet"):
            rekey_cached(cached, old_digest, new_digest)


def _map_strings(value, change):
    """`value` (parsed JSON) with `change` applied to every string in it."""
    if isinstance(value, dict):
        return {key: _map_strings(item, change) for key, item in value.items()}
    if isinstance(value, list):
        return [_map_strings(item, change) for item in value]
    return change(value) if isinstance(value, str) else value


def _check_finished(runs_dir: Path) -> None:
    """Refuse a study with a run that has not finished: without its training state it could not resume."""
    # figure1: seed<S>/<name>; capacity: seed<S>/people<N>/<name>; lm study: <item>/seed<S>
    for config in sorted(runs_dir.glob(f"**/{CONFIG_FILE}")):
        if BOOKKEEPING in config.relative_to(runs_dir).parts:
            continue
        if not RunFolder(config.parent).finished():
            raise BiosrecallError(
                f"run {config.parent} has not finished; rerun the study's command until it ends, then archive"
            )


def _kept(folder: Path, out_dir: Path):
    """The files under `folder` an archive of `out_dir` keeps (module doc), not following links."""
    for entry in folder.iterdir():
        if entry.is_symlink() or _left_out(entry, out_dir):
            continue
        if entry.is_dir():
            yield from _kept(entry, out_dir)
        elif entry.is_file():
            yield entry


def _left_out(entry: Path, out_dir: Path) -> bool:
    """What only training or fresh scoring reads (`LEFT_OUT_FILES`, resumable states, locks and
    temporaries, the sweep's bookkeeping); in a run's or a diagnosis's folder a CSV twin of a parquet
    table and the figures (`RUN_VIEWS`); and among the study's own tables, a CSV twin over
    `LARGE_CSV_BYTES`."""
    name = entry.name
    if (
        name in LEFT_OUT_FILES
        or name in (LATEST, BOOKKEEPING)
        or name.endswith((TEMPORARY_SUFFIX, ASIDE_SUFFIX, ".lock"))
        or is_resumable_state(entry)
    ):
        return True
    csv_twin = entry.suffix == ".csv" and entry.with_suffix(".parquet").is_file()
    if entry.parent == out_dir:
        return csv_twin and entry.stat().st_size > LARGE_CSV_BYTES
    in_a_run = entry.relative_to(out_dir).parts[0] in (RUNS, DIAGNOSE)
    return in_a_run and entry.suffix in RUN_VIEWS and (entry.suffix != ".csv" or csv_twin)
