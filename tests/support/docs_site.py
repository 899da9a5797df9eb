"""The documentation site built as .ci/run builds it (mkdocs build --strict), the walkthrough executed
in it: built once for every test that reads it (the ``site`` fixture of tests/conftest.py)."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILT_ELSEWHERE = "NUMPY_TRANSFORMER_SITE"  # a site already built into this folder is read instead


def builds_the_site_here() -> bool:
    """Whether the site is built here, from this checkout: mkdocs and mkdocs-jupyter (the docs extra)
    are installed and no site built elsewhere is named."""
    installed = all(importlib.util.find_spec(name) is not None for name in ("mkdocs", "mkdocs_jupyter"))
    return installed and not os.environ.get(BUILT_ELSEWHERE)


def build_site(directory: Path) -> None:
    """Build the site into ``directory`` in strict mode: a cell of the walkthrough that raises, a broken
    link or a formula the hook cannot render fails it, its error shown."""
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", PYTHONPATH=str(ROOT))
    env.pop("MPLBACKEND", None)  # as in test_walkthrough: the notebook's figures must reach the page
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(directory)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr[-4000:]
