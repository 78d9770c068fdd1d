"""The README's result table is the file the study wrote: each generated block equals the archived file
it was copied from (`scripts/readme_results.py`), with the command that made it. The other archived
tables are shown by the documentation site's results pages, read at build time (tests/test_docs.py).

    pytest -q tests/test_readme_results.py
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ARCHIVES = {
    "study-default": ("claims", "exit_summary"),
    "budget-sweep-middle": ("compute_saving",),
    "capacity": ("capacity_claims",),
    "lm-study": ("lm_claims",),
}


def readme_results():
    spec = importlib.util.spec_from_file_location("readme_results", ROOT / "scripts" / "readme_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("archive", "blocks"), ARCHIVES.items())
def test_each_readme_block_is_its_archived_study_file(archive, blocks):
    text = (ROOT / "README.md").read_text()
    for block in blocks:
        assert f"<!-- generated: {block} -->" in text
    assert readme_results().rewrite(text, ROOT / "docs" / "results" / archive, blocks) == text


def test_a_changed_number_is_caught(tmp_path):
    module = readme_results()
    study = tmp_path / "study"
    study.mkdir()
    (study / "figure1.json").write_text('{"preset": "quick", "train_config": {"seed": 0}, "study": {}}')
    (study / "claims.md").write_text("| a | 1.0 |\n")
    text = "x\n<!-- generated: claims -->\n| a | 2.0 |\n<!-- end: claims -->\n"
    rewritten = module.rewrite(text, study, ("claims",))
    assert rewritten != text and "| a | 1.0 |" in rewritten and "--preset quick --seeds 0" in rewritten


def test_the_saving_block_keeps_the_header_and_the_savings_over_k_1_to_16(tmp_path):
    study = tmp_path / "sweep"
    study.mkdir()
    (study / "figure1.json").write_text('{"preset": "middle", "train_config": {"seed": 0}, "study": {}}')
    (study / "compute_to_target.md").write_text(
        "| schedule | target | depths |\n|---|---|---|\n| uniform_1_16 | 90% | K=1..16 |\n"
        "| saving: fixed_first vs uniform | 90% | K=1..16 |\n| saving: fixed_first vs uniform | 90% | K=1..64 |\n"
    )
    text = "<!-- generated: compute_saving -->\n<!-- end: compute_saving -->\n"
    block = readme_results().rewrite(text, study, ("compute_saving",))
    assert "`compute_to_target.md` of `biosrecall figure1 --preset middle" in block
    assert "|---|---|---|\n| saving: fixed_first vs uniform | 90% | K=1..16 |\n<!-- end" in block
    assert "| uniform_1_16 |" not in block and "K=1..64" not in block


def test_the_capacity_blocks_name_the_capacity_command_and_keep_k4_and_the_baselines(tmp_path):
    study = tmp_path / "capacity"
    study.mkdir()
    record = {"settings": {"preset": "bios-tiny", "exposures": 100.0, "batch_size": 8, "seq_len": None,
                           "lr": 0.01}, "people": [250, 500], "seeds": [0, 1, 2], "depths": [1, 4, 16, 64]}  # fmt: skip
    (study / "capacity.json").write_text(json.dumps(record))
    (study / "capacity.md").write_text(
        "# Stored bits\n\n## Mean over seeds\n\n| people | model | depth | bits |\n|---|---|---|---|\n"
        "| 250 | uniform_1_16 | 1 | 5.0 |\n| 250 | uniform_1_16 | 4 | 6.0 |\n"
        "| 250 | std_params (baseline) | 1 (its one depth) | 7.0 |\n\n## Every run\n\n| 250 | x | 4 | 1 |\n"
    )
    text = "<!-- generated: capacity_k4 -->\n<!-- end: capacity_k4 -->\n"
    block = readme_results().rewrite(text, study, ("capacity_k4",))
    assert (
        "*3 seeds: `capacity.md` of `biosrecall capacity --preset bios-tiny --people 250,500 --seeds 0,1,2 "
        "--exposures 100`" in block
    )
    assert "|---|---|---|---|\n| 250 | uniform_1_16 | 4 | 6.0 |\n| 250 | std_params (baseline) |" in block
    assert "| 1 | 5.0 |" not in block and "| x |" not in block
