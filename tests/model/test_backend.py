"""The backend module: choosing NumPy or CuPy, imports that change nothing, random draws, CPU settings.

The CuPy path itself is tested through a strict stand-in in test_cupy_path.py."""

import ast
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import numpy_transformer as nt
from numpy_transformer import backend

PACKAGE = pathlib.Path(nt.__file__).parent


def test_only_the_backend_imports_numpy():
    """Every layer takes xp from the backend. Host-side by design: the gradient checker
    (gradient_checking/: it compares on the host), tasks and batches (they sample text pairs and pad
    them on the host: a batch reaches the device in one copy), the run's checkpoint and state, the
    Hugging Face formats (files hold NumPy arrays), and the workbook's modules (they grade gradients on
    the host, as the checker does) but its blocks' textbook."""
    allowed = {
        "backend.py",
        "tasks.py",
        "batches.py",
        "checkpoint.py",
        "state.py",
        "safetensors_reader.py",
        "weights.py",
        "loading.py",
        "export.py",
        "ctranslate2_export.py",
    }
    workbook = PACKAGE / "workbook"
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if (
            path.name in allowed
            or path.parent.name == "gradient_checking"
            or (path.is_relative_to(workbook) and path != workbook / "blocks.py")
        ):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            module = node.module if isinstance(node, ast.ImportFrom) else None
            if any(n.split(".")[0] == "numpy" for n in names) or (module or "").split(".")[0] == "numpy":
                offenders.append(path.name)
    assert offenders == []


def test_import_never_imports_cupy():
    code = "import sys, numpy_transformer, numpy_transformer.translator.cli; assert 'cupy' not in sys.modules"
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_asking_for_missing_cupy_is_a_clear_error():
    try:
        import cupy  # noqa: F401

        pytest.skip("CuPy is installed here; the missing-CuPy message cannot be shown")
    except ImportError:
        pass
    previous = backend.get_array_module()
    with pytest.raises(RuntimeError, match="CuPy is not installed"):
        backend.set_backend("cupy")
    assert backend.get_array_module() is previous


def test_backend_names_are_checked():
    with pytest.raises(ValueError, match="'torch'"):
        backend.set_backend("torch")
    with pytest.raises(TypeError, match="int"):
        backend.set_backend(3)


def test_environment_variable_selects_backend():
    code = "import numpy_transformer as nt; print(nt.get_array_module().__name__)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"NUMPY_TRANSFORMER_BACKEND": "numpy", "PATH": ""},
    )
    assert out.stdout.strip() == "numpy"


def test_a_bad_environment_variable_is_named_as_the_variable():
    code = "import numpy_transformer as nt; nt.get_array_module()"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"NUMPY_TRANSFORMER_BACKEND": "bogus"},
    )
    assert out.returncode != 0
    assert (
        "the environment variable NUMPY_TRANSFORMER_BACKEND is 'bogus', expected one of numpy, cupy"
        in out.stderr
    )


def test_random_uint16_is_uniform_in_every_bit_of_every_lane():
    """Each 64-bit draw is cut into four 16-bit integers: every lane and every bit must be fair."""
    draws = backend.random_uint16(np.random.default_rng(0), (200_000, 4))  # column j = lane j of each word
    bits = (draws[..., None] >> np.arange(16)) & 1  # (200000, 4, 16)
    assert (
        np.abs(bits.mean(axis=0) - 0.5).max() < 0.005
    )  # 4.5 standard deviations of a mean of 200 000 fair bits
    assert backend.random_uint16(np.random.default_rng(0), (3, 7)).shape == (3, 7)  # 21 = not a multiple of 4
    assert backend.random_uint16(np.random.default_rng(0), (0, 5)).shape == (0, 5)


def test_import_changes_nothing_process_wide():
    """No environment variable, no allocator setting: those are opt-in (tune_cpu, the command line)."""
    code = """
import ctypes, os
loaded = []
real_cdll = ctypes.CDLL
ctypes.CDLL = lambda name, *args, **kwargs: loaded.append(name) or real_cdll(name, *args, **kwargs)
before = dict(os.environ)
import numpy_transformer
assert dict(os.environ) == before, set(os.environ) ^ set(before)
assert not any("libc" in str(name) for name in loaded), loaded
"""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_tune_cpu_sets_the_allocator_and_reports_the_openblas_setting(monkeypatch):
    monkeypatch.delenv("OPENBLAS_THREAD_TIMEOUT", raising=False)
    monkeypatch.delenv("NUMPY_TRANSFORMER_MALLOC", raising=False)
    assert nt.tune_cpu() == {"allocator": sys.platform.startswith("linux"), "openblas_thread_timeout": False}
    monkeypatch.setenv("NUMPY_TRANSFORMER_MALLOC", "system")
    monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", "24")
    assert nt.tune_cpu() == {"allocator": False, "openblas_thread_timeout": True}
