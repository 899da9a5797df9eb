"""The package as users install it: the wheel and the sdist carry the license, and the wheel the
py.typed marker that lets type checkers read the package's annotations."""

import os
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
build_meta = pytest.importorskip("setuptools.build_meta", reason="building needs setuptools")


@pytest.fixture
def in_root(monkeypatch, tmp_path):
    """A copy of the checkout to build in: building writes build/ and *.egg-info beside the sources."""
    source = tmp_path / "source"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", "build", "dist", "runs", "site", "*.egg-info", "__pycache__", ".*"
        ),
    )
    monkeypatch.chdir(source)


def test_the_wheel_carries_the_license_and_py_typed(tmp_path, in_root):
    wheel = tmp_path / build_meta.build_wheel(str(tmp_path))
    names = zipfile.ZipFile(wheel).namelist()
    assert "numpy_transformer/py.typed" in names
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)
    assert "numpy_transformer/translator/cli/__init__.py" in names  # the command's package, whole


def test_the_sdist_carries_the_license(tmp_path, in_root):
    sdist = tmp_path / build_meta.build_sdist(str(tmp_path))
    with tarfile.open(sdist) as archive:
        names = [os.path.basename(name) for name in archive.getnames()]
    assert "LICENSE" in names and "py.typed" in names
