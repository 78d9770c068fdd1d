"""The looped recipes side by side: the cost of an update against `baseline`, and the recurrent state's
norm over depth on trained tiny runs (does Parcae's stay bounded where the others' grow?).

    python benchmarks/bench_recipes.py            # every recipe; about 5 minutes on one core
    python benchmarks/bench_recipes.py --quick    # fewer updates and rounds (a smoke check)

Two parts, one process, one torch thread:

- Cost. A `bios-tiny` update (8 x 128 tokens of a generated bioS dataset; forward, backward through
  the recipe's own objective, AdamW step) at K = 4 and K = 16, for each recipe. Recipes are timed in
  rotating order over rounds, each round's median update kept and the median over rounds reported;
  CPU time (`time.process_time`), since other jobs on a shared machine stretch wall time. Beside each:
  the modeled training FLOPs per token (`compute.flops.train_flops_per_token`, what the planner
  charges), and both as ratios to `baseline` at the same K.
- Boundedness. Each recipe trains a `bios-tiny` run through the real trainer (`train_bios`, schedule
  uniform:1-8, the same seed and data), then the RMS over the evaluation tokens (padding not counted)
  of the recurrent state ||s_K|| / sqrt(d) after K = 1..64 iterations (`biosrecall.eval.state_norms`,
  what `recall-curve --state-norms` measures; for LoopFormer, whose state depends on the call's K,
  the last state of a K-iteration call). Reported: the norm at K = 1, 8, 16, 64 and its growth
  max_K ||s_K|| / ||s_8|| beyond the trained depths.

`run(quick=False) -> dict` is what `benchmarks/run_all.py` imports; its "ratios" are its table rows.
The command also writes `benchmarks/results/<date>-recipes[-quick].json`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from biosrecall.bios import BatchSampler, batch_generator, generate_dataset, load_dataset
from biosrecall.compute.flops import train_flops_per_token
from biosrecall.eval.state_norms import state_rms
from biosrecall.model import LoopedTransformer, get_preset
from biosrecall.model.layers import IGNORE_INDEX
from biosrecall.model.recipes import recipe_names, recipe_overrides
from biosrecall.train.checkpoint_files import load_checkpoint
from biosrecall.train.config import TrainConfig
from biosrecall.train.run_folder import RunFolder
from biosrecall.train.trainer import train_bios

HERE = Path(__file__).resolve().parent
PRESET, PEOPLE, SEED = "bios-tiny", 200, 0
BATCH, SEQ_LEN = 8, 128
COST_DEPTHS = (4, 16)
NORM_DEPTHS = tuple(range(1, 65))
TRAINED_SCHEDULE, TRAINED_MAX = "uniform:1-8", 8


def _model(recipe: str, vocab: int) -> LoopedTransformer:
    torch.manual_seed(SEED)
    return LoopedTransformer(get_preset(PRESET, vocab_size=vocab, **recipe_overrides(recipe, {})))


def update_seconds(recipes, dataset, depth: int, rounds: int, updates: int) -> dict[str, float]:
    """Median over rounds of each recipe's median CPU seconds per update at `depth`."""
    sampler = BatchSampler(dataset, BATCH, SEQ_LEN)
    rows = torch.from_numpy(sampler.batch(batch_generator(SEED, 0)))
    inputs, targets = rows[:, :-1], rows[:, 1:].clone()
    targets[targets == dataset.pad_id] = IGNORE_INDEX
    models = {name: _model(name, dataset.vocab_size) for name in recipes}
    optimizers = {name: torch.optim.AdamW(m.parameters(), lr=1e-3) for name, m in models.items()}
    per_round: dict[str, list[float]] = {name: [] for name in recipes}
    for round_index in range(rounds):
        order = recipes[round_index % len(recipes) :] + recipes[: round_index % len(recipes)]
        for name in order:
            model, optimizer, times = models[name], optimizers[name], []
            for step in range(updates + 1):  # the first is a warm-up
                start = time.process_time()
                model(inputs, depth, targets=targets).backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                if step:
                    times.append(time.process_time() - start)
            per_round[name].append(statistics.median(times))
    return {name: statistics.median(values) for name, values in per_round.items()}


def trained_norms(recipes, data_dir: Path, dataset, updates: int, root: Path) -> dict[str, dict]:
    """Per recipe: the state norms of a freshly trained run, and its final training loss."""
    config = dict(schedule=TRAINED_SCHEDULE, updates=updates, batch_size=BATCH, seq_len=SEQ_LEN, seed=SEED)
    tokens = torch.from_numpy(dataset.eval_set(np.arange(20)).tokens)
    counted = tokens != dataset.pad_id  # as `recall-curve --state-norms` counts them
    norms = {}
    for name in recipes:
        run = root / name
        train_config = TrainConfig(**config, recipe=name, save_every=10**6, checkpoint_fractions=(1.0,))
        train_bios(data_dir, run, train_config, preset=PRESET)
        model, _ = load_checkpoint(RunFolder(run).fraction_checkpoints()[1.0])
        loss = RunFolder(run).read_metrics()[-1]["loss"]
        rms = state_rms(model.eval(), [(tokens, counted)], NORM_DEPTHS[-1])
        norms[name] = {"norms": rms.tolist(), "final_loss": loss}
    return norms


def run(quick: bool = False) -> dict:
    rounds, updates, trained = (1, 2, 30) if quick else (3, 5, 300)
    torch.set_num_threads(1)
    recipes = list(recipe_names())
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = generate_dataset(Path(tmp) / "data", people=PEOPLE, seed=SEED)
        dataset = load_dataset(data_dir)
        config = _model("baseline", dataset.vocab_size).config
        cost = {}
        for depth in COST_DEPTHS:
            seconds = update_seconds(recipes, dataset, depth, rounds, updates)
            for name in recipes:
                flops = train_flops_per_token(config.replace(**recipe_overrides(name, {})), depth, SEQ_LEN)
                cost[(name, depth)] = {"seconds": seconds[name], "flops_per_token": flops}
        norms = trained_norms(recipes, data_dir, dataset, trained, Path(tmp))
    report = {"name": "recipes", "preset": PRESET, "batch": BATCH, "seq_len": SEQ_LEN, "rounds": rounds,
              "timed_updates": updates, "trained_updates": trained, "trained_schedule": TRAINED_SCHEDULE,
              "threads": torch.get_num_threads(), "cost": [], "state_norm": {}}  # fmt: skip
    rows = []
    for (name, depth), measured in cost.items():
        base = cost[("baseline", depth)]
        entry = {"recipe": name, "depth": depth, **measured,
                 "seconds_ratio": measured["seconds"] / base["seconds"],
                 "flops_ratio": measured["flops_per_token"] / base["flops_per_token"]}  # fmt: skip
        report["cost"].append(entry)
        context = (f"{measured['seconds'] * 1e3:.1f} ms/update (CPU), modeled FLOPs x{entry['flops_ratio']:.2f} of "
                   f"baseline ({measured['flops_per_token'] / 1e6:.2f} MFLOP/token)")  # fmt: skip
        rows.append(_row(f"recipes {name} / baseline s/update, K={depth}", entry["seconds_ratio"], context))
    for name, trained_run in norms.items():
        values = trained_run["norms"]
        growth = max(values[TRAINED_MAX - 1 :]) / values[TRAINED_MAX - 1]
        report["state_norm"][name] = {**trained_run, "growth_beyond_trained": growth}
        picked = ", ".join(f"K={k}: {values[k - 1]:.3g}" for k in (1, 8, 16, 64))
        context = f"RMS state {picked}; final training loss {trained_run['final_loss']:.3f}"
        rows.append(_row(f"recipes {name} state-norm growth K=8..64", growth, context))
    report["ratios"] = rows
    return report


def _row(name: str, measured, context: str) -> dict:
    return {"name": name, "measured": measured, "target": None, "op": ">=", "ok": None, "context": context}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer updates and rounds (a smoke check)")
    quick = parser.parse_args().quick
    report = run(quick=quick)
    for row in report["ratios"]:
        print(f"{row['name']:<52}{row['measured']:>8.3f}  {row['context']}")
    stamp = datetime.date.today().isoformat()
    out = HERE / "results" / f"{stamp}-recipes{'-quick' if quick else ''}.json"
    out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
