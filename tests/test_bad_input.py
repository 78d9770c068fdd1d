"""Every documented user mistake, across all commands, in one parametrised test.

Each case runs the CLI (in-process through `biosrecall.cli.main`, or as a real process where marked)
inside a copy of a small shared world: a dataset, a second dataset, a finished bios-tiny run, a text
corpus and a few stray files. Each asserts exit code 2, exactly one stderr line `error: ...` naming
the problem, no traceback, and that no file in the world was created, changed or removed.

    pytest -q tests/test_bad_input.py
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import click
import pytest
import torch
from harness import changes as diff
from harness import run_cli as run_in_process
from harness import snapshot

from biosrecall.cli import cli

# The run fixture's settings, spelled as CLI options so a resume with them matches the stored run.
BASE_ARGS = ["--data", "data", "--preset", "bios-tiny", "--batch-size", "4", "--seed", "1", "--save-every", "4",
             "--checkpoint-fractions", "0.5,1.0", "--quiet"]  # fmt: skip
RUN_ARGS = [*BASE_ARGS, "--budget-of", "fixed:2:8"]
NEW_RUN = ["train", "--out", "newrun", *RUN_ARGS]
EXPOSURES_RUN = ["train", "--out", "newrun", *BASE_ARGS]


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    """Built once; every case works on its own copy (see `case_dir`)."""
    from biosrecall.bios import generate_dataset
    from biosrecall.train.config import TrainConfig
    from biosrecall.train.trainer import train_bios

    root = tmp_path_factory.mktemp("world")
    generate_dataset(root / "data", people=40, seed=1)
    generate_dataset(root / "other", people=40, seed=2)
    config = TrainConfig(
        batch_size=4, budget_of="fixed:2:8", seed=1, save_every=4, checkpoint_fractions=(0.5, 1.0)
    )
    train_bios(root / "data", root / "run", config, preset="bios-tiny")
    _lm_shards(root)
    (root / "file.txt").write_text("a file, not a folder\n")
    (root / "existing").mkdir()
    (root / "existing" / "keep.txt").write_text("earlier output\n")
    corpus = root / "corpus"
    corpus.mkdir()
    (corpus / "empty.txt").write_text("\n\n   \n")
    (corpus / "good.txt").write_text("Some text to tokenize.\n\nA second document.\n")
    (corpus / "notext.jsonl").write_text('{"body": "the text sits under another key"}\n')
    (corpus / "broken.jsonl").write_text('{"text": "fine"}\n{"text": unquoted}\n')
    (corpus / "table.csv").write_text("text\nhello\n")
    (corpus / "latin1.txt").write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    return root


def _lm_shards(root: Path) -> None:
    """A tiny prepared LM folder (`lm prepare`'s output) for the `lm train` cases."""
    from biosrecall.lm.corpus import Corpus
    from biosrecall.lm.shards import prepare_corpus

    text = root / "lm.txt"
    text.write_text("Some text to tokenize.\n\nA second document.\n\n" * 20)
    prepare_corpus(Corpus([text]), root / "shards", vocab_size=300, val_fraction=0.2)


@pytest.fixture
def case_dir(world, tmp_path, monkeypatch) -> Path:
    """A private copy of the world as the working directory, so cases use relative paths only."""
    copy = tmp_path / "w"
    shutil.copytree(world, copy, symlinks=True)
    monkeypatch.chdir(copy)
    return copy


# ---- how the world is checked (snapshot, diff, run_in_process: tests/harness.py) --------------------


def run_process(argv: list[str]) -> tuple[object, str]:
    done = subprocess.run([sys.executable, "-m", "biosrecall", *argv], capture_output=True, text=True)
    return done.returncode, done.stderr


def command_exists(path: tuple[str, ...]) -> bool:
    group = cli
    for name in path:
        # get_command, not .commands: the lazy group loads a command's module only when asked
        group = group.get_command(None, name) if isinstance(group, click.Group) else None
        if group is None:
            return False
    return True


# ---- fixtures a case may need on top of the world ---------------------------------------------------


def corrupt_manifest(w: Path) -> None:
    (w / "data" / "manifest.json").write_text("{ this is not json")


def tamper_array(w: Path) -> None:
    path = w / "data" / "person_values.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def run_without_checkpoints(w: Path) -> None:
    """A run folder whose process died before its first save: config.json only."""
    (w / "fresh").mkdir()
    shutil.copy(w / "run" / "config.json", w / "fresh" / "config.json")


def broken_templates(w: Path) -> None:
    """A template folder whose training file uses a placeholder that does not exist."""
    from biosrecall.paths import TEMPLATES_DIR

    shutil.copytree(TEMPLATES_DIR, w / "templates")
    train = w / "templates" / "train.toml"
    train.write_text(train.read_text().replace("comes from {value}.", "comes from {valeu}."))


def move_recorded_dataset(w: Path) -> None:
    """The checkpoints name a dataset folder that is no longer there."""
    for meta_path in (w / "run" / "checkpoints").glob("*/meta.json"):
        meta = json.loads(meta_path.read_text())
        meta["dataset"]["path"] = str(w / "moved-away")
        meta_path.write_text(json.dumps(meta))


@dataclass(frozen=True)
class Case:
    id: str
    argv: list[str]
    expect: str
    """A distinctive piece of the error line (case-sensitive)."""
    prepare: object = None
    process: bool = False
    """Run as a real `python -m biosrecall` process (the console entry point, signals, exit code)."""
    requires: tuple[str, ...] = ()
    """The command path this case needs, for commands that may not be registered yet."""
    skip_if: str = ""
    """"cuda": the case only means something on a machine without CUDA."""
    marks: list = field(default_factory=list)


GENERATE = ["generate", "--out", "newdata"]
FIGURE1_QUICK = ["figure1", "--out", "fig", "--preset", "quick", "--quiet"]
LM_TRAIN = ["lm", "train", "--data", "shards", "--out", "lmrun", "--updates", "2", "--quiet"]
CASES = [
    # generate
    Case("generate-people-zero", [*GENERATE, "--people", "0"], "'--people': people must be a positive integer, got 0"),
    Case("generate-people-negative", [*GENERATE, "--people", "-4"], "'--people': people must be a positive integer, got -4"),
    Case("generate-people-not-int", [*GENERATE, "--people", "many"], "'many' is not a valid integer"),
    Case("generate-people-above-names", [*GENERATE, "--people", "200000000"], "distinct full names"),
    Case("generate-pool-above-length", [*GENERATE, "--pool-size", "birth_city=501"], "above the pool length"),
    Case("generate-pool-below-two", [*GENERATE, "--pool-size", "major=1"], "pool sizes: field 'major': expected int >= 2, got 1"),
    Case("generate-pool-unknown-attribute", [*GENERATE, "--pool-size", "planet=4"],
         "pool sizes: field 'planet' is unknown (known: first_name"),
    Case("generate-pool-no-size", [*GENERATE, "--pool-size", "birth_city"], "--pool-size expects NAME=SIZE"),
    Case("generate-pool-size-not-int", [*GENERATE, "--pool-size", "major=ten"],
         "--pool-size expects NAME=SIZE"),
    Case("generate-existing-output", ["generate", "--out", "existing"], "pass --overwrite"),
    Case("generate-overwrite-bad-people-keeps-folder", ["generate", "--out", "existing", "--overwrite", "--people", "0"],
         "'--people': people must be a positive integer, got 0"),
    Case("generate-output-under-file", ["generate", "--out", "file.txt/data"], "file.txt is a file"),
    Case("generate-templates-missing", [*GENERATE, "--templates", "no-such-templates"],
         "templates folder no-such-templates not found"),
    Case("generate-template-bad-placeholder", [*GENERATE, "--templates", "templates"],
         "unknown placeholder {valeu}",
         prepare=broken_templates),
    # train: dataset, budget, device, model, schedule
    Case("train-dataset-missing", ["train", "--out", "newrun", *RUN_ARGS[2:], "--data", "nowhere"],
         "dataset folder nowhere not found"),
    Case("train-dataset-corrupt-manifest", NEW_RUN,
         "manifest.json is corrupt: Expecting property name", prepare=corrupt_manifest),
    Case("train-dataset-tampered-array", NEW_RUN,
         "person_values.npy does not match its sha256", prepare=tamper_array),
    Case("train-budget-below-one-update", ["train", "--out", "newrun", *BASE_ARGS, "--budget", "1"],
         "is smaller than one update"),
    Case("train-budget-and-budget-of", [*NEW_RUN, "--budget", "1e12"], "give exactly one of --budget"),
    Case("train-budget-of-malformed", [*NEW_RUN, "--budget-of", "fixed:4:many"],
         "--budget-of takes SPEC:UPDATES"),
    # --exposures E sizes a run by its data (every biography seen E times), so it stands alone
    *(Case(f"train-exposures-{name}", [*EXPOSURES_RUN, "--exposures", value],
           "exposures must be a positive finite number")
      for name, value in (("zero", "0"), ("negative", "-3"), ("infinite", "inf"), ("nan", "nan"))),
    Case("train-exposures-not-ascii", [*EXPOSURES_RUN, "--exposures", "\u0665"], "expected a number, got '\u0665'"),
    Case("train-exposures-and-budget", [*EXPOSURES_RUN, "--exposures", "5", "--budget", "1e12"],
         "--exposures sets the run's length itself (every biography seen E times); give it without --budget"),
    Case("train-exposures-and-updates", [*EXPOSURES_RUN, "--exposures", "5", "--updates", "4"],
         "give it without --updates"),
    Case("train-exposures-and-budget-of", [*NEW_RUN, "--exposures", "5"], "give it without --budget-of"),
    Case("train-exposures-in-config-file", [*EXPOSURES_RUN, "--config", "exposures.toml"],
         "exposures.toml: exposures must be a positive finite number, got -1.5",
         prepare=lambda w: (w / "exposures.toml").write_text("exposures = -1.5\n")),
    Case("train-exposures-too-many", [*EXPOSURES_RUN, "--exposures", "1e9"],
         "beyond the planner's limit of 1,000,000"),
    Case("train-exposures-on-a-standard-transformer-at-depth-4",
         [*EXPOSURES_RUN, "--exposures", "1", "--preset", "bios-tiny-std-params", "--schedule", "fixed:4"],
         "no recurrent block (a standard transformer, one depth): train it with --schedule fixed:1"),
    Case("train-unknown-device", [*NEW_RUN, "--device", "tpu"], "unknown device 'tpu'"),
    Case("train-cuda-absent", [*NEW_RUN, "--device", "cuda"], "no CUDA device", skip_if="cuda"),
    # bf16 on CPU is supported since bf16 autocast was checked there (tests/test_bf16.py).
    Case("train-unknown-precision", [*NEW_RUN, "--precision", "fp8"], "'fp8' is not one of"),
    Case("train-unknown-preset", [*NEW_RUN, "--preset", "bios-huge"], "unknown preset 'bios-huge'"),
    Case("train-model-override-unknown-field", [*NEW_RUN, "--model-override", "n_blok=2"],
         "unknown model config field 'n_blok'"),
    Case("train-model-override-disagrees", [*NEW_RUN, "--norm", "sandwich", "--model-override", "norm=pre"],
         "--norm sandwich and --model-override norm=pre disagree"),
    Case("train-preset-vocab-mismatch", [*NEW_RUN, "--preset", "lm-tiny"], "but the dataset needs"),
    Case("train-seq-len-above-context", [*NEW_RUN, "--seq-len", "4096"], "exceeds the model's context"),
    Case("train-batch-size-zero", [*NEW_RUN, "--batch-size", "0"], "batch_size must be a positive integer"),
    Case("train-schedule-unknown", [*NEW_RUN, "--schedule", "wobbly:3"], "unknown schedule 'wobbly'"),
    Case("train-schedule-malformed", [*NEW_RUN, "--schedule", "fixed:four"],
         "depth='four' is not an integer"),
    Case("train-switch-above-one", [*NEW_RUN, "--schedule", "fixed_first:k0=4,switch=1.5"],
         "switch must be a number in (0, 1), got 1.5"),
    Case("train-switch-zero", [*NEW_RUN, "--schedule", "fixed_first:k0=4,switch=0"],
         "switch must be a number in (0, 1), got 0.0"),
    Case("train-k0-outside-range", [*NEW_RUN, "--schedule", "fixed_first:k0=20,switch=0.8"],
         "k0=20 lies outside"),
    Case("train-unknown-finish", [*NEW_RUN, "--schedule", "fixed_first:k0=4,switch=0.8,finish=zigzag"],
         "unknown finish 'zigzag'"),
    Case("train-depth-zero", [*NEW_RUN, "--schedule", "fixed:0"], "depth must be a positive integer, got 0"),
    Case("train-backprop-depth-zero", [*NEW_RUN, "--backprop-depth", "0"],
         "backprop_depth must be a positive integer"),
    Case("train-fractions-outside", [*NEW_RUN, "--checkpoint-fractions", "0,1.5"],
         "fractions must lie in (0, 1]"),
    Case("train-fractions-malformed", [*NEW_RUN, "--checkpoint-fractions", "half"],
         "comma-separated fractions"),
    # train: run folder rules
    Case("train-existing-run", ["train", "--out", "run", *RUN_ARGS], "pass --resume or --overwrite"),
    Case("train-overwrite-bad-device-keeps-run", ["train", "--out", "run", *RUN_ARGS, "--overwrite", "--device", "tpu"],
         "unknown device 'tpu'"),
    Case("train-overwrite-tiny-budget-keeps-run", ["train", "--out", "run", *BASE_ARGS, "--overwrite", "--budget", "1"],
         "is smaller than one update"),
    Case("train-resume-and-overwrite", ["train", "--out", "run", *RUN_ARGS, "--resume", "--overwrite"],
         "contradict"),
    Case("train-resume-empty-folder", ["train", "--out", "existing", *RUN_ARGS, "--resume"],
         "existing is not a run folder (no config.json)"),
    Case("train-resume-no-checkpoint", ["train", "--out", "fresh", *RUN_ARGS, "--resume"],
         "no saved checkpoint",
         prepare=run_without_checkpoints),
    Case("train-resume-other-config", ["train", "--out", "run", *RUN_ARGS, "--resume", "--lr", "0.01"],
         "cannot resume: train_config.lr differs"),
    Case("train-resume-other-dataset", ["train", "--out", "run", *RUN_ARGS, "--resume", "--data", "other"],
         "cannot resume: dataset.manifest_hash differs"),
    Case("train-out-is-file-process", ["train", "--out", "file.txt", *RUN_ARGS],
         "is not a folder", process=True),
    # flops
    Case("flops-unknown-preset", ["flops", "--preset", "lm-3b"], "unknown preset 'lm-3b'"),
    Case("flops-malformed-schedule", ["flops", "--preset", "bios-cpu", "--schedule", "uniform:16-1"],
         "uniform range 16-1 is empty"),
    Case("flops-switch-outside", ["flops", "--schedule", "fixed_first:k0=4,switch=2"],
         "switch must be a number in (0, 1), got 2.0"),
    Case("flops-backprop-depth-zero", ["flops", "--preset", "bios-cpu", "--backprop-depth", "0"],
         "backprop_depth must be a positive integer"),
    # recall-curve
    Case("recall-not-a-run", ["recall-curve", "data"], "is not a run folder"),
    Case("recall-no-checkpoints", ["recall-curve", "fresh"],
         "has no checkpoints yet", prepare=run_without_checkpoints),
    Case("recall-missing-fraction", ["recall-curve", "run", "--checkpoint", "0.3"],
         "no checkpoint at fraction 0.3"),
    Case("recall-dataset-missing", ["recall-curve", "run", "--data", "nowhere"],
         "dataset folder nowhere does not exist"),
    Case("recall-recorded-dataset-gone", ["recall-curve", "run"],
         "moved-away", prepare=move_recorded_dataset),
    Case("recall-hash-mismatch", ["recall-curve", "run", "--data", "other"], "is not the one"),
    Case("recall-max-depth-zero", ["recall-curve", "run", "--max-depth", "0"],
         "'--max-depth': max_depth must be a positive integer, got 0"),
    Case("recall-threshold-zero", ["recall-curve", "run", "--threshold", "0"],
         "'--threshold': threshold must be a positive integer, got 0"),
    Case("recall-threshold-above-templates", ["recall-curve", "run", "--threshold", "6"],
         "threshold must be between 1 and 5"),
    Case("recall-out-is-file", ["recall-curve", "run", "--max-depth", "2", "--out", "file.txt"], "file.txt"),
    # figure1
    Case("figure1-unknown-preset", ["figure1", "--out", "fig", "--preset", "huge"],
         "unknown figure1 preset 'huge'"),
    Case("figure1-fixed-sweep-malformed", ["figure1", "--out", "fig", "--fixed-sweep", "1,two"],
         "comma-separated depths"),
    Case("figure1-fixed-sweep-zero", ["figure1", "--out", "fig", "--fixed-sweep", "0,2"],
         "'--fixed-sweep': depths must be a positive integer, got 0"),
    Case("figure1-budget-below-one-update", [*FIGURE1_QUICK, "--budget", "1"], "is smaller than one update"),
    Case("figure1-unknown-device", [*FIGURE1_QUICK, "--device", "tpu"], "unknown device 'tpu'"),
    Case("figure1-out-is-file", ["figure1", "--out", "file.txt", "--preset", "quick", "--quiet"], "file.txt"),
    # lm prepare
    Case("lm-prepare-empty-corpus", ["lm", "prepare", "corpus/empty.txt", "--out", "lmdata"],
         "the corpus is empty"),
    Case("lm-prepare-missing-text-column", ["lm", "prepare", "corpus/notext.jsonl", "--out", "lmdata"],
         "notext.jsonl:1 has no column 'text' (columns: body; set --text-column)"),
    Case("lm-prepare-input-missing", ["lm", "prepare", "corpus/absent.txt", "--out", "lmdata"],
         "does not exist"),
    Case("lm-prepare-unsupported-type", ["lm", "prepare", "corpus/table.csv", "--out", "lmdata"],
         "unsupported file type"),
    Case("lm-prepare-invalid-json", ["lm", "prepare", "corpus/broken.jsonl", "--out", "lmdata"],
         "not valid JSON"),
    Case("lm-prepare-invalid-utf8", ["lm", "prepare", "corpus/latin1.txt", "--out", "lmdata"],
         "not valid UTF-8"),
    Case("lm-prepare-tokenizer-and-vocab", ["lm", "prepare", "corpus/good.txt", "--out", "lmdata",
         "--tokenizer", "data/tokenizer.json", "--vocab-size", "300"], "either --tokenizer or --vocab-size"),
    Case("lm-prepare-bad-tokenizer", ["lm", "prepare", "corpus/good.txt", "--out", "lmdata", "--tokenizer", "file.txt"],
         "file.txt is not a valid tokenizer.json"),
    Case("lm-prepare-existing-output", ["lm", "prepare", "corpus/good.txt", "--out", "existing"],
         "pass --overwrite"),
    Case("lm-prepare-val-fraction", ["lm", "prepare", "corpus/good.txt", "--out", "lmdata", "--val-fraction", "1.5"],
         "Invalid value for '--val-fraction'"),
    # lm train / eval / compare / plan
    Case("lm-train-data-missing", ["lm", "train", "--data", "nowhere", "--out", "lmrun"],
         "is not a prepared folder",
         requires=("lm", "train")),
    Case("lm-train-bios-data", ["lm", "train", "--data", "data", "--out", "lmrun"],
         "not a biosrecall LM shard manifest of format version 1",
         requires=("lm", "train")),
    Case("lm-train-unknown-preset", [*LM_TRAIN, "--preset", "bios-huge"], "unknown preset 'bios-huge'",
         requires=("lm", "train")),
    Case("lm-train-depth-zero", [*LM_TRAIN, "--schedule", "fixed:0"], "depth must be a positive integer, got 0",
         requires=("lm", "train")),
    Case("lm-train-config-missing", [*LM_TRAIN, "--config", "missing.toml"], "--config file missing.toml does not exist",
         requires=("lm", "train")),
    Case("lm-train-updates-zero", ["lm", "train", "--data", "shards", "--out", "lmrun", "--updates", "0"],
         "'--updates'", requires=("lm", "train")),
    Case("lm-train-vocab-too-small", [*LM_TRAIN, "--vocab-size", "10"], "only 10", requires=("lm", "train")),
    Case("lm-eval-not-a-run", ["lm", "eval", "nowhere"],
         "nowhere is not a run folder", requires=("lm", "eval")),
    Case("lm-eval-bios-run", ["lm", "eval", "run"], "is not a language-model run", requires=("lm", "eval")),
    Case("lm-compare-not-evaluated", ["lm", "compare", "--out", "cmp", "nowhere"], "has no eval/nll.parquet",
         requires=("lm", "compare")),
    Case("lm-plan-unknown-preset", ["lm", "plan", "--preset", "nope", "--updates", "3"],
         "unknown preset 'nope'",
         requires=("lm", "plan")),
    # diagnose-update
    Case("diagnose-not-a-run", ["diagnose-update", "nowhere"], "nowhere is not a run folder",
         requires=("diagnose-update",)),
    Case("diagnose-missing-fraction", ["diagnose-update", "run", "--checkpoint", "0.3"],
         "no checkpoint at fraction 0.3", requires=("diagnose-update",)),
    Case("diagnose-one-depth", ["diagnose-update", "run", "--depths", "4"], "--depths takes two depths",
         requires=("diagnose-update",)),
    Case("diagnose-bad-rms", ["diagnose-update", "run", "--rms", "loud"], "--rms takes shallow, deep",
         requires=("diagnose-update",)),
    Case("diagnose-serving-depth-zero", ["diagnose-update", "run", "--serving-depths", "0..3"],
         "--serving-depths needs values >= 1", requires=("diagnose-update",)),
    Case("diagnose-negative-people", ["diagnose-update", "run", "--people", "-1"],
         "--people must be a non-negative integer, got -1",
         requires=("diagnose-update",)),
    Case("diagnose-hash-mismatch", ["diagnose-update", "run", "--data", "other"],
         "is not the one run was trained on",
         requires=("diagnose-update",)),
    # the command line itself
    Case("unknown-command", ["frobnicate"], "No such command 'frobnicate'"),
    Case("train-missing-required", ["train", "--out", "newrun"], "Missing option '--data'"),
]  # fmt: skip


def _param(case: Case):
    return pytest.param(case, id=case.id, marks=case.marks)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_mistake_gives_one_error_line_exit_2_and_touches_nothing(case: Case, case_dir: Path, capsys):
    if case.requires and not command_exists(case.requires):
        pytest.skip(f"`biosrecall {' '.join(case.requires)}` is not registered yet")
    if case.skip_if == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    if case.prepare is not None:
        case.prepare(case_dir)
    before = snapshot(case_dir)
    code, stderr = run_process(case.argv) if case.process else run_in_process(case.argv, capsys)
    after = snapshot(case_dir)
    assert "Traceback" not in stderr, stderr
    lines = stderr.splitlines()
    assert code == 2, f"exit {code}; stderr: {stderr}"
    assert len(lines) == 1 and lines[0].startswith("error: ") and lines[0] != "error: ", stderr
    assert case.expect in lines[0], lines[0]
    assert diff(before, after) == [], f"files touched: {diff(before, after)}"
