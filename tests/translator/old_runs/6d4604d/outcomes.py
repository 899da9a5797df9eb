"""What a run saved by an older version of the package does under the installed one: resumed, translated and
fine-tuned, as hashes of every saved array and the translations' text.

``saved/`` (a run directory) was written by revision 6d4604d (``train --task numbers-en-fr --d-model 8 --layers 1
--heads 2 --d-ff 16 --dropout 0.1 --steps 20 --eval-every 20 --eval-size 8 --eval-examples 0
--keep-checkpoints 0``), and
``expected.json`` by this file run with that revision importable, once per kernel set
(``NUMPY_TRANSFORMER_KERNELS=reference`` for the textbook's) on each CPU whose BLAS core it records::

    PYTHONPATH=<checkout at 6d4604d> python tests/translator/old_runs/6d4604d/outcomes.py

tests/translator/test_old_checkpoints.py computes the same outcomes with the package under test and requires
them equal, bit for bit.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SOURCES = ["seven hundred twelve", "forty-one thousand three", "nine", "two hundred thousand eighty-eight"]


def array_hashes(path: Path) -> dict[str, str]:
    """sha256 of every array of a checkpoint except its metadata (which holds the run's random id)."""
    with np.load(path, allow_pickle=False) as saved:
        return {
            name: hashlib.sha256(
                saved[name].dtype.str.encode() + str(saved[name].shape).encode() + saved[name].tobytes()
            ).hexdigest()
            for name in sorted(saved.files)
            if name != "meta"
        }


def cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "numpy_transformer", *args], capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        raise RuntimeError(f"numpy-transformer {' '.join(args)} exited {done.returncode}: {done.stderr}")
    return done.stdout


def outcomes() -> dict[str, object]:
    with tempfile.TemporaryDirectory() as scratch:
        resumed = Path(scratch) / "resumed"
        shutil.copytree(HERE / "saved", resumed)
        cli("train", "--resume", "--out", str(resumed), "--steps", "30", "--no-progress")
        tuned = Path(scratch) / "tuned"
        cli(
            "train",
            "--from",
            str(HERE / "saved"),
            "--data",
            str(HERE / "finetune.tsv"),
            "--steps",
            "10",
            "--eval-every",
            "10",
            "--out",
            str(tuned),
            "--no-progress",
        )
        run = str(HERE / "saved")
        return {
            "resumed": array_hashes(resumed / "model.npz"),
            "fine-tuned": array_hashes(tuned / "model.npz"),
            "greedy": cli("translate", "--checkpoint", run, *SOURCES),
            "beam": cli(
                "translate",
                "--checkpoint",
                run,
                "--strategy",
                "beam",
                "--beam-width",
                "4",
                "--n-best",
                "2",
                *SOURCES,
            ),
            # an explicit temperature: before 90f505b the default one drew from float64 probabilities (a
            # float subclass NumPy promoted), unlike --temperature 1; since, both draw from the model's float32
            "sampled": cli(
                "translate",
                "--checkpoint",
                run,
                "--strategy",
                "sample",
                "--temperature",
                "1",
                "--seed",
                "3",
                *SOURCES,
            ),
        }


def blas_core() -> str:
    """The kernels NumPy's OpenBLAS chose for this CPU (Haswell, SkylakeX, Zen...): each rounds float32
    products its own way, so the same run gives other bits on another core. "unknown" for another BLAS."""
    for library in sorted((Path(np.__file__).parent.parent / "numpy.libs").glob("*openblas*")):
        for symbol in (
            "scipy_openblas_get_corename64_",
            "scipy_openblas_get_corename",
            "openblas_get_corename",
        ):
            corename = getattr(ctypes.CDLL(str(library)), symbol, None)
            if corename is not None:
                corename.restype = ctypes.c_char_p
                return corename().decode()
    return "unknown"


def recorded_under() -> str:
    """The conditions bit-for-bit equality holds under: the kernel set, NumPy's minor version and the core
    its BLAS runs for this CPU."""
    kernels = os.environ.get("NUMPY_TRANSFORMER_KERNELS", "fast")
    return f"kernels={kernels} numpy={'.'.join(np.__version__.split('.')[:2])} blas={blas_core()}"


if __name__ == "__main__":
    path = HERE / "expected.json"
    recorded = json.loads(path.read_text()) if path.exists() else {}
    recorded[recorded_under()] = outcomes()
    path.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
