"""The walkthrough docs/walkthrough.py runs as a notebook, every cell, so it never drifts from the code."""

from pathlib import Path

import pytest

jupytext = pytest.importorskip(
    "jupytext", reason="the notebook tests need the dev extra: pip install -e '.[dev]'"
)
nbclient = pytest.importorskip(
    "nbclient", reason="the notebook tests need the dev extra: pip install -e '.[dev]'"
)

WALKTHROUGH = Path(__file__).resolve().parents[2] / "docs" / "walkthrough.py"


def test_walkthrough_runs_as_a_notebook(tmp_path, monkeypatch):
    # the kernel inherits the environment: a non-interactive MPLBACKEND would keep its figures off the page
    monkeypatch.delenv("MPLBACKEND", raising=False)
    notebook = jupytext.read(WALKTHROUGH)
    # a failing cell (a wrong gradient, a changed signature) raises CellExecutionError with its traceback
    nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    figures = [output for output in outputs if "image/png" in output.get("data", {})]
    # the finite-difference error, the sinusoids, attention, cross-entropy's bars, the loss curve
    assert len(figures) == 5
