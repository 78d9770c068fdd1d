"""Train a small GPT-2 with the Hugging Face Trainer on biosrecall's exported text, then score its recall.

The route a client with their own trainer takes: export bioS as text, train on it with the dataset's
own word-level tokenizer, save the model with that tokenizer, and let `recall-curve --hf-model`
score it by the same rule as biosrecall's own runs (a fact is recalled when at least 4 of its 5
evaluation prompts are answered exactly). The install line and the three commands:

    pip install -e ".[hf,datasets]"          # transformers, accelerate and datasets
    biosrecall generate --out data/bios-50 --people 50 --export-text jsonl \\
        --text-out data/bios-50-text --exposures 100
    python examples/hf_trainer_gpt2.py --data data/bios-50 --text data/bios-50-text \\
        --out models/gpt2-bios
    biosrecall recall-curve --hf-model models/gpt2-bios --data data/bios-50 --out recall-gpt2-bios

What it does. The dataset's `tokenizer.json` is wrapped as a `PreTrainedTokenizerFast` that puts
<sep> before every text, exactly as `biosrecall export` ships it (`hf.export.save_tokenizer`), so a
biography is encoded as biosrecall's trainer sees it and an evaluation prompt is scored with the
same leading <sep>. The biographies (`train.jsonl` or `train.parquet`) are tokenized, concatenated
and cut into blocks of `--block-size` tokens (the usual causal-LM recipe), and a `GPT2LMHeadModel`
built from a `GPT2Config` (random initialisation, nothing downloaded) is trained for `--steps` updates
by `transformers.Trainer`. The model folder (`config.json`, `model.safetensors`,
`generation_config.json`, the tokenizer files) is built under a temporary name and renamed into
`--out` only when training succeeded, so a failed run leaves nothing half-written.

Needs the `hf` and `datasets` extras (`pip install "biosrecall[hf,datasets]"`: transformers,
accelerate, which `transformers.Trainer` requires, and datasets); without them it stops with one
`error:` line naming the missing extra. The defaults (2 layers, width 64, 1,000 updates of 16 rows
of 128 tokens, about 6 passes over the 50 people's 5,000 biographies) are sized to finish in minutes
on a CPU (docs/guides/hugging-face.md has the measured time and bits).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
import tempfile
import time
from pathlib import Path

from biosrecall.errors import BiosrecallError

TEXT_FILES = ("train.jsonl", "train.parquet")
EXTRAS = {"transformers": "hf", "accelerate": "hf", "datasets": "datasets"}
"""The modules this script imports beyond biosrecall's own, and the extra that installs each."""
INSTALL = 'pip install "biosrecall[hf,datasets]"'


def check_extras() -> None:
    """One error line naming the missing extras and the command that installs them, before any work."""
    missing = [module for module in EXTRAS if importlib.util.find_spec(module) is None]
    if missing:
        extras = sorted({EXTRAS[module] for module in missing})
        raise BiosrecallError(
            f"{Path(__file__).name} needs the {' and '.join(extras)} extra{'s' if len(extras) > 1 else ''} "
            f"(no module {', '.join(missing)}); install with: {INSTALL}"
        )


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="bioS dataset folder (its tokenizer.json)")
    parser.add_argument("--text", type=Path, required=True, help="its `generate --export-text` folder")
    parser.add_argument("--out", type=Path, required=True, help="model folder to create (new or empty)")
    parser.add_argument("--layers", type=int, default=2, help="GPT-2 layers [default: 2]")
    parser.add_argument("--width", type=int, default=64, help="GPT-2 width, n_embd [default: 64]")
    parser.add_argument("--heads", type=int, default=2, help="attention heads [default: 2]")
    parser.add_argument("--block-size", type=int, default=128, help="tokens per training row [default: 128]")
    parser.add_argument("--steps", type=int, default=1000, help="optimizer updates [default: 1000]")
    parser.add_argument("--batch-size", type=int, default=16, help="rows per update [default: 16]")
    parser.add_argument("--lr", type=float, default=3e-3, help="peak learning rate [default: 3e-3]")
    parser.add_argument("--seed", type=int, default=0, help="initialisation and data order [default: 0]")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads [default: 1: a model this small gains little from more, and on 2 cores "
        "other work shared, 60 updates took 85 s on 2 threads against 18 s on 1]",
    )
    return parser.parse_args(argv)


def check_args(args: argparse.Namespace) -> Path:
    """Refuse bad input before any work; returns the training text file."""
    from biosrecall.atomic import check_output_dir

    for name in ("layers", "width", "heads", "block_size", "steps", "batch_size", "threads"):
        if getattr(args, name) < 1:
            raise BiosrecallError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.width % args.heads:
        raise BiosrecallError(f"--width {args.width} is not a multiple of --heads {args.heads}")
    if not (math.isfinite(args.lr) and args.lr > 0):
        raise BiosrecallError(f"--lr must be a positive number, got {args.lr}")
    if not (args.data / "tokenizer.json").is_file():
        raise BiosrecallError(f"--data {args.data} holds no tokenizer.json: give a bioS dataset folder")
    found = [args.text / name for name in TEXT_FILES if (args.text / name).is_file()]
    if not found:
        raise BiosrecallError(
            f"--text {args.text} holds no {' or '.join(TEXT_FILES)}: run generate --export-text"
        )
    check_output_dir(args.out, overwrite=False)
    return found[0]


def dataset_tokenizer(data_dir: Path, block_size: int, folder: Path):
    """The dataset's tokenizer, saved into `folder` as biosrecall exports it, and loaded back."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    from biosrecall.hf.export import save_tokenizer

    save_tokenizer(Tokenizer.from_file(str(data_dir / "tokenizer.json")), block_size, folder)
    return AutoTokenizer.from_pretrained(folder, local_files_only=True)


def training_blocks(text_file: Path, tokenizer, block_size: int, cache_dir: Path):
    """The biographies tokenized (each after its <sep>), concatenated and cut into full blocks."""
    import datasets

    kind = "json" if text_file.suffix == ".jsonl" else "parquet"
    texts = datasets.load_dataset(kind, data_files=str(text_file), split="train", cache_dir=str(cache_dir))

    def tokenize(batch):
        return tokenizer(batch["text"])

    def group(batch):
        ids = [token for row in batch["input_ids"] for token in row]
        usable = len(ids) // block_size * block_size
        blocks = [ids[i : i + block_size] for i in range(0, usable, block_size)]
        return {"input_ids": blocks, "labels": [list(block) for block in blocks]}

    tokens = texts.map(tokenize, batched=True, remove_columns=texts.column_names)
    tokens = tokens.remove_columns([c for c in tokens.column_names if c != "input_ids"])
    blocks = tokens.map(group, batched=True)
    if len(blocks) == 0:
        raise BiosrecallError(f"{text_file} holds fewer than --block-size {block_size} tokens")
    return blocks


def gpt2(tokenizer, args: argparse.Namespace):
    """A randomly initialised GPT-2 of the chosen size over the dataset's vocabulary."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=args.block_size,
        n_embd=args.width,
        n_layer=args.layers,
        n_head=args.heads,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return GPT2LMHeadModel(config)


def train(model, blocks, args: argparse.Namespace, scratch: Path) -> float:
    """`args.steps` updates of `transformers.Trainer`; returns the mean training loss of the last log."""
    from transformers import Trainer, TrainingArguments, default_data_collator

    settings = TrainingArguments(
        output_dir=str(scratch / "trainer"),
        max_steps=args.steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr,
        lr_scheduler_type="cosine",
        warmup_steps=max(1, args.steps // 20),
        weight_decay=0.1,
        logging_steps=max(1, args.steps // 10),
        save_strategy="no",
        report_to="none",
        seed=args.seed,
        dataloader_num_workers=0,
        dataloader_pin_memory=False,  # nothing to pin without an accelerator, and a warning per run
        disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=settings, train_dataset=blocks, data_collator=default_data_collator)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return float(losses[-1]) if losses else float("nan")


def build(args: argparse.Namespace):
    """Check the input, then train and save the model folder; returns (model, blocks, last loss)."""
    text_file = check_args(args)
    import torch
    from transformers import set_seed

    torch.set_num_threads(args.threads)

    from biosrecall.atomic import atomic_directory

    set_seed(args.seed)
    with tempfile.TemporaryDirectory() as scratch, atomic_directory(args.out, overwrite=False) as folder:
        tokenizer = dataset_tokenizer(args.data, args.block_size, folder)
        blocks = training_blocks(text_file, tokenizer, args.block_size, Path(scratch) / "datasets")
        model = gpt2(tokenizer, args)
        loss = train(model, blocks, args, Path(scratch))
        model.save_pretrained(folder)
    return model, blocks, loss


def main(argv=None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    try:
        check_extras()
        model, blocks, loss = build(args)
    except BiosrecallError as exc:  # bad input: one line, nothing written
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(
        f"trained GPT-2 ({model.num_parameters():,} parameters) for {args.steps} updates on "
        f"{len(blocks):,} blocks of {args.block_size} tokens in {time.perf_counter() - started:.1f} s; "
        f"final training loss {loss:.4f}"
    )
    print(f"saved {args.out}; score it with:")
    print(f"  biosrecall recall-curve --hf-model {args.out} --data {args.data} --out recall-{args.out.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
