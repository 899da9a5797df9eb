"""Data parallelism across processes on MPI: K ranks train as one process on the same global batches.

The runs under ``mpiexec -n 2`` need mpi4py and an MPI launcher (``pip install -e ".[mpi]"``, which
``.[dev]`` includes); without them those tests are skipped with the reason.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from numpy_transformer.backend import step_rng
from numpy_transformer.module import Parameter
from numpy_transformer.translator import distributed
from numpy_transformer.translator.config import TrainConfig
from numpy_transformer.translator.distributed import (
    AnotherRankFailed,
    Communicator,
    launched_rank,
    launched_ranks,
    weights_checksum,
)
from numpy_transformer.translator.run.checkpoint import load_checkpoint
from numpy_transformer.translator.training import Trainer

MPIEXEC = shutil.which(
    "mpiexec", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
)
needs_mpi = pytest.mark.skipif(
    MPIEXEC is None or __import__("importlib").util.find_spec("mpi4py") is None,
    reason="needs mpi4py and mpiexec: pip install -e '.[mpi]'",
)
MODEL = {"d_model": 16, "N": 1, "h": 2, "d_ff": 32}
CONFIG = {
    "task": "copy",
    "batch_size": 12,
    "lr": 3e-3,
    "warmup": 5,
    "eval_every": 1000,
    "log_every": 5,
    "seed": 3,
}


def mpiexec(ranks, *args, timeout=300, **kwargs):
    """Run ``mpiexec -n ranks args``; a run still going after ``timeout`` seconds (ranks left waiting
    for each other) fails the test, and every process of it is ended."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "PMIX_"))}
    with subprocess.Popen(
        [MPIEXEC, "-n", str(ranks), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # its own process group: the ranks can be ended with it
        **kwargs,
    ) as run:
        try:
            stdout, stderr = run.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
            stdout, stderr = run.communicate()
            pytest.fail(f"mpiexec -n {ranks} still running after {timeout} s (a hang):\n{stderr[-2000:]}")
    return subprocess.CompletedProcess(run.args, run.returncode, stdout, stderr)


# -- without MPI ------------------------------------------------------------------------------


def test_launched_ranks_reads_the_launchers_variables(monkeypatch):
    for name in distributed.LAUNCHER_SIZE_VARS:
        monkeypatch.delenv(name, raising=False)
    assert launched_ranks() == 1 and Communicator.from_environment() is None
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    assert launched_ranks() == 4


def test_under_a_launcher_without_mpi4py_the_run_says_so(monkeypatch):
    monkeypatch.setenv("PMI_SIZE", "2")
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    with pytest.raises(
        RuntimeError, match=r"started under MPI with 2 ranks, but mpi4py is not installed.*\[mpi\]"
    ):
        Communicator.from_environment()


def test_the_cupy_backend_is_refused_until_its_all_reduce_takes_device_buffers(monkeypatch):
    monkeypatch.setenv("PMI_SIZE", "2")
    monkeypatch.setattr(distributed, "backend_name", lambda: "cupy")
    with pytest.raises(RuntimeError, match="CuPy backend needs its all-reduce on device buffers"):
        Communicator.from_environment()


class FakeComm(Communicator):
    """A communicator of ``size`` ranks with this rank's number, without MPI."""

    def __init__(self, rank, size, gathered=None):
        self.rank, self.size, self.local_size, self._gathered = rank, size, size, gathered
        self.comm = self

    def allgather(self, value):
        return self._gathered


def test_rows_cover_the_batch_once_in_nearly_equal_slices():
    for batch in (3, 7, 12):
        slices = [FakeComm(rank, 3).rows(batch) for rank in range(3)]
        np.testing.assert_array_equal(np.concatenate([np.arange(batch)[s] for s in slices]), np.arange(batch))
        assert max(s.stop - s.start for s in slices) - min(s.stop - s.start for s in slices) <= 1


def test_drifted_weights_are_named_by_rank():
    FakeComm(0, 3, gathered=[1.5, 1.5, 1.5]).check_same(1.5, "weights")
    with pytest.raises(
        RuntimeError, match=r"weights drifted apart \(rank 0: 1.5, rank 2: 1.25\); ranks \[2\] differ"
    ):
        FakeComm(0, 3, gathered=[1.5, 1.5, 1.25]).check_same(1.5, "weights")


class DoublingComm(FakeComm):
    """Rank 0 of 2 whose all-reduce doubles every buffer in place, as a second equal rank would;
    it keeps what it was given before doubling."""

    def __init__(self):
        super().__init__(0, 2)
        self.reduced = []

    def Allreduce(self, _in_place, buffer, op):  # mpi4py's name
        self.reduced.append((buffer, buffer.copy()))
        buffer *= 2


def test_the_all_reduce_sums_the_models_flat_gradient_in_place_and_the_loss_beside_it(monkeypatch):
    comm = DoublingComm()
    comm._mpi = type("MPI", (), {"IN_PLACE": None, "SUM": None})
    trainer = Trainer.create(TrainConfig(**CONFIG, steps=2, threads=1, clip=0.0), MODEL, comm=comm)
    monkeypatch.setattr(trainer.optimizer, "step", lambda lr: None)  # keep the reduced gradient to look at
    trainer.train_step()
    (gradients, before), (side, side_before) = comm.reduced
    assert gradients is trainer.model.flat.grad  # the model's own buffer: no copy in, no copy out
    # the loss, the stop and failure flags, and rank 0's learning-rate multiplier (plateau cuts)
    assert side.shape == (4,) and side_before[1:].tolist() == [0.0, 0.0, 1.0]
    np.testing.assert_array_equal(gradients, 2 * before)


class FailedOtherRank(DoublingComm):
    """Rank 0 of 2 where the other rank reports a failure in the step's side all-reduce."""

    def Allreduce(self, _in_place, buffer, op):  # mpi4py's name
        super().Allreduce(_in_place, buffer, op)
        if buffer.shape == (4,):  # the weighted loss, the stop flags, the failure flags, lr_scale
            buffer[2] += 1.0


def test_another_ranks_failure_stops_this_rank_at_the_same_step_before_the_update():
    comm = FailedOtherRank()
    comm._mpi = type("MPI", (), {"IN_PLACE": None, "SUM": None})
    trainer = Trainer.create(TrainConfig(**CONFIG, steps=2, threads=1), MODEL, comm=comm)
    before = trainer.model.flat.data.copy()
    with pytest.raises(AnotherRankFailed):
        trainer.train_step()
    np.testing.assert_array_equal(trainer.model.flat.data, before)
    assert trainer.step == 0


def test_a_ranks_own_failure_is_held_until_the_all_reduce_then_raised_there(monkeypatch):
    comm = DoublingComm()
    comm._mpi = type("MPI", (), {"IN_PLACE": None, "SUM": None})
    trainer = Trainer.create(TrainConfig(**CONFIG, steps=2, threads=1), MODEL, comm=comm)

    def out_of_memory(*args):
        raise MemoryError("Unable to allocate 4.00 GiB")

    monkeypatch.setattr(trainer.stepper, "_loss_and_backward", out_of_memory)
    with pytest.raises(MemoryError, match=r"4\.00 GiB"):
        trainer.train_step()
    _, side_before = comm.reduced[-1]
    assert len(comm.reduced) == 2 and side_before[2] == 1.0  # it joined both all-reduces, saying so


def test_the_launchers_rank_is_read_before_mpi_starts(monkeypatch):
    for name in distributed.LAUNCHER_RANK_VARS:
        monkeypatch.delenv(name, raising=False)
    assert launched_rank() == 0
    monkeypatch.setenv("PMI_RANK", "1")
    assert launched_rank() == 1


def test_dropout_generators_depend_on_seed_step_and_rank_only():
    draw = lambda *key: step_rng(*key).integers(0, 2**63, 4).tolist()  # noqa: E731
    assert draw(3, 10, 1) == draw(3, 10, 1)
    assert len({str(draw(3, 10, 0)), str(draw(3, 10, 1)), str(draw(3, 11, 0)), str(draw(4, 10, 0))}) == 4


def test_checksum_sees_a_change_of_one_weight():
    parameters = [Parameter(np.ones((3, 3))), Parameter(np.zeros(2))]
    before = weights_checksum(parameters)
    parameters[1].data[0] = 1e-12
    assert weights_checksum(parameters) != before


def test_batches_smaller_than_the_ranks_are_refused():
    with pytest.raises(ValueError, match="batch-size 2 is smaller than the 3 ranks"):
        Trainer.create(TrainConfig(**{**CONFIG, "batch_size": 2}), MODEL, comm=FakeComm(0, 3))


# -- under mpiexec -n 2 -----------------------------------------------------------------------

TWO_RANK_STEPS = textwrap.dedent("""
    import sys, numpy as np
    from numpy_transformer.translator.distributed import Communicator
    from numpy_transformer.translator.config import TrainConfig
    from numpy_transformer.translator.training import Trainer
    comm = Communicator.from_environment()
    config, model = {config}, {model}
    trainer = Trainer.create(TrainConfig(**config, steps=20, threads=int(sys.argv[2])),
                             {{**model, "dropout": 0.0, "dtype": "float64"}}, comm=comm)
    losses = [trainer.train_step()["loss"] for _ in range(20)]
    if comm.rank == 0:
        np.savez(sys.argv[1], losses=np.array(losses), **trainer.model.state_dict())
""")


@pytest.mark.slow
@needs_mpi
@pytest.mark.parametrize("threads", [0, 2])  # 2: each rank splits its rows into two shards on threads
def test_two_ranks_equal_one_process_on_the_same_global_batches(tmp_path, threads):
    """float64, no dropout: only the order of summation may differ."""
    script = TWO_RANK_STEPS.format(config=CONFIG, model=MODEL)
    run = mpiexec(2, sys.executable, "-c", script, str(tmp_path / "ranks.npz"), str(threads))
    assert run.returncode == 0, run.stderr
    one = Trainer.create(TrainConfig(**CONFIG, steps=20), {**MODEL, "dropout": 0.0, "dtype": "float64"})
    losses = [one.train_step()["loss"] for _ in range(20)]
    ranks = np.load(tmp_path / "ranks.npz")
    np.testing.assert_allclose(ranks["losses"], losses, rtol=1e-9)
    for name, parameter in one.model.named_parameters():
        error = np.abs(ranks[name] - parameter.data).max() / np.abs(parameter.data).max()
        assert error <= 1e-9, f"{name}: relative error {error:.2e}"
    assert losses[-1] < losses[0]


def cli_train(ranks, out, steps, *extra, program=("-m", "numpy_transformer"), timeout=300):
    arguments = [
        "train",
        "--task",
        "copy",
        "--d-model",
        "16",
        "--layers",
        "1",
        "--heads",
        "2",
        "--d-ff",
        "32",
        "--batch-size",
        "12",
        "--schedule",
        "constant",
        "--log-every",
        "5",
        "--eval-every",
        "10",
        "--eval-size",
        "20",
        "--steps",
        str(steps),
        "--no-progress",
        "--show",
        "0",
        "--out",
        str(out),
        *extra,
    ]
    return mpiexec(ranks, sys.executable, *program, *arguments, timeout=timeout)


@pytest.mark.slow
@needs_mpi
def test_the_command_under_mpiexec_resumes_bit_identically_and_keeps_its_rank_count(tmp_path):
    """A constant learning rate, so that 10 steps then --resume to 20 is the same run as 20 at once."""
    straight = cli_train(2, tmp_path / "straight", 20)
    assert straight.returncode == 0, straight.stderr
    assert straight.stdout.count("on 2 MPI ranks") == 1  # rank 0 alone speaks
    first = cli_train(2, tmp_path / "resumed", 10)
    assert first.returncode == 0, first.stderr
    second = cli_train(2, tmp_path / "resumed", 20, "--resume")
    assert second.returncode == 0, second.stderr
    a, meta = load_checkpoint(tmp_path / "straight")
    b, _ = load_checkpoint(tmp_path / "resumed")
    assert meta["ranks"] == 2 and meta["step"] == 20 and meta["model"]["dropout"] > 0
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    log = [json.loads(line) for line in (tmp_path / "straight" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "split" not in r] == [5, 10, 15, 20]  # one writer
    refused = cli_train(3, tmp_path / "resumed", 30, "--resume")
    assert refused.returncode != 0
    assert "was trained on 2 rank(s) and this run has 3: resume it with mpiexec -n 2" in refused.stderr
    with pytest.raises(ValueError, match="trained on 2 rank"):
        Trainer.resume(tmp_path / "resumed", steps=30)


@pytest.mark.slow
@needs_mpi
def test_under_mpiexec_rank_0_averages_the_last_checkpoints_at_the_end(tmp_path):
    run = cli_train(2, tmp_path / "run", 30)  # evaluations at 10, 20, 30: 20 and 30 are averaged
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("average of steps 20, 30 dev") == 1 and run.stdout.count("best.npz ") == 1
    meta = load_checkpoint(tmp_path / "run" / "best.npz")[1]
    assert meta["best"]["average"]["steps"] == [20, 30] and not list((tmp_path / "run").glob("step-*.npz"))


PLATEAU_ON_TWO_RANKS = textwrap.dedent("""
    import sys, numpy as np
    from numpy_transformer.translator.training import trainer as trainer_module
    from numpy_transformer.translator.distributed import Communicator, weights_checksum
    from numpy_transformer.translator.config import TrainConfig
    from numpy_transformer.translator.training import Trainer
    scores = iter([5.0, 4.0, 3.0, 3.0, 3.0])  # rank 0 alone evaluates, at steps 2, 4, ..., 10
    def evaluate(model, task, pairs, label_smoothing=0.0, batch_size=100, examples=0):
        return {{"loss": 1.0, "token_accuracy": 0.5, "exact_match": 0.0, "chrf": 0.0, "n": 2,
                 "bleu": next(scores)}}
    trainer_module.evaluate = evaluate
    comm = Communicator.from_environment()
    config = {{**{config}, "eval_every": 2, "average_last": 0, "plateau_cut": 0.5, "plateau_patience": 1}}
    trainer = Trainer.create(TrainConfig(**config, steps=10), {model}, comm=comm)
    trainer.fit(None, progress=False)
    weights = weights_checksum(trainer.model.parameters())
    np.save(sys.argv[1] + f"-{{comm.rank}}.npy", [trainer.evaluations.lr_scale, weights])
""")


@pytest.mark.slow
@needs_mpi
def test_under_mpiexec_every_rank_takes_rank_0s_plateau_cut(tmp_path):
    script = PLATEAU_ON_TWO_RANKS.format(config=CONFIG, model=MODEL)
    run = mpiexec(2, sys.executable, "-c", script, str(tmp_path / "rank"))
    assert run.returncode == 0, run.stderr
    # cuts after steps 4, 6 and 8 (none at 10, where the cosine is at its end), said by rank 0
    assert run.stdout.count("the learning rate is cut") == 3
    rank_0, rank_1 = np.load(tmp_path / "rank-0.npy"), np.load(tmp_path / "rank-1.npy")
    assert rank_0[0] == 0.125 and rank_0.tolist() == rank_1.tolist()


# -- under mpiexec: a refusal or failure on any rank stops every rank, said once ----------------------

PROMPTLY = 60  # seconds: each run below takes a few; ranks left waiting for each other would take for ever

FAILING_RANK = (
    Path(__file__).parents[1] / "support" / "mpi_failing_rank.py"
)  # the command, with one rank made to fail


def failing_train(rank, failure, out, steps, *extra):
    program = (str(FAILING_RANK), str(rank), failure)
    return cli_train(2, out, steps, *extra, program=program, timeout=PROMPTLY)


def logged_steps(out):
    records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    return [record["step"] for record in records if "split" not in record]


@needs_mpi
def test_a_locked_run_directory_stops_every_rank_with_one_line(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / ".lock").write_text(f"{os.getpid()}\n")  # a live run (this test) holds it
    run = cli_train(2, out, 20, timeout=PROMPTLY)
    assert run.returncode == 2, run.stderr
    [line] = run.stderr.strip().splitlines()
    assert f"--out {out} is locked by process {os.getpid()}" in line  # pytest, no training run
    assert run.stdout == "" and sorted(p.name for p in out.iterdir()) == [".lock"]  # no rank trained


@needs_mpi
def test_a_refused_argument_is_said_once_under_mpiexec(tmp_path):
    run = cli_train(2, tmp_path / "run", 0, timeout=PROMPTLY)
    assert run.returncode == 2
    [line] = run.stderr.strip().splitlines()
    assert "argument --steps: expected a positive integer, got 0" in line


@needs_mpi
@pytest.mark.parametrize(
    "eval_every, steps_logged",
    [("10", [5, 10]), ("20", [5, 10, 15, 20])],  # told by the next step's all-reduce; after the loop
)
def test_a_failed_save_on_rank_0_stops_every_rank_with_one_line(tmp_path, eval_every, steps_logged):
    out = tmp_path / "run"
    run = failing_train(0, "disk full", out, 20, "--eval-every", eval_every)
    assert run.returncode == 1, run.stderr
    [line] = run.stderr.strip().splitlines()
    first = out / f"step-{int(eval_every):07d}.npz"  # an evaluation's first save, kept for averaging
    assert line == f"numpy-transformer train: error: [Errno 28] No space left on device: '{first}'"
    assert logged_steps(out) == steps_logged and not (out / "model.npz").exists()


@needs_mpi
@pytest.mark.parametrize(
    "failure, code, said",
    [
        ("unreadable data", 2, "rank 1: --data corpus.tsv cannot be read on this host"),
        ("out of memory", 1, "rank 1: Unable to allocate 4.00 GiB for an array"),
    ],
)
def test_a_failure_on_rank_1_alone_stops_every_rank_with_one_line(tmp_path, failure, code, said):
    run = failing_train(1, failure, tmp_path / "run", 20)
    assert run.returncode == code, run.stderr
    [line] = run.stderr.strip().splitlines()
    assert line == f"numpy-transformer train: error: {said}"
    assert run.stdout.count("training mha model") == (failure == "out of memory")


@needs_mpi
def test_a_rank_out_of_step_with_the_others_ends_them_all(tmp_path):
    """A second Ctrl-C on one rank stops it at once, whatever collective call the others wait in."""
    started = time.perf_counter()
    run = failing_train(1, "second ctrl-c", tmp_path / "run", 20)
    assert run.returncode == 130, run.stderr
    assert "interrupted again: rank 1: stopped at once without saving this step" in run.stderr
    assert time.perf_counter() - started < PROMPTLY
