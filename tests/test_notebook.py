"""notebooks/figure1.ipynb: committed with its outputs, so its documentation page shows the figures,
and executed in a fresh kernel on the study archived in docs/results, where it draws them again.

    pytest -q tests/test_notebook.py
    python tests/test_notebook.py        # re-execute the notebook and save it with its outputs

The notebook reads only archived tables (it trains nothing), so a fresh kernel runs it in seconds. Its
run on a fresh figure1 output is tests/test_figure1.py's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "figure1.ipynb"
FIGURE_CELLS = (
    "plot_recall_curves(seeds)",
    'metric="attribute"',
    "plot_exit_frontier(",
    "budget_figure(curve)",
)
"""A fragment of each code cell that draws a figure."""
SHOWN = ("text/markdown",)
"""Outputs compared with the committed ones besides printed text: the study's own Markdown tables (a
DataFrame's HTML or text depends on the pandas version, an image on matplotlib's)."""


def execute(notebook):
    """Run every cell in a fresh python3 kernel started in notebooks/; returns the notebook with its
    outputs, without stderr streams: those carry the executing machine's paths (a library warning
    names its own file), which a committed notebook must not."""
    nbclient = pytest.importorskip("nbclient")
    client = nbclient.NotebookClient(
        notebook,
        timeout=180,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if o.get("name") != "stderr"]
    return notebook


def _figure_cells(notebook) -> list:
    cells = [c for c in notebook.cells if c.cell_type == "code" and any(f in c.source for f in FIGURE_CELLS)]
    assert len(cells) == len(FIGURE_CELLS)
    return cells


def _shown(notebook) -> list:
    """The printed lines and the study's Markdown tables in the outputs, cell by cell."""
    return [
        [o.get("text") or {k: v for k, v in o.get("data", {}).items() if k in SHOWN} for o in cell.outputs]
        for cell in notebook.cells
        if cell.cell_type == "code"
    ]


def test_the_committed_notebook_holds_its_figures_as_images():
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    for cell in _figure_cells(notebook):
        images = [o for o in cell.outputs if "image/png" in o.get("data", {})]
        assert images, f"no figure stored for the cell {cell.source.splitlines()[0]!r}"
    outputs = json.dumps([cell.get("outputs", []) for cell in notebook.cells])
    assert str(ROOT) not in outputs and '"stderr"' not in outputs
    assert all(c.get("execution_count") for c in notebook.cells if c.cell_type == "code"), "run top to bottom"


@pytest.mark.slow
def test_the_notebook_draws_its_figures_in_a_fresh_kernel_and_its_outputs_are_current():
    """Executed as committed (no environment variable: the archived default study): no errors, an image
    from every figure cell, and the same printed text and Markdown tables as the committed outputs."""
    nbformat = pytest.importorskip("nbformat")
    committed = nbformat.read(NOTEBOOK, as_version=4)
    executed = execute(nbformat.read(NOTEBOOK, as_version=4))
    errors = [
        o for cell in executed.cells for o in cell.get("outputs", []) if o.get("output_type") == "error"
    ]
    assert not errors, errors[0].get("evalue")
    for cell in _figure_cells(executed):
        assert any("image/png" in o.get("data", {}) for o in cell.outputs), cell.source.splitlines()[0]
    assert _shown(executed) == _shown(committed), (
        "rerun `python tests/test_notebook.py` and commit the notebook"
    )


if __name__ == "__main__":
    import nbformat

    nbformat.write(execute(nbformat.read(NOTEBOOK, as_version=4)), NOTEBOOK)
    print(f"wrote {NOTEBOOK.relative_to(ROOT)} with its outputs")
    sys.exit(0)
