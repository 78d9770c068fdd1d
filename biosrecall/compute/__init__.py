"""Compute accounting: the one modeled-FLOP account, depth schedules, and matched-budget planning.

    from biosrecall.compute.planner import plan_run
    from biosrecall.compute.schedules import parse_schedule
    plan = plan_run(cfg, parse_schedule("uniform:1-16"), tokens_per_update=8192, budget=1e15, seed=0)

`flops.py` prices updates and matches standard transformers to looped presets, `schedules.py` says
which depth each update uses (from its seeded draws and exact Poisson-lognormal tables), `planner.py`
sizes runs, `report.py` lays out what `biosrecall flops` prints. Import each from its module: this package imports none of them, so
reading a schedule loads neither the FLOP account nor the recipes.
"""
