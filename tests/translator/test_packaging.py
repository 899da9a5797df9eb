"""The package as users install it: the wheel carries every file of the package, the license and the
py.typed marker that lets type checkers read the package's annotations, the sdist the license; and the
suite tests the checkout it runs in."""

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import numpy_transformer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def build_meta():
    """setuptools' build backend (pyproject.toml's), a version the dev extra installs: a fresh environment's
    own is missing (Python 3.12 and later) or too old (3.10 and 3.11 bring 65.5)."""
    import setuptools.build_meta

    return setuptools.build_meta


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


def test_the_wheel_carries_the_license_and_py_typed(tmp_path, in_root, build_meta):
    wheel = tmp_path / build_meta.build_wheel(str(tmp_path))
    names = zipfile.ZipFile(wheel).namelist()
    assert "numpy_transformer/py.typed" in names
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)
    assert "numpy_transformer/translator/cli/__init__.py" in names  # the command's package, whole


def test_the_wheel_carries_every_file_of_the_package_and_nothing_else(tmp_path, in_root, build_meta):
    """A subpackage without __init__.py, or a data file package_data does not name, would be left out."""
    wheel = zipfile.ZipFile(tmp_path / build_meta.build_wheel(str(tmp_path)))
    names = set(wheel.namelist())
    package = {
        path.as_posix()
        for path in Path("numpy_transformer").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert len(package) > 50 and not package - names, f"the wheel lacks {sorted(package - names)}"
    assert {name.split("/")[0] for name in names} == {"numpy_transformer", wheel_dist_info(names)}
    entry_points = wheel.read(f"{wheel_dist_info(names)}/entry_points.txt").decode()
    assert "numpy-transformer = numpy_transformer.translator.cli:main" in entry_points


def wheel_dist_info(names):
    (dist_info,) = {name.split("/")[0] for name in names if name.split("/")[0].endswith(".dist-info")}
    return dist_info


def test_the_sdist_carries_the_license(tmp_path, in_root, build_meta):
    sdist = tmp_path / build_meta.build_sdist(str(tmp_path))
    with tarfile.open(sdist) as archive:
        names = [os.path.basename(name) for name in archive.getnames()]
    assert "LICENSE" in names and "py.typed" in names


def test_the_suite_tests_the_package_it_means_to(tmp_path):
    """This checkout's package, installed editable as the README's test command does: in this process,
    and in a command started as the tests start the command line."""
    expected = ROOT / "numpy_transformer" / "__init__.py"
    started = subprocess.run(
        [sys.executable, "-c", "import numpy_transformer; print(numpy_transformer.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    hint = "install this checkout editable: pip install -e '.[dev]'"
    for imported in (numpy_transformer.__file__, started.stdout.strip()):
        assert Path(imported).resolve() == expected, f"the tests import {imported}, not {expected}: {hint}"
