"""Copy a Figure-1 study's generated tables into README.md, so the README holds no hand-written numbers.

    python scripts/readme_results.py runs/study            # rewrites README.md's generated blocks
    python scripts/readme_results.py runs/study --check    # exit 1 when README.md is out of date

Each block sits between `<!-- generated: NAME -->` and `<!-- end: NAME -->` in README.md and is
replaced by the file of the same name that `biosrecall figure1` wrote: `claims` <- claims.md,
`summary` <- summary.md, `fixed_sweep_summary` <- fixed_sweep_summary.md. A block whose file is
missing is left as it is and named on stderr.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = ("claims", "summary", "fixed_sweep_summary")


def provenance(study: Path, name: str) -> str:
    """One line naming the study a block comes from: its preset, seeds and controls."""
    record = json.loads((study / "figure1.json").read_text())
    options = record.get("study", {})
    extras = [
        flag
        for flag, on in (
            ("--update-matched", options.get("update_matched")),
            ("--lr-grid " + ",".join(f"{lr:g}" for lr in options.get("lr_grid", [])), options.get("lr_grid")),
            (
                "--fixed-sweep " + ",".join(map(str, options.get("fixed_sweep", []))),
                options.get("fixed_sweep"),
            ),
        )
        if on
    ]
    seeds = ",".join(map(str, options.get("seeds", [record["train_config"]["seed"]])))
    command = f"biosrecall figure1 --preset {record['preset']} --seeds {seeds} {' '.join(extras)}".strip()
    return f"*`{name}.md` of `{command}`, copied by `scripts/readme_results.py`.*\n\n"


def rewrite(text: str, study: Path) -> str:
    for name in BLOCKS:
        source = study / f"{name}.md"
        pattern = re.compile(rf"(<!-- generated: {name} -->\n).*?(<!-- end: {name} -->)", re.S)
        if not pattern.search(text):
            continue
        if not source.is_file():
            print(f"{source} not found; block {name!r} left as it is", file=sys.stderr)
            continue
        body = provenance(study, name) + source.read_text()
        text = pattern.sub(lambda m, body=body: m.group(1) + body + m.group(2), text)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", type=Path, help="A `biosrecall figure1` output folder.")
    parser.add_argument("--readme", type=Path, default=README)
    parser.add_argument("--check", action="store_true", help="Only report whether the README is current.")
    args = parser.parse_args()
    old = args.readme.read_text()
    new = rewrite(old, args.study)
    if args.check:
        return 0 if new == old else 1
    if new != old:
        tmp = args.readme.with_name(f".{args.readme.name}.tmp")
        tmp.write_text(new)
        tmp.replace(args.readme)
    return 0


if __name__ == "__main__":
    sys.exit(main())
