"""The learned exit gate of a language-model run: fitted on training-shard windows, calibrated on the
validation split (`biosrecall gate train RUN` on an `lm train` run; `lm eval --exit gate:DELTA`).

    fit_gates("runs/lm-ff", tasks={**GATE_TASKS, "lm": lm_gate})  # biosrecall.eval.gate
    fit_run_gates("runs/lm-ff")                                   # the same: a bioS or an LM run
    record, arrays = fit_lm_gate(model, "data/corpus", seq_len=512, settings, batch_size=8)

The head, the target and the bound are bioS's (`biosrecall.eval.gate`);
what changes is what a query is.
- Fitting: positions of the first `FIT_WINDOWS` windows of the training split, in stream order, at
  most `MAX_FIT_POSITIONS` of them (a seeded draw per window). The target at depth k: the greedy next
  token read at depth k equals the one read at the reference depth R, the best fixed depth by top-1
  next-token accuracy on these positions (the shallowest best).
- Calibration: one seeded position per validation window, up to `CALIBRATION_WINDOWS` windows. The
  windows are disjoint stretches of held-out text, so these are close to independent draws, which the
  binomial bound needs (every position of a window would be hundreds of correlated draws). A query's
  loss is 1 when the greedy token at R is the true next token but not at the exit depth, so the gate
  loses at most delta of R's top-1 accuracy, with the record's confidence, on such positions.
- The states come from the all-depth pass, where every earlier token ran to the same depth. Per-token
  exit in the KV-cached decoder (`lm eval --exit`) mixes depths in the cache, so the guarantee is
  about the all-depth pass; the exit table reports what per-token exit really costs in NLL.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from biosrecall.eval.gate import GATE_TASKS, GateFit, Trace, batch_states, fit_from_traces, fit_gates
from biosrecall.lm.evaluate import check_data
from biosrecall.lm.loader import ShardLoader
from biosrecall.train.run_folder import RunFolder, seq_len_of

FIT_WINDOWS = 64
MAX_FIT_POSITIONS = 2048
CALIBRATION_WINDOWS = 4096
WINDOWS_PER_PASS = 8
"""At most this many windows per forward pass, whatever `--batch-size` (sized for bioS's short rows) says."""
_POSITION_STREAM = 0x6A7F  # the gate's position draws, apart from every other seeded stream


def split_windows(data_dir: Path, seq_len: int, split: str, limit: int, batch_size: int) -> list[np.ndarray]:
    """The first `limit` windows of `split` in stream order, in batches ([B, seq_len + 1] each; a split
    without one window is refused when the loader opens it)."""
    return list(ShardLoader(data_dir, seq_len, split=split).ordered_batches(batch_size, limit))


def window_trace(model, batches: list[np.ndarray], depth: int, per_window: int, seed: int) -> Trace:
    """The `Trace` (states, greedy tokens, top-1 correctness) at `per_window` seeded positions of every
    window, each position its own query, from one all-depth pass per batch."""
    device = next(model.parameters()).device
    rng = np.random.default_rng([seed, _POSITION_STREAM, per_window])
    states, argmax, exact = [], [], []
    with torch.inference_mode():
        for rows in batches:
            inputs, targets = rows[:, :-1], rows[:, 1:]
            mask = np.zeros(inputs.shape, dtype=bool)
            for window in mask:
                window[rng.choice(window.size, size=min(per_window, window.size), replace=False)] = True
            batch = SimpleNamespace(
                tokens=torch.from_numpy(inputs).to(device), positions=torch.from_numpy(mask).to(device)
            )
            seen, logits = batch_states(model, batch, depth, readouts=True)
            greedy = torch.stack([out.argmax(-1) for out in logits]).cpu()
            states.append(torch.stack(seen).cpu())
            argmax.append(greedy)
            exact.append((greedy == torch.from_numpy(targets[mask])).numpy())
    states, argmax = torch.cat(states, 1), torch.cat(argmax, 1)
    return Trace(states, argmax, np.concatenate(exact, axis=1), torch.arange(states.shape[1]))


def fit_lm_gate(model, data_dir: Path, seq_len: int, settings: dict, batch_size: int) -> tuple[dict, dict]:
    """(record without the checkpoint's hashes, calibration arrays), as `eval.gate.fit_gate` for bioS;
    `settings`: seed, confidence, max_depth and optionally reference."""
    seed, max_depth = settings["seed"], settings["max_depth"]
    batch_size = min(batch_size, WINDOWS_PER_PASS)
    fitting = split_windows(data_dir, seq_len, "train", FIT_WINDOWS, batch_size)
    windows = sum(len(rows) for rows in fitting)
    per_window = max(1, MAX_FIT_POSITIONS // windows)

    def trace_held(reference: int) -> Trace:
        validation = split_windows(data_dir, seq_len, "validation", CALIBRATION_WINDOWS, batch_size)
        return window_trace(model, validation, reference, 1, seed)

    def trace_fit() -> Trace:
        return window_trace(model, fitting, max_depth, per_window, seed)

    record, arrays = fit_from_traces(trace_fit, trace_held, settings)
    record["task"] = "lm"
    # window_trace draws min(per_window, seq_len) positions of each window, each its own query
    record["fit"].update(split="train", windows=windows, positions=windows * min(per_window, seq_len))
    record["calibration"].update(split="validation", windows=record["calibration"]["queries"])
    return record, arrays


def lm_gate(run_dir: Path, meta: dict, data_path: Path) -> GateFit:
    """The language-model task (`GateTask`): the run's shards, checked against its tokenizer, fitted by
    `fit_lm_gate` at the run's training sequence length."""
    config = RunFolder(run_dir).read_config()
    check_data(config, data_path)
    seq_len = seq_len_of(config)
    return lambda model, settings, batch_size: fit_lm_gate(model, data_path, seq_len, settings, batch_size)


def fit_run_gates(run_dir, checkpoints="final", **settings) -> list[Path]:
    """`fit_gates` of a bioS or a language-model run (what `biosrecall gate train` calls); `settings` are
    its keywords but `tasks`."""
    return fit_gates(run_dir, checkpoints, tasks={**GATE_TASKS, "lm": lm_gate}, **settings)
