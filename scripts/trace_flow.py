"""Follow one value through biosrecall: which modules receive it as a function argument, in order.

    python scripts/trace_flow.py train  DATA_DIR RUN_DIR       # the `train` command's --data value
    python scripts/trace_flow.py study  OUT [SEEDS]            # run_figure1's `study` argument (quick preset; a finished OUT traces the planning without training)
    python scripts/trace_flow.py recall RUN_DIR OUT            # recall-curve's run folder, with --exit and --per-token

A stop is a call of a biosrecall function that receives the value (equal str/Path, or the same
object / an equal dataclass) as an argument, or an argument holding it (a config, a task, a dict;
up to two levels). Consecutive stops in one module collapse into one
visit; a return is a visit to a module that was visited before and left. A loop (the training loop
draws a batch, then saves, every update) repeats the same hand-overs: `detours` counts only the
returns that arrive by a hand-over (module -> module) not seen before, so a loop counts once however
many times it runs.
"""

import os
import sys
from collections import Counter
from pathlib import Path

stops: list[tuple[str, str]] = []


def _equal(value, target) -> bool:
    if isinstance(target, str):
        return isinstance(value, (str, Path)) and os.fspath(value) == target
    return value is target or (type(value) is type(target) and value == target)


def _members(value):
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, (list, tuple)):
        return list(value)
    fields = getattr(value, "__dict__", None)
    if isinstance(fields, dict) and type(value).__module__.startswith("biosrecall"):
        return list(fields.values())
    return []


def _matches(value, target, depth: int = 2) -> bool:
    """The value itself, or held by the argument (a config, a task, a dict) up to `depth` levels."""
    if _equal(value, target):
        return True
    return depth > 0 and any(_matches(member, target, depth - 1) for member in _members(value)[:64])


def _profiler(target):
    def profile(frame, event, arg):
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("biosrecall"):
            return
        code = frame.f_code
        n = code.co_argcount + code.co_kwonlyargcount
        for name in code.co_varnames[:n]:
            try:
                if _matches(frame.f_locals.get(name), target):
                    stops.append((module, code.co_name))
                    return
            except Exception:
                return

    return profile


def report():
    visits = []
    for module, _ in stops:
        if not visits or visits[-1] != module:
            visits.append(module)
    seen, returns, per_module = set(), 0, Counter()
    handovers, detours = set(), 0
    for previous, module in zip([None, *visits], visits, strict=False):
        if module in seen:
            returns += 1
            per_module[module] += 1
            detours += (previous, module) not in handovers
        seen.add(module)
        handovers.add((previous, module))
    print(
        f"stops (function calls): {len(stops)}; modules: {len(set(m for m, _ in stops))}; "
        f"visits: {len(visits)}; returns: {returns}; detours (returns by a new hand-over): {detours}; "
        f"most returns to one module: {per_module.most_common(1)}"
    )
    print(" -> ".join(m.removeprefix("biosrecall.") for m in visits))


def _traced_cli(target, args: list[str]) -> None:
    """Run `biosrecall ARGS` in this process, recording every stop of `target`."""
    from biosrecall.cli import cli

    sys.setprofile(_profiler(target))
    try:
        cli.main(args=args, prog_name="biosrecall", standalone_mode=False)
    finally:
        sys.setprofile(None)


def main():
    kind = sys.argv[1]
    if kind == "train":
        data, out = sys.argv[2], sys.argv[3]
        _traced_cli(data, ["train", "--data", data, "--out", out, "--preset", "bios-tiny", "--updates", "4",
                           "--batch-size", "4", "--overwrite"])  # fmt: skip
    elif kind == "recall":
        run_dir, out = sys.argv[2], sys.argv[3]
        _traced_cli(run_dir, ["recall-curve", run_dir, "--checkpoint", "final", "--max-depth", "8", "--people",
                              "10", "--exit", "kl:1e-3,stable:2", "--per-token", "--refresh", "--overwrite",
                              "--out", out])  # fmt: skip
    else:
        out = sys.argv[2]
        from biosrecall.experiments.figure1 import run_figure1
        from biosrecall.experiments.study import StudyOptions

        seeds = tuple(int(s) for s in (sys.argv[3] if len(sys.argv) > 3 else "0").split(","))
        study = StudyOptions(seeds=seeds)
        sys.setprofile(_profiler(study))
        try:
            run_figure1(out, preset="quick", study=study)
        finally:
            sys.setprofile(None)
    report()


if __name__ == "__main__":
    main()
