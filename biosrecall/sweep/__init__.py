"""Sweeps: a grid of training runs and the evaluation after each, run by an executor into run folders.

    biosrecall sweep run sweeps/bios.toml --workers 2           # spec format: biosrecall.sweep.spec
    biosrecall sweep status sweeps/bios.toml                     # done / running / failed / waiting
    biosrecall sweep collect sweeps/bios.toml                    # OUT/collect/: runs, recall curves, ...

    from biosrecall.sweep.engine import run_sweep
    from biosrecall.sweep.executors import LocalExecutor
    from biosrecall.sweep.jobs import Evaluation, SweepRun
    result = run_sweep("runs/study", [SweepRun("seed0/fixed_4", "train", config, {"data": ...})],
                       [Evaluation("recall-curve", {"max_depth": 64})], LocalExecutor(workers=2))

Every run is a normal run folder OUT/<name>/ made by `python -m biosrecall train` (or `lm train`) in a
process of its own, forked from a server that has imported torch already; the sweep's own records and
logs lie in OUT/.sweep/. Modules, from the bottom: `run_spec` (the file a run's process reads),
`commands` (the CLI commands' options: names, words, a spec's runs parsed), `jobs` (SweepRun, the one
description of a run, and Evaluation), `records` (each run's record and state), `worker` (one run to
done, forked warm by `biosrecall.warm`), `executors` (local slots, Slurm through submitit), `engine`
(`run_sweep`), `spec` (the TOML front-end) and `collect` (the tables). The package itself imports
none of them, so that a module needing one does not load the rest.
"""
