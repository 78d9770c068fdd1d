"""The update diagnostic (the paper's Figure 4): from one checkpoint, does a deep update help the serving
depths more than a shallow one of the same size? For bioS runs and for language-model runs.

    from biosrecall.diagnose import DiagnoseOptions, diagnose_update
    result = diagnose_update("runs/ff", "switch", DiagnoseOptions(after_uniform=(0, 16), batches=8))
    result = diagnose_update("runs/ff", "switch", after_uniform=(0, 16), batches=8)   # the same
    result.summary      # after_uniform, update, metric, serving_depth, mean, ci_low, ci_high, n_batches, ...
    result.batches      # the per-batch raw numbers
    result.figure()     # advantage against serving depth, one line per after_uniform value
    result.write("runs/ff/diagnose")
    # shell: biosrecall diagnose-update runs/ff --checkpoint switch --after-uniform 0,16
    # the checkpoint takes any selector of `biosrecall.train.run_folder` that names one checkpoint: switch, 0.8, final
    # an LM run (`biosrecall lm train`) is diagnosed the same way, scored by validation NLL:
    diagnose_update("runs/lm-ff", "switch", after_uniform=(0, 16), val_sequences=64)

Method, for one model state (the checkpoint, or the checkpoint continued n updates):

1. State. Weights and AdamW state of a kept checkpoint (each holds `training_state.pt`). The optimizer is
   rebuilt as the trainer builds it (`build_optimizer`, then `load_state_dict`) and steps with the
   learning rate the run would use at its next update u: `learning_rate(u, planned updates, config)`.
2. Batch-caused update. For each candidate depth K (default 4 and 16) and one training batch: the
   gradient of the trainer's loss (mean cross-entropy over non-pad targets after K iterations, with the
   run's truncated backprop and gradient clipping), then AdamW's step from that gradient minus its step
   from the same state with a zero gradient. Momentum and weight decay act identically in both and
   cancel; what remains is caused by the batch. It is computed in float64 from the state tensors with
   torch's AdamW formula (the tests check it against `torch.optim.AdamW` itself).
3. Equal size. Both updates are rescaled to one RMS over all parameters: by default the RMS of the
   shallower update, i.e. the size of the step the run takes at its fixed-phase depth, so the question is
   "the same size of step, pointed by a deeper forward pass: is it better?". `rms="deep"` uses the
   deeper update's RMS; a number fixes the RMS (the learning rate then plays no role).
4. Effect. Each rescaled update is added to the weights (restored exactly afterwards) and the model is
   scored at every serving depth (`diagnose.method`). bioS run: the evaluation prompts of the first
   `people` people of the dataset, mean NLL of the answer tokens (teacher forcing) and recalled bits
   per person (as `recall-curve` counts them). LM run: validation NLL, the mean next-token cross-entropy
   over the first `val_sequences` windows of the run's own corpus validation split (as `lm eval`).
   Advantage of the deeper update at serving depth k, positive = the deeper update helps more at k:
       nll:  (NLL change from the shallow update) - (NLL change from the deep update)
       bits: (bits change from the deep update) - (bits change from the shallow update)
   The depth average is the mean over the serving depths.
5. Batches. Steps 2-4 run on `batches` batches: those the run itself would train on next, its own stream
   at updates u, u+1, ... (a pure function of the run seed and update: bioS's sampler, or the LM
   loader's windows as `biosrecall lm train` reads them), none of which the diagnosed model has trained
   on. The mean over batches and a percentile bootstrap interval (batches resampled with replacement,
   seeded by `seed`) are reported per serving depth and for the depth average.
6. After uniform. For each n in `after_uniform` (ascending), the run is first continued for n updates
   from the checkpoint exactly as the trainer would (its planned depths, LR schedule, batches, loss,
   clipping and AdamW state: the continuation reproduces the run's own later weights), then diagnosed.
   From a fixed-first run's `switch` checkpoint these updates are its uniform phase; a checkpoint before
   the switch is refused for n > 0. Nothing is written back to the run folder.

Modules: `options` (DiagnoseOptions, the depth-list parsers), `batch_update` (steps 2-4's arithmetic),
`method` (the checkpoint loaded, the run continued, what each kind of run is scored by, and the steps
put together), `report` (bootstrap summary, figure, files).
"""

from __future__ import annotations

import importlib

_HOMES = {
    "DiagnoseOptions": "options",
    "parse_candidate_depths": "options",
    "parse_depth_list": "options",
    "DiagnosisResult": "report",
    "RunState": "method",
    "continue_run": "method",
    "load_run_state": "method",
    "candidate_updates": "method",
    "diagnose_update": "method",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str):
    # Each name loads its module on first use: the command line imports `diagnose.options` when it
    # starts, and the other modules bring torch, pandas and matplotlib, seconds of start-up.
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
