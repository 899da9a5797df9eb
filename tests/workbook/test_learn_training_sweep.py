"""The training rungs on what a hostile learner hands in: a narrower dtype, an array of objects, an int
too large for a float, None, code that raises, a rate that makes the run diverge, a step of the wrong
shape. Each is said for what it is, by learn check, learn status, learn train and learn prove, and a run
leaves the package's modules as it found them."""

from __future__ import annotations

import subprocess
import sys

import pytest
from learn_training_rungs import SOLVED_TRAINING, TRAINING_HEADER

from numpy_transformer import workbook
from numpy_transformer.translator.cli import main
from numpy_transformer.translator.tasks import make_task
from numpy_transformer.workbook.commands import prove_file
from numpy_transformer.workbook.proof import Recipe


def _file(tmp_path, *replaced: tuple[str, str], name: str = "mine.py"):
    """The right training rungs, each (function, source) in ``replaced`` defined again after them."""
    path = tmp_path / name
    path.write_text(TRAINING_HEADER + SOLVED_TRAINING + "".join(source for _, source in replaced))
    return path


def learn(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "numpy_transformer", "learn", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )


def test_a_rung_returned_as_float32_is_named_by_its_dtype(tmp_path):
    path = _file(
        tmp_path,
        ("kept", "\n_clip, _adam, _cosine = clip_by_global_norm, adam_step, warmup_cosine_learning_rate\n"),
        ("clip", "\ndef clip_by_global_norm(grads, max_norm):\n    clipped, norm = _clip(grads, max_norm)\n"
         "    return [g.astype(np.float32) for g in clipped], norm\n"),
        ("adam", "\ndef adam_step(*args):\n    param, m, v = _adam(*args)\n"
         "    return param.astype(np.float32), m, v\n"),
        ("cosine", "\ndef warmup_cosine_learning_rate(*args):\n    return np.float32(_cosine(*args))\n"),
    )  # fmt: skip
    names = ["clip_by_global_norm", "adam_step", "warmup_cosine_learning_rate"]
    verdicts = {verdict.name: verdict for verdict in workbook.check(path, names)}
    report = workbook.format_verdicts(list(verdicts.values()))
    for name, value in zip(names, ("grads", "param", "lr")):
        verdict = verdicts[name]
        assert verdict.status == "wrong", report
        (wrong,) = [g for g in verdict.gradients if g.status == "wrong"]
        assert wrong.mistake == "rung_dtype", report
        assert f"{value} is returned as float32, which rounds it to about 6 digits" in report


def test_an_array_of_objects_and_an_int_too_large_for_a_float_are_said_for_what_they_are(tmp_path):
    path = _file(
        tmp_path,
        ("adam", "\ndef adam_step(param, grad, m, v, t, lr, beta1, beta2, eps):\n"
         "    return param.astype(object), m.copy(), v.copy()\n"),
        ("noam", "\ndef noam_learning_rate(step, d_model, warmup):\n    return 10 ** 400\n"),
    )  # fmt: skip
    noam, adam = workbook.check(path, ["adam_step", "noam_learning_rate"])  # in the ladder's order
    assert (
        adam.status == "error"
        and "returned param as an array of dtype object, expected floats" in adam.message
    )
    assert (
        noam.status == "error"
        and "returned lr as an int of 401 digits, too large for a float" in noam.message
    )


def test_status_says_an_error_for_a_rung_that_returns_none_not_that_it_raises(tmp_path):
    path = _file(tmp_path, ("adam", "\ndef adam_step(*args):\n    return None\n"))
    report = workbook.format_status(workbook.status(path))
    line = next(line for line in report.splitlines() if ". adam_step" in line)
    assert "(yours: an error, learn check says what)" in line and "raises" not in report, report


ADAMW_CALLING_ADAM = (
    "\ndef adamw_step(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay):\n"
    "    return adam_step(param * (1 - lr * weight_decay), grad, m, v, t, lr, beta1, beta2, eps)\n"
)


def test_status_says_a_right_adamw_step_waits_on_the_wrong_adam_step_it_calls(tmp_path):
    path = _file(
        tmp_path,
        ("adam", "\n_adam = adam_step\n\ndef adam_step(*args):\n    param, m, v = _adam(*args)\n"
         "    return param + 1.0, m, v\n"),
        ("adamw", ADAMW_CALLING_ADAM),
    )  # fmt: skip
    lines = workbook.format_status(workbook.status(path)).splitlines()
    adam, adamw = (
        next(line for line in lines if f". {name} " in line) for name in ("adam_step", "adamw_step")
    )
    assert "(yours: wrong)" in adam, lines
    assert "locked behind adam_step (yours: waits on adam_step, which it calls)" in adamw, lines


def test_a_returned_array_of_the_list_handed_in_is_said_as_one_of_its_arrays(tmp_path):
    path = _file(
        tmp_path,
        ("clip", "\n_clip = clip_by_global_norm\n\ndef clip_by_global_norm(grads, max_norm):\n"
         "    clipped, norm = _clip(grads, max_norm)\n    if norm <= max_norm:  # nothing clipped\n"
         "        clipped[0] = grads[0]\n    return clipped, norm\n"),
    )  # fmt: skip
    (verdict,) = workbook.check(path, ["clip_by_global_norm"])
    assert verdict.cause == "returns_input", verdict
    assert "returns one of the arrays it was handed (grads[0]): return new arrays" in verdict.message


def test_adam_steps_contract_gives_the_formula_and_where_epsilon_goes():
    doc = workbook.TRAINING_BY_NAME["adam_step"].doc
    for part in ("m = beta1 * m + (1 - beta1) * grad", "v_hat = v / (1 - beta2^t)", "(sqrt(v_hat) + eps)"):
        assert part in doc, doc


def _proof(tmp_path, name: str, source: str):
    path = _file(tmp_path, (name, source), name=f"{name}.py")
    recipe = Recipe(d_model=16, N=1, h=2, d_ff=32, steps=2, test_size=10)
    return prove_file(path, make_task("numbers-en-fr", seed=0), recipe, compare=False)


def test_the_proof_names_a_rung_learn_check_finds_an_error_in_and_what_it_raised(tmp_path):
    lines, code = _proof(
        tmp_path, "adam", "\ndef adam_step(param, grad, *rest):\n    return param + grad[:1, :1, :1]\n"
    )
    assert code == 1
    said = next(line for line in lines if line.startswith("left to the textbook"))
    assert "your adam_step: IndexError: too many indices" in said and "adam.py:" in said, lines
    assert "not a proof yet: learn check finds an error in adam_step" in lines, lines
    assert not any("write the workbook's backwards first" in line for line in lines), lines


def test_the_proofs_verdict_names_every_rung_learn_check_fails_beside_the_target(tmp_path):
    for name, source in (
        ("clip", "\ndef clip_by_global_norm(grads, max_norm):\n    return None\n"),
        ("noam", "\ndef noam_learning_rate(step, d_model, warmup):\n    return 0.001\n"),
    ):
        lines, code = _proof(tmp_path, name, source)
        function = {"clip": "clip_by_global_norm", "noam": "noam_learning_rate"}[name]
        verdict = next(line for line in lines if line.startswith("not"))
        assert code == 1 and function in verdict and "the target" not in verdict, lines


def test_learn_train_whose_schedule_makes_the_blocks_diverge_says_so_and_exits_1(tmp_path):
    path = _file(
        tmp_path, ("noam", "\ndef noam_learning_rate(step, d_model, warmup):\n    return float('nan')\n")
    )
    done = learn("train", str(path), "--steps", "2", "--threads", "1", "--schedule", "noam", "--no-compare")
    assert done.returncode == 1, done
    assert "blocks.py's encoder-decoder: diverged at step 1: the weights of" in done.stderr, done.stderr
    assert (
        "on your noam_learning_rate" in done.stderr
        and "(noam_learning_rate wrong in learn check)" in done.stderr
    )


def test_learn_train_refuses_an_update_of_the_wrong_shape_before_it_makes_anything(tmp_path):
    path = _file(
        tmp_path,
        ("adam", "\n_adam = adam_step\n\ndef adam_step(*args):\n    param, m, v = _adam(*args)\n"
         "    return param.T, m, v\n"),
    )  # fmt: skip
    done = learn("train", str(path), "--steps", "2", "--threads", "1", "--no-compare")
    assert done.returncode == 1, done
    assert "your adam_step returned an array of shape (3, 2), expected (2, 3); nothing was run" in done.stderr
    assert "saving to" not in done.stdout and sorted(p.name for p in tmp_path.iterdir()) == ["mine.py"]


def test_a_rung_returning_fewer_or_other_shaped_arrays_is_graded_wrong_not_a_crash(tmp_path):
    path = _file(
        tmp_path,
        ("kept", "\n_clip, _adamw = clip_by_global_norm, adamw_step\n"),
        ("clip", "\ndef clip_by_global_norm(grads, max_norm):\n    clipped, norm = _clip(grads, max_norm)\n"
         "    return clipped[:-1], norm\n"),
        ("adamw", "\ndef adamw_step(*args):\n    param, m, v = _adamw(*args)\n    return param[:1], m, v\n"),
    )  # fmt: skip
    verdicts = workbook.check(path, ["clip_by_global_norm", "adamw_step"])
    assert [v.status for v in verdicts] == ["wrong", "wrong"], workbook.format_verdicts(verdicts)


@pytest.mark.parametrize(
    ("returned", "said"),
    [
        # NumPy 2 overflows in their product; NumPy 1 computes it in float64, as the case below does
        ("param * 1e300", ": warning: your adam_step: "),
        ("param.astype('float64') * 1e300", "returned values beyond float32's range"),
    ],
)
def test_learn_train_whose_adam_step_overflows_says_every_warning_as_theirs_and_errs_as_learn_train(
    tmp_path, returned, said
):
    """Weights made infinite by their update, every gradient finite: the overflow said as theirs, in
    their code or in the cast of what they returned, and the run stopped before scoring them (no NumPy
    warning of the model's own sums, which would be nobody's), said by learn train."""
    path = _file(
        tmp_path,
        ("adam", "\n_adam = adam_step\n\ndef adam_step(*args):\n    param, m, v = _adam(*args)\n"
         f"    return {returned}, m, v\n"),
    )  # fmt: skip
    done = learn("train", str(path), "--steps", "3", "--threads", "1", "--no-compare", "--no-progress")
    assert done.returncode == 1, done
    warned = [line for line in done.stderr.splitlines() if ": warning: " in line]
    assert warned and all(": warning: your adam_step: " in line for line in warned), done.stderr
    assert said in done.stderr, done.stderr
    assert "numpy-transformer learn train: error: training stopped: step 1: the weights of " in done.stderr
    assert "numpy-transformer train:" not in done.stderr and "loss nan" not in done.stdout, done


HANGS = """
import time

_adam = adam_step

def adam_step(*args):
    with open({calls!r}, "a") as calls:
        calls.write("called\\n")
    time.sleep(1000)
    return _adam(*args)
"""
SLOW_FIRST_CALL = """
import time

_adam = adam_step
_calls = []

def adam_step(*args):
    _calls.append(args)
    if len(_calls) == 1:
        time.sleep(0.5)
    return _adam(*args)
"""


def test_status_waits_once_for_a_hanging_adam_step_and_says_what_it_waits_for(tmp_path, monkeypatch):
    """adamw_step calls the adam_step that ran out of time: it is not run (it would wait as long
    again), and waits on adam_step; the wait is said while it lasts."""
    calls = tmp_path / "calls.txt"
    path = _file(tmp_path, ("adam", HANGS.format(calls=str(calls))), ("adamw", ADAMW_CALLING_ADAM))
    monkeypatch.setattr(workbook.loading, "WAITING_AFTER", 0.1)
    said: list[str] = []
    lines = workbook.format_status(workbook.status(path, say=said.append, time_limit=0.5)).splitlines()
    # said once for adam_step, never for adamw_step; another rung slower than 0.1 s (a loaded machine) is said too
    assert said.count("waiting for your adam_step (a limit of 0.5 s)…") == 1, said
    assert not any("adamw_step" in line for line in said), said
    assert calls.read_text() == "called\n"  # adam_step entered once: adamw_step never ran
    adam, adamw = (
        next(line for line in lines if f". {name} " in line) for name in ("adam_step", "adamw_step")
    )
    assert "(yours: an error, learn check says what)" in adam, lines
    assert "locked behind adam_step (yours: waits on adam_step, which it calls)" in adamw, lines


def test_learn_status_says_on_stderr_what_it_waits_for(tmp_path, monkeypatch, capsys):
    path = _file(tmp_path, ("adam", SLOW_FIRST_CALL))
    monkeypatch.setattr(workbook.loading, "WAITING_AFTER", 0.1)
    assert main(["learn", "status", str(path)]) == 0
    said = capsys.readouterr().err.splitlines()  # another rung slower than 0.1 s is said too
    assert "learn status: waiting for your adam_step (a limit of 60 s)…" in said, said
    assert all(line.startswith("learn status: waiting for your ") for line in said), said
