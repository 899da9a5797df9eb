"""Shared fixtures: tolerances, padded batches, tiny models, running a test on the textbook, and the
documentation site built once."""

import os
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

import numpy_transformer as nt
from numpy_transformer.kernels import using_kernels

# the helpers several tests share (the CuPy stand-in, the hostile cases, Marian files...) live in support/
sys.path.insert(0, str(Path(__file__).parent / "support"))
from docs_site import BUILT_ELSEWHERE, build_site, builds_the_site_here

GRADCHECK_TOLERANCE = 1e-6  # worst relative error of a float64 finite-difference check
KERNEL_TOLERANCE = 1e-12  # worst relative error of a kernel against the textbook, float64
ATTENTION = {"mha": nt.MultiHeadAttentionBlock, "mla": nt.MultiHeadLatentAttentionBlock}

# A runner started in the background without job control (nohup, `cmd &` in a script) ignores SIGINT, and
# the children of the Ctrl-C tests would inherit that and never be interrupted: a handler of Python's own is
# not inherited (each child starts with SIGINT at its default), so the tests see what a user's terminal does.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def padded_ids(rng, batch, length, vocab, pad_id=0):
    """Random ids in [1, vocab) with a random amount of right padding per row (at least one real token)."""
    ids = rng.integers(1, vocab, size=(batch, length))
    for row in range(batch):
        ids[row, rng.integers(1, length + 1) :] = pad_id
    return ids


def tiny_model(kind="mha", norm_first=True, dtype="float64", dropout=0.1, seed=0):
    """Source vocabulary 11, target 13, lengths 7 and 6, d_model 8, two layers of two heads."""
    return nt.build_transformer(
        11,
        13,
        7,
        6,
        d_model=8,
        N=2,
        h=2,
        dropout=dropout,
        d_ff=12,
        attention=kind,
        norm_first=norm_first,
        dtype=dtype,
        seed=seed,
    )


def model_batch(seed=0):
    """(src, tgt, labels) for tiny_model: 3 rows, padded with 0."""
    rng = np.random.default_rng(seed)
    return padded_ids(rng, 3, 7, 11), padded_ids(rng, 3, 6, 13), padded_ids(rng, 3, 6, 13)


def relative_error(ours, reference):
    """max |ours - reference| / max |reference| (0 when both are 0)."""
    ours, reference = np.asarray(ours, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    scale = np.abs(reference).max(initial=0.0)
    return 0.0 if scale == 0 else float(np.abs(ours - reference).max(initial=0.0) / scale)


@pytest.fixture(params=["fast", "reference"])
def kernels(request):
    """Run the test twice: on the fast kernels and on the textbook. Yields the name."""
    with using_kernels(request.param):
        yield request.param


@pytest.fixture
def textbook():
    """Run the test on the textbook (set_kernels("reference")), the fast kernels restored after."""
    with using_kernels("reference"):
        yield


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    """The built documentation site, once for every test that reads it (test_docs_site's, and the
    walkthrough's, executed in its build): NUMPY_TRANSFORMER_SITE, or built here as .ci/run builds it."""
    if os.environ.get(BUILT_ELSEWHERE):
        return Path(os.environ[BUILT_ELSEWHERE])
    if not builds_the_site_here():
        pytest.skip('mkdocs is not installed: pip install -e ".[docs]" (the documentation extra)')
    directory = tmp_path_factory.mktemp("site")
    build_site(directory)
    return directory
