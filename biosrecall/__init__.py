"""biosrecall: a factual-recall benchmark for adaptive-depth looped transformers.

The pipeline, one sub-package per stage (imports only point downward):

    bios/        synthetic people, templates, tokenizer, dataset folders, batch sampler
    model/       the looped (prelude / recurrent block x K / coda) transformer and its presets
    compute/     the one modeled-FLOP account, depth schedules, matched-budget planner
    train/       the training loop, checkpoints, distributed helpers
    eval/        recall scoring over serving depths, plots, the update diagnostic
    lm/          the language-model side (text shards, loader, NLL by depth)
    experiments/ whole studies (Figure 1, fixed-depth sweep)
    cli/         thin click commands over the library

Run `biosrecall --help` for the commands.
"""

__version__ = "0.2.0"
"""The one place the version is set: pyproject.toml reads it from here, `biosrecall --version` prints it."""
