"""How a training run stops before its plan is done: the exceptions the trainer raises and the commands
catch (`biosrecall train`, `lm train`, and the studies that run them).

    try:
        train_bios(...)                       # biosrecall.train.trainer
    except Interrupted:                       # Ctrl-C or SIGTERM: `latest` was saved, --resume continues
        ...
    except TrainingDiverged:                  # a non-finite loss: the last good checkpoint is kept
        ...

They live apart from the trainer so that a command names them without importing torch.
"""


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


class Interrupted(RuntimeError):
    """Ctrl-C (or SIGTERM) stopped the run after `latest` was saved."""
