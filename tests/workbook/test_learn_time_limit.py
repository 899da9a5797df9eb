"""The workbook's time limit stops the learner's code on every Python the package supports, even a
loop that Python 3.10 never stops for a signal (``while True: try: ...``): there it looks at the clock
on the learner's lines instead, and only for a file that has such a loop."""

import sys

import pytest

from numpy_transformer import workbook
from numpy_transformer.translator.cli import main
from numpy_transformer.workbook.loading import load_learner, needs_line_watch

RELU = "def relu_backward(dout, cache):\n    return dout * (cache > 0)\n\n"
SPINS = """
    while True:
        try:
            pass
        except Exception:
            pass
"""
NESTED = """
def helper():
    def inner():
        while True:
            try:
                pass
            except Exception:
                pass
"""
SEEN = """
def helper():
    while True:
        n = 0
        try:
            pass
        except Exception:
            pass
"""


def test_a_loop_no_signal_stops_at_the_top_level_is_stopped_and_said(tmp_path, monkeypatch, capsys):
    path = tmp_path / "mine.py"
    path.write_text(RELU + "if True:" + SPINS)
    monkeypatch.setattr(workbook.loading, "TIME_LIMIT", 0.5)
    assert main(["learn", "check", str(path)]) == 1
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "could not be imported: its top-level code was still running after 0.5 seconds (mine.py:" in line


def test_the_clock_is_watched_line_by_line_only_for_a_file_that_needs_it(tmp_path):
    (tmp_path / "nested.py").write_text(RELU + NESTED)
    (tmp_path / "seen.py").write_text(RELU + SEEN)
    assert needs_line_watch(load_learner(tmp_path / "nested.py")) == (sys.version_info < (3, 11))
    assert not needs_line_watch(load_learner(tmp_path / "seen.py"))  # its jump back lands on `n = 0`


@pytest.mark.parametrize("body", [SPINS, "\n    while True:\n        pass\n"], ids=["try", "pass"])
def test_a_backward_that_never_returns_is_stopped_whatever_its_loop(tmp_path, body):
    path = tmp_path / "mine.py"
    path.write_text("def relu_backward(dout, cache):" + body)
    (verdict,) = workbook.check(path, ["relu_backward"], time_limit=0.5)
    assert verdict.status == "error" and "did not return within 0.5 seconds" in verdict.message
