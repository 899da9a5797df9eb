"""The workbook's checker on files no learner means to write but some do: each is said for what it is, in
one line or one verdict, never a silent pass or a message pointing elsewhere."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from numpy_transformer import workbook


def learn(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "numpy_transformer", "learn", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_file_that_ends_the_process_at_import_is_an_error_not_a_pass(tmp_path):
    mine = tmp_path / "mine.py"
    mine.write_text("import os\nos._exit(0)\n")
    for action in ("check", "status"):
        done = learn(action, str(mine))
        assert done.returncode == 1, (action, done)
        assert "os._exit(0) at the top level" in done.stderr and "mine.py:2" in done.stderr


def test_a_process_the_file_forks_at_import_ends_as_it_asks(tmp_path):
    mine = tmp_path / "mine.py"
    mine.write_text(
        "import multiprocessing\n"
        "def f():\n    pass\n"
        "process = multiprocessing.get_context('fork').Process(target=f)\n"
        "process.start()\nprocess.join()\n"
        "def relu_backward(dout, cache):\n    return dout * cache\n"
    )
    done = learn("check", str(mine), "relu_backward")
    assert done.returncode == 0, done
    assert done.stdout.count("relu_backward") == 1 and "could not be imported" not in done.stderr


@pytest.mark.parametrize(
    "content, said",
    [("x = 1\n".encode("utf-16"), "NUL bytes (UTF-16 text)"), (b"x = 1\n\x00\x01", "NUL bytes (not text)")],
)
def test_a_file_that_is_not_utf8_text_is_said_so(tmp_path, content, said):
    mine = tmp_path / "mine.py"
    mine.write_bytes(content)
    with pytest.raises(
        workbook.LearnerCodeError, match=re.escape(f"mine.py could not be imported: it holds {said}")
    ):
        workbook.load_learner(mine)


def test_a_notebook_without_cells_names_what_a_notebook_is(tmp_path):
    pytest.importorskip("jupytext", reason="notebooks need the notebook extra (jupytext)")
    mine = tmp_path / "mine.ipynb"
    mine.write_text("{}")
    with pytest.raises(workbook.LearnerCodeError, match="expected a Jupyter notebook, JSON with its cells"):
        workbook.load_learner(mine)


def test_an_exercise_name_bound_to_something_else_than_a_function_is_theirs_and_said(tmp_path):
    mine = tmp_path / "mine.py"
    mine.write_text("relu_backward = 5\n")
    (verdict,) = workbook.check(mine, ["relu_backward"])
    assert verdict.status == "error"
    assert "relu_backward in mine.py is int 5, not a function" in verdict.message


def test_a_nan_in_a_gradient_is_shown_beside_the_textbooks_number(tmp_path):
    mine = tmp_path / "mine.py"
    mine.write_text(
        "def relu_backward(dout, cache):\n    dx = dout * cache\n    dx.flat[5] = float('nan')\n    return dx\n"
    )
    (verdict,) = workbook.check(mine, ["relu_backward"])
    (wrong,) = [g for g in verdict.gradients if g.status == "wrong"]
    assert "yours is nan, expected " in wrong.detail and "expected nan" not in wrong.detail


def test_textbook_takes_a_number_as_the_losss_dloss_and_refuses_it_for_an_array_output():
    from numpy_transformer import functional

    x, weight = np.ones((2, 3, 4)), np.ones((5, 4))
    _, cache = functional.linear_forward(x, weight, np.zeros(5))
    with pytest.raises(ValueError, match=r"dout of shape \(\) does not fit this LinearCache"):
        workbook.textbook(cache, 1.0)


@pytest.mark.parametrize(
    "action, path, said",
    [
        ("status", "/dev/null", "a character device"),
        ("check", "/dev/zero", "a character device"),
        ("hint", "/dev/null", "a character device"),
        ("check", "FIFO", "a FIFO (named pipe)"),
    ],
)
def test_a_path_that_exists_but_is_no_regular_file_is_said_for_what_it_is(tmp_path, action, path, said):
    if path == "FIFO":  # never opened: opening a FIFO waits for a writer that never comes
        path = str(tmp_path / "pipe")
        os.mkfifo(path)
    done = learn(action, path, *(["relu_backward"] if action == "hint" else []))
    assert done.returncode == 2, done
    assert f"{path}: {said}, not a regular file" in done.stderr and "no such file" not in done.stderr
    assert "give the workbook's file" in done.stderr


MONKEYPATCHING = """
from numpy_transformer import functional as F
from numpy_transformer.workbook import blocks as B

def relu_backward(dout, cache):
    return dout

F.relu_backward = relu_backward
F.dropout_backward = lambda dout, cache: dout
B.residual_backward = None
"""


def test_a_file_that_assigns_its_function_over_the_textbooks_is_graded_and_the_textbook_kept(tmp_path):
    from numpy_transformer import functional
    from numpy_transformer.workbook import blocks

    textbook = functional.relu_backward, functional.dropout_backward, blocks.residual_backward
    mine = tmp_path / "mine.py"
    mine.write_text(MONKEYPATCHING)
    relu, dropout = workbook.check(mine, ["relu_backward", "dropout_backward"])
    assert (functional.relu_backward, functional.dropout_backward, blocks.residual_backward) == textbook
    assert relu.status == "wrong" and relu.gradients[0].mistake == "relu_unmasked"
    assert "mine.py assigns it over the textbook's functional.relu_backward" in relu.message
    assert dropout.status == "wrong", dropout  # a replacement under no name of the file's is theirs too
    assert "mine.py assigns it over the textbook's functional.dropout_backward" in dropout.message
    (residual,) = workbook.check(mine, ["residual_backward"])
    assert residual.status == "textbook"  # None is no function: the textbook's, left in place


def test_a_file_that_fails_after_assigning_over_the_textbook_leaves_it_as_it_was(tmp_path):
    from numpy_transformer import functional

    textbook = functional.relu_backward
    mine = tmp_path / "mine.py"
    mine.write_text(MONKEYPATCHING + "raise RuntimeError('mine')\n")
    with pytest.raises(workbook.LearnerCodeError, match="RuntimeError: mine"):
        workbook.load_learner(mine)
    assert functional.relu_backward is textbook


def test_learn_start_on_a_full_disk_leaves_nothing_it_made(tmp_path, monkeypatch):
    from numpy_transformer.files import SaveError
    from numpy_transformer.workbook import writing

    def full(path, text):
        raise SaveError.writing(
            path, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), "nothing was written there"
        )

    kept = tmp_path / "kept"
    kept.mkdir()
    for written in range(2):  # the disk fills before the first file, or between the two
        real, calls = writing.write_text_atomically, []

        def once(path, text, written=written, real=real, calls=calls):
            calls.append(path)
            (real if len(calls) <= written else full)(path, text)

        monkeypatch.setattr(writing, "write_text_atomically", once)
        with pytest.raises(OSError, match="No space left on device"):
            workbook.start(tmp_path / "new" / "deeper")
        assert not (tmp_path / "new").exists()
        with pytest.raises(OSError, match="No space left on device"):
            workbook.start(kept)
        assert kept.is_dir() and not any(kept.iterdir())


def test_the_first_verdict_on_an_unmasked_relu_leaves_the_formula_to_the_hints(tmp_path):
    mine = tmp_path / "mine.py"
    mine.write_text("def relu_backward(dout, cache):\n    return dout\n")
    report, _ = workbook.run_check(mine, ["relu_backward"])
    assert "the relu's mask is not applied" in report
    assert "dout * cache" not in report and "* cache" not in report


@pytest.mark.parametrize(
    "formula",
    ["dout * cache", "dout * keep / keep_prob", "dout - sum(dout * y", "probs - q", "dx = dout", "mean(g"],
)
def test_no_cause_hands_over_the_formula_a_layers_last_hint_keeps(formula):
    from numpy_transformer.workbook.exercises.curriculum import EXERCISES
    from numpy_transformer.workbook.exercises.mistakes import SENTENCES

    assert any(formula in exercise.hints[-1] for exercise in EXERCISES)  # the hint keeps it
    assert [key for key, text in SENTENCES.items() if formula in text] == []
