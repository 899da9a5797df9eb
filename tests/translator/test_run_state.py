"""The run's saved state (RunState), what its evaluations decide (EvaluationState), the run
directory's checkpoints written from it (RunFiles), and the ranks of a run alone (Ranks): each owns
its part, and none reaches into the Trainer."""

import numpy as np
import pytest

from numpy_transformer.translator.config import TrainConfig
from numpy_transformer.translator.distributed import Ranks
from numpy_transformer.translator.run.directory import RunFiles
from numpy_transformer.translator.run.state import EvaluationState, RunState, Verdict


def state(**changes):
    optimizer = {
        "step": 3,
        "lr": 1e-3,
        "betas": [0.9, 0.98],
        "eps": 1e-9,
        "m.w": np.ones(2),
        "v.w": np.zeros(2),
    }
    return RunState(**{"run_id": "abc", "step": 3, "optimizer": optimizer, **changes})


def test_the_state_goes_into_a_checkpoint_and_comes_back_whole():
    saved = state(
        ranks=2,
        best_bleu=12.5,
        evals_since_best=1,
        lr_scale=0.5,
        kept=("step-0000003.npz",),
        steps_planned=40,
        time_spent_s=1.5,
    )
    arrays, meta = saved.to_checkpoint()
    assert sorted(arrays) == ["optim/m.w", "optim/v.w"] and "m.w" not in meta["optimizer"]
    assert meta["kept"] == ["step-0000003.npz"]  # JSON's list, as before
    back = RunState.from_checkpoint(arrays, meta, "model.npz")
    assert {**vars(back), "optimizer": None} == {**vars(saved), "optimizer": None}
    assert back.optimizer.keys() == saved.optimizer.keys()
    np.testing.assert_array_equal(back.optimizer["m.w"], saved.optimizer["m.w"])


def test_a_checkpoint_saved_before_a_field_existed_loads_with_its_default():
    arrays, meta = state().to_checkpoint()
    for name in (
        "run_id",
        "ranks",
        "best_bleu",
        "evals_since_best",
        "lr_scale",
        "kept",
        "steps_planned",
        "time_spent_s",
    ):
        del meta[name]
    back = RunState.from_checkpoint(arrays, meta, "model.npz")
    assert (back.run_id, back.ranks, back.best_bleu, back.evals_since_best, back.lr_scale) == (
        None,
        1,
        -1.0,
        0,
        1.0,
    )
    assert (back.kept, back.steps_planned, back.time_spent_s) == ((), None, None)


def test_a_fresh_run_and_an_old_checkpoint_start_from_the_same_evaluation_state():
    arrays, meta = state().to_checkpoint()
    for name in ("best_bleu", "evals_since_best", "lr_scale", "kept", "best_loss"):
        del meta[name]
    assert EvaluationState.of(RunState.from_checkpoint(arrays, meta, "model.npz")) == EvaluationState()
    saved = state(best_bleu=3.5, evals_since_best=2, lr_scale=0.25, kept=("step-0000002.npz",), best_loss=0.7)
    assert EvaluationState.of(saved) == EvaluationState(3.5, 2, 0.25, ("step-0000002.npz",), 0.7)
    assert RunState.from_checkpoint(*saved.to_checkpoint(), "model.npz") == saved


def test_each_evaluation_says_what_to_do_improve_cut_or_stop():
    config = TrainConfig(patience=5, plateau_cut=0.5, plateau_patience=2, lr_floor=1e-4)
    evaluations, verdicts = EvaluationState(), []
    for bleu in (3.0, 2.0, 2.0, 4.0, 1.0, 1.0, 1.0, 1.0, 1.0):
        verdicts.append(evaluations.judge(bleu, 1.0, config, scheduled=1e-3))
    improved, cut, stop = (
        Verdict(True, True, False, False),
        Verdict(False, False, False, True),
        Verdict(False, False, True, False),
    )
    nothing = Verdict(False, False, False, False)
    assert verdicts == [improved, nothing, cut, improved, nothing, cut, nothing, cut, stop]
    assert (evaluations.best_bleu, evaluations.evals_since_best, evaluations.lr_scale) == (4.0, 5, 0.125)
    # at the floor already: no cut, and the scaled rate never goes below the floor the schedule is above
    at_floor = EvaluationState(best_bleu=4.0, evals_since_best=1, lr_scale=0.1)
    assert at_floor.judge(1.0, 1.0, config, scheduled=1e-3) == nothing and at_floor.lr_scale == 0.1
    assert at_floor.learning_rate(1e-3, floor=1e-4) == 1e-4
    assert at_floor.learning_rate(5e-5, floor=1e-4) == 5e-5  # the schedule's own, below the floor
    assert EvaluationState(lr_scale=0.5).learning_rate(1e-3, floor=1e-4) == 5e-4
    never = TrainConfig(patience=0)  # no patience, no plateau cut: every evaluation only records
    assert (
        EvaluationState(best_bleu=1.0, evals_since_best=99).judge(0.0, 1.0, never, scheduled=1.0) == nothing
    )


def test_a_tied_bleu_at_a_lower_loss_becomes_the_best_without_resetting_patience():
    config = TrainConfig(patience=3, plateau_cut=1.0)
    evaluations = EvaluationState()
    verdicts = [
        evaluations.judge(bleu, loss, config, 1e-3)
        for bleu, loss in ((100.0, 0.9), (100.0, 0.8), (100.0, 0.85))
    ]
    # the second: best.npz (a lower loss), not an improvement (patience counts on); the third: neither
    assert [(v.improved, v.best) for v in verdicts] == [(True, True), (False, True), (False, False)]
    assert (evaluations.best_bleu, evaluations.best_loss, evaluations.evals_since_best) == (100.0, 0.8, 2)
    assert evaluations.judge(100.0, 0.1, config, 1e-3).stop  # patience ran out all the same
    assert evaluations.best_loss == 0.1
    # a run saved before the loss was kept: a tie keeps the first, until BLEU improves
    older = EvaluationState(best_bleu=100.0)
    assert not older.judge(100.0, 0.1, config, 1e-3).best and older.best_loss is None


def test_the_average_is_of_the_second_halfs_kept_checkpoints_on_disk_and_may_become_the_best(tmp_path):
    kept = ("step-0000004.npz", "step-0000006.npz", "step-0000008.npz", "step-0000010.npz")
    for name in kept[:-1]:
        (tmp_path / name).write_bytes(b"")
    evaluations = EvaluationState(best_bleu=5.0, kept=kept)
    # step 4 is the run's first half (of 10 steps); step 10's file was removed by hand
    assert evaluations.to_average(10, 3, tmp_path) == {"step-0000006.npz": 6, "step-0000008.npz": 8}
    assert evaluations.to_average(10, 1, tmp_path) == {"step-0000008.npz": 8}
    assert not evaluations.keep_best(5.0, 0.5) and evaluations.best_bleu == 5.0  # best.npz's loss not known
    assert evaluations.keep_best(5.5, 0.5) and (evaluations.best_bleu, evaluations.best_loss) == (5.5, 0.5)
    assert not evaluations.keep_best(5.5, 0.5) and not evaluations.keep_best(5.4, 0.1)
    assert evaluations.keep_best(5.5, 0.4) and evaluations.best_loss == 0.4
    assert not evaluations.keep_best(5.5, float("nan")) and evaluations.best_loss == 0.4
    assert (
        evaluations.keep_best(6.0, float("inf")) and evaluations.best_loss is None
    )  # not known: saved as None
    assert not evaluations.keep_best(6.0, 0.1)


def test_the_run_directory_rotates_the_checkpoints_it_wrote_and_returns_what_it_kept(tmp_path):
    written = []

    def write(path, saved):
        written.append((path.name, saved.kept))
        (path if path.suffix == ".npz" else path / "model.npz").write_bytes(b"")

    (tmp_path / "step-0000001.npz").write_bytes(b"")  # not the run's: never deleted
    run, current = RunFiles(tmp_path), state(kept=())
    for step in (2, 4, 6):
        current = run.save_evaluated(state(step=step, kept=current.kept), write, best=step == 4, keep=2)
    assert current.kept == ("step-0000004.npz", "step-0000006.npz")
    assert sorted(path.name for path in tmp_path.glob("step-*.npz")) == ["step-0000001.npz", *current.kept]
    assert written[-2:] == [("step-0000006.npz", current.kept), (tmp_path.name, current.kept)]
    assert ("best.npz", ("step-0000002.npz", "step-0000004.npz")) in written
    assert run.saved_step == 6
    last = run.keep_last(current, write, keep=1)
    assert last.kept == ("step-0000006.npz",) and not (tmp_path / "step-0000004.npz").exists()


def test_a_failed_save_deletes_no_checkpoint_and_returns_nothing(tmp_path):
    def full_disk(path, saved):
        raise OSError(28, "No space left on device")

    (tmp_path / "step-0000002.npz").write_bytes(b"")
    with pytest.raises(OSError):
        RunFiles(tmp_path).save_evaluated(state(step=4, kept=("step-0000002.npz",)), full_disk, False, keep=1)
    assert (tmp_path / "step-0000002.npz").exists()


def test_a_run_alone_agrees_with_itself_and_raises_at_once():
    ranks = Ranks()
    assert (ranks.rank, ranks.size, ranks.is_root, ranks.cores) == (0, 1, True, None)
    assert ranks.agree_on_step(0.5, "interrupted", 0.25) == (0.5, False, 0.25)
    assert ranks.stop_at_once("interrupted") == "interrupted" and ranks.agree_on_plan(17) == 17
    assert ranks.run_together(lambda: 3, lambda error: (2, str(error))) == 3
    with pytest.raises(ValueError), ranks.holding():
        raise ValueError("not held alone")
    assert ranks.failure is None
