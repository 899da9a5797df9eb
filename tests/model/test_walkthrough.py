"""The walkthrough docs/walkthrough.py runs as a notebook, every cell, so it never drifts from the code."""

import re
from pathlib import Path

import pytest
from docs_site import builds_the_site_here

jupytext = pytest.importorskip(
    "jupytext", reason="the notebook tests need the dev extra: pip install -e '.[dev]'"
)
nbclient = pytest.importorskip(
    "nbclient", reason="the notebook tests need the dev extra: pip install -e '.[dev]'"
)

WALKTHROUGH = Path(__file__).resolve().parents[2] / "docs" / "walkthrough.py"
# a figure on the built walkthrough's page: a code cell's PNG output, as mkdocs-jupyter writes it
FIGURE = re.compile(
    r'<div class="jp-RenderedImage jp-OutputArea-output"[^>]*>\s*<img [^>]*src="data:image/png'
)


def test_walkthrough_runs_as_a_notebook(tmp_path, monkeypatch, request):
    if builds_the_site_here():  # the site's build has executed it, every cell (allow_errors: false)
        page = (request.getfixturevalue("site") / "walkthrough" / "index.html").read_text()
        figures = FIGURE.findall(page)
    else:
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
