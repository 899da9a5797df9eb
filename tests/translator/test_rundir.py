"""train --out: refused before any work when it would lose a saved run or cannot be written; locked while in use."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from numpy_transformer.translator.cli import main
from numpy_transformer.translator.run.directory import RunDirectory, RunLock, check_run_directory

TINY = [
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
    "8",
    "--steps",
    "4",
    "--eval-every",
    "4",
    "--eval-size",
    "5",
    "--log-every",
    "2",
    "--no-progress",
    "--show",
    "0",
]


def train(out, *extra):
    return main(["train", *TINY, "--out", str(out), *extra])


def test_a_saved_run_is_never_trained_over_without_being_asked(tmp_path, capsys):
    out = tmp_path / "run"
    assert train(out) == 0
    saved = (out / "model.npz").read_bytes()
    assert train(out) == 2
    error = capsys.readouterr().err
    assert (
        f"--out {out} already holds a training run" in error
        and "--resume" in error
        and "--overwrite" in error
    )
    assert (out / "model.npz").read_bytes() == saved  # untouched
    written = (out / "model.npz").stat().st_mtime_ns
    assert train(out, "--overwrite") == 0
    assert (out / "model.npz").stat().st_mtime_ns != written  # written anew (the same seed: the same bytes)
    log_steps = [line for line in (out / "log.jsonl").read_text().splitlines() if '"split"' not in line]
    assert len(log_steps) == 2  # the old run's log went with it: no interleaving
    assert train(out, "--overwrite", "--resume") == 2
    assert "give one of them" in capsys.readouterr().err


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda tmp: tmp / "model.npz", "not a file"),
        (lambda tmp: (tmp / "afile").write_text("x") and tmp / "afile", "exists and is not a directory"),
        (
            lambda tmp: (tmp / "afile").write_text("x") and tmp / "afile" / "run",
            "is not a writable directory",
        ),
        (lambda tmp: "/proc/self/run", "is under /proc"),
        (lambda tmp: "/dev/null", "is under /dev"),
    ],
)
def test_unusable_out_paths_are_refused_before_any_work(tmp_path, capsys, make, message):
    out = make(tmp_path)
    assert train(out) == 2
    error = capsys.readouterr().err.strip()
    assert message in error and error.count("\n") == 0 and "Traceback" not in error
    assert not (tmp_path / "model.npz").is_dir()  # nothing was created in its name


def started(process: subprocess.Popen, word: str) -> subprocess.Popen:
    """``process`` once its command line holds ``word``: until it has exec'd, /proc shows the
    command line of this process, which forked it (a lock check then read pytest's)."""
    deadline = time.monotonic() + 30
    while word.encode() not in Path(f"/proc/{process.pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline, f"process {process.pid} never showed {word!r}"
        time.sleep(0.01)
    return process


def test_a_second_run_into_a_locked_directory_is_refused_by_name(tmp_path):
    out = tmp_path / "run"
    holder = started(
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "numpy-transformer", "train"]),
        "numpy-transformer",
    )
    try:
        out.mkdir()
        (out / ".lock").write_text(f"{holder.pid}\n")
        with pytest.raises(ValueError, match=f"in use by another training run \\(process {holder.pid}"):
            RunLock(out).__enter__()
    finally:
        holder.kill()
        holder.wait()
    with RunLock(out):  # the owner is gone: its lock is taken over
        assert (out / ".lock").read_text().strip() == str(os.getpid())
    assert not (out / ".lock").exists()


def test_a_lock_held_by_a_live_process_that_is_no_run_may_be_stale_and_says_how_to_tell(tmp_path):
    out = tmp_path / "run"
    other = started(
        subprocess.Popen(["sleep", "60"]), "sleep"
    )  # a killed run's id, reused by another program
    try:
        out.mkdir()
        (out / ".lock").write_text(f"{other.pid}\n")
        with pytest.raises(ValueError) as refused:
            RunLock(out).__enter__()
    finally:
        other.kill()
        other.wait()
    message = str(refused.value)
    assert f"is locked by process {other.pid} ({out / '.lock'}), which runs `sleep 60`" in message
    assert "may be stale" in message and f"ps -p {other.pid} -o args=" in message
    assert f"remove {out / '.lock'}" in message


def test_two_command_line_runs_into_one_directory(tmp_path):
    """The second of two concurrent runs stops at once, naming the first; the first finishes its run."""
    out = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "numpy_transformer",
        "train",
        *TINY,
        "--steps",
        "1000",  # long enough that the first is still training when the second has started
        "--eval-every",
        "1000",
        "--out",
        str(out),
    ]
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(300):
            if (out / ".lock").exists():
                break
            __import__("time").sleep(0.05)
        second = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert second.returncode == 2
        assert f"in use by another training run (process {first.pid}" in second.stderr
    finally:
        assert first.wait(timeout=300) == 0, first.stderr.read()
    assert (out / "model.npz").exists() and not (out / ".lock").exists()


def test_check_run_directory_accepts_new_and_resumable_directories(tmp_path):
    assert check_run_directory(tmp_path / "new" / "deeper", False, False) == tmp_path / "new" / "deeper"
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "model.npz").write_bytes(b"")
    assert check_run_directory(tmp_path / "old", True, False) == tmp_path / "old"


def test_overwrite_removes_only_the_files_a_run_writes(tmp_path):
    out = tmp_path / "run"
    assert train(out) == 0
    mine = {
        "step-0000005-mynote.npz": b"my own notes",
        "step-12.npz": b"mine too",
        "notes.txt": b"a user's file",
    }
    for name, data in mine.items():
        (out / name).write_bytes(data)
    assert train(out, "--overwrite") == 0
    for name, data in mine.items():
        assert (out / name).read_bytes() == data, name


@pytest.mark.parametrize("from_name", ["run", "run/model.npz"])
def test_train_from_a_run_into_itself_is_refused_even_with_overwrite(tmp_path, capsys, from_name):
    out = tmp_path / "run"
    assert train(out) == 0
    saved = (out / "model.npz").read_bytes()
    data = tmp_path / "pairs.tsv"
    data.write_text("".join(f"abc {i}\tcba {i}\n" for i in range(40)))
    argv = [
        "train",
        "--from",
        str(tmp_path / from_name),
        "--data",
        str(data),
        "--out",
        str(out),
        "--overwrite",
    ]
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert f"--out {out} is the run --from" in error and "Traceback" not in error
    assert (out / "model.npz").read_bytes() == saved


def test_a_checkpoints_kept_names_never_reach_outside_the_run(tmp_path):
    """The names of kept evaluation checkpoints come back from model.npz's metadata: a tampered one
    naming another file (a path, or a name the run never writes) is not removed by the rotation."""
    from numpy_transformer.translator.run.checkpoint import load_checkpoint, save_checkpoint

    out = tmp_path / "run"
    assert train(out, "--keep-checkpoints", "1") == 0
    victims = [tmp_path / "victim.txt", out / "notes.npz"]
    for victim in victims:
        victim.write_text("keep me")
    arrays, meta = load_checkpoint(out / "model.npz")
    meta["kept"] = [str(victims[0]), "../victim.txt", "notes.npz", *meta["kept"]]
    save_checkpoint(out / "model.npz", arrays, {k: v for k, v in meta.items() if k != "format"})
    assert train(out, "--resume", "--steps", "12", "--keep-checkpoints", "1") == 0
    assert all(victim.read_text() == "keep me" for victim in victims)


def test_an_empty_out_is_refused_never_taken_for_the_working_directory(tmp_path, monkeypatch, capsys):
    from numpy_transformer.translator.run.directory import check_average_out

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as refused:  # by the parser, as any argument it refuses
        train("")
    assert refused.value.code == 2 and "--out is empty: expected a path" in capsys.readouterr().err
    for check in (
        lambda: check_run_directory("", False, False),
        lambda: check_average_out("", ["run"], False),
    ):
        with pytest.raises(ValueError, match="^--out is empty: expected a path"):
            check()
    assert list(tmp_path.iterdir()) == []  # nothing written where the command ran


def test_a_lock_that_is_a_directory_is_named_with_what_to_do(tmp_path, capsys):
    out = tmp_path / "run"
    (out / ".lock").mkdir(parents=True)
    assert train(out) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "Errno" not in error
    assert f"its lock {out / '.lock'} is a directory" in error and f"rm -r {out / '.lock'}" in error
    with pytest.raises(ValueError, match="is a directory, not the lock file a run writes"):
        RunLock(out).__enter__()  # a run of the library meets the same
    assert sorted(path.name for path in out.iterdir()) == [".lock"]


def test_train_saves_where_translate_evaluate_and_plot_read_whatever_the_task(capsys):
    from numpy_transformer.translator.cli import build_parser

    parse = build_parser().parse_args
    written = {parse(["train", *given]).out for given in ([], ["--task", "copy"], ["--data", "pairs.tsv"])}
    read = {
        parse(["translate", "a"]).checkpoint,
        parse(["evaluate"]).checkpoint,
        parse(["plot", "attention", "a"]).checkpoint,
        parse(["plot", "curves"]).run,
    }
    assert written == read == {"runs/numbers-en-fr"}
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "evaluate and plot read by default" in " ".join(capsys.readouterr().out.split())


def test_a_run_directory_is_claimed_by_one_owner_and_left_as_found_when_nothing_was_written(tmp_path):
    out = tmp_path / "new" / "deeper"
    with RunDirectory(out, resume=False, overwrite=False) as directory:
        assert directory.path == out and (out / ".lock").read_text().strip() == str(os.getpid())
    assert not (tmp_path / "new").exists()  # the claim made both: the release removes both
    with RunDirectory(out, resume=False, overwrite=False):
        (out / "log.jsonl").write_text('{"step": 1}\n')
    assert sorted(path.name for path in out.iterdir()) == ["log.jsonl"]  # the lock goes, the run stays


def test_a_run_directory_is_cleared_only_by_the_process_that_writes_it(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "log.jsonl").write_text('{"step": 1}\n')
    (out / "notes.txt").write_text("the user's")
    RunDirectory(out, resume=False, overwrite=True, writes=False).clear()  # another MPI rank: it only checks
    assert (out / "log.jsonl").exists()
    with RunDirectory(out, resume=False, overwrite=True) as directory:
        directory.clear()
    assert sorted(path.name for path in out.iterdir()) == ["notes.txt"]


def test_a_run_directory_is_never_cleared_without_overwrite_or_outside_its_claim(tmp_path):
    """clear() removes a run only for a claim made with overwrite, and only while it holds the lock:
    a resumed run is continued, never removed, and an unlocked directory may be another run's."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "log.jsonl").write_text('{"step": 1}\n')
    (out / "model.npz").write_bytes(b"the run's checkpoint")
    with (
        RunDirectory(out, resume=True, overwrite=False) as directory,
        pytest.raises(ValueError, match="overwrite=False, so the run in it is kept"),
    ):
        directory.clear()
    with pytest.raises(RuntimeError, match="outside `with RunDirectory"):
        RunDirectory(out, resume=False, overwrite=True).clear()
    assert sorted(path.name for path in out.iterdir()) == ["log.jsonl", "model.npz"]


def test_a_second_claim_in_one_process_is_refused_as_such_not_as_a_stale_lock(tmp_path):
    out = tmp_path / "new"
    with (
        RunDirectory(out, resume=False, overwrite=False),
        pytest.raises(ValueError, match=rf"--out {out} is claimed already by this process \({os.getpid()}, "),
    ):
        RunDirectory(out, resume=False, overwrite=False).__enter__()
    assert not out.exists()


def test_a_claim_refused_by_the_lock_leaves_nothing_it_made(tmp_path, monkeypatch):
    out = tmp_path / "new" / "run"
    directory = RunDirectory(out, resume=False, overwrite=False)

    def taken_meanwhile(lock: RunLock) -> RunLock:  # by another run, between the check and the claim
        lock.directory.mkdir(parents=True, exist_ok=True)
        raise RunLock.in_use(lock.directory, os.getppid())

    monkeypatch.setattr(RunLock, "__enter__", taken_meanwhile)
    with pytest.raises(ValueError, match=f"--out {out} "):
        directory.__enter__()
    assert not (tmp_path / "new").exists()


def torn(path):
    """``path`` cut to its first 3000 bytes, as a copy cut short leaves it."""
    path.write_bytes(path.read_bytes()[:3000])


def resume(out, *extra):
    return main(["train", "--resume", "--out", str(out), "--no-progress", "--show", "0", *extra])


def test_a_torn_checkpoint_the_resumed_run_keeps_is_refused_before_any_step(tmp_path, capsys):
    """An evaluation checkpoint the run keeps (to average at its end) or its best.npz, torn: found
    when --resume starts (exit 2, naming it and what to do), never after training; once removed,
    the run goes on without it."""
    out = tmp_path / "run"
    assert train(out, "--eval-every", "2", "--keep-checkpoints", "3") == 0
    for name in ("step-0000004.npz", "best.npz"):
        whole = (out / name).read_bytes()
        torn(out / name)
        saved = {path.name: path.read_bytes() for path in out.iterdir()}
        capsys.readouterr()
        assert resume(out, "--steps", "6") == 2
        error = capsys.readouterr().err
        assert f"--resume: checkpoint {out / name}: corrupt or truncated" in error
        assert "remove it, and the run goes on without it, or put a whole copy back" in error
        assert {path.name: path.read_bytes() for path in out.iterdir()} == saved  # nothing trained
        (out / name).write_bytes(whole)
    torn(out / "step-0000004.npz")
    (out / "step-0000004.npz").unlink()
    assert resume(out, "--steps", "6") == 0
    assert (out / "step-0000006.npz").is_file()


def test_resume_compares_the_steps_the_checkpoints_hold_not_their_names(tmp_path, capsys):
    """A user's copy of model.npz (step 4) named step-0000009.npz is not newer than model.npz: the
    run resumes from model.npz, without a warning; a model.npz that holds an older step than the
    newest evaluation checkpoint is said to, with both steps, and that checkpoint is resumed."""
    out = tmp_path / "run"
    assert train(out, "--eval-every", "2", "--keep-checkpoints", "2") == 0
    (out / "step-0000009.npz").write_bytes((out / "model.npz").read_bytes())
    capsys.readouterr()
    assert resume(out, "--steps", "6") == 0
    said = capsys.readouterr()
    assert "--resume:" not in said.err
    assert f"resuming {out / 'model.npz'} at step 4" in said.out
    (out / "step-0000009.npz").unlink()
    (out / "model.npz").write_bytes((out / "step-0000004.npz").read_bytes())
    assert resume(out, "--steps", "8") == 0
    said = capsys.readouterr()
    assert (
        f"--resume: {out / 'model.npz'} holds step 4, older than the step 6 that step-0000006.npz holds: "
        f"resuming from {out / 'step-0000006.npz'}, the run's newest complete checkpoint" in said.err
    )
    assert "save failed" not in said.err
    assert f"resuming {out / 'step-0000006.npz'} at step 6" in said.out


def test_a_torn_model_npz_falls_back_to_the_newest_whole_checkpoint_as_a_missing_one_does(tmp_path, capsys):
    out = tmp_path / "run"
    assert train(out, "--eval-every", "2", "--keep-checkpoints", "2") == 0
    torn(out / "model.npz")
    capsys.readouterr()
    assert resume(out, "--steps", "6") == 0
    said = capsys.readouterr()
    assert (
        f"--resume: {out / 'model.npz'}: corrupt or truncated (BadZipFile: File is not a zip file): resuming "
        f"from {out / 'step-0000004.npz'}, the run's newest complete checkpoint" in said.err
    )
    assert f"resuming {out / 'step-0000004.npz'} at step 4" in said.out
    (out / "model.npz").unlink()
    assert resume(out, "--steps", "8") == 0
    assert f"--resume: {out / 'model.npz'}: no such file: resuming from {out / 'step-0000006.npz'}" in (
        capsys.readouterr().err
    )
    (out / "model.npz").unlink()
    torn(out / "step-0000008.npz")  # the one it would fall back to: named, never said to be resumed from
    assert resume(out, "--steps", "10") == 2
    error = capsys.readouterr().err
    assert (
        f"--resume: {out / 'model.npz'}: no such file, and its newest evaluation checkpoint "
        f"{out / 'step-0000008.npz'}: corrupt or truncated" in error
    )
    assert "resuming from" not in error


def test_a_resumed_run_never_writes_over_a_step_file_it_did_not_record(tmp_path, capsys):
    """A file named as an evaluation checkpoint of a step the resumed run will reach, which its
    checkpoint does not record (the user's own copy), is refused by name before any step and stays
    as it was; a run that keeps no evaluation checkpoints, or ends before that step, goes on."""
    out = tmp_path / "run"
    assert train(out, "--eval-every", "2", "--keep-checkpoints", "2") == 0
    mine = out / "step-0000006.npz"
    mine.write_bytes(b"the user's own file")
    saved = {path.name: path.read_bytes() for path in out.iterdir()}
    capsys.readouterr()
    assert resume(out, "--steps", "8") == 2
    error = capsys.readouterr().err
    assert f"--resume: {mine} is not among the evaluation checkpoints the run recorded at step 4" in error
    assert "move or rename it first" in error
    assert {path.name: path.read_bytes() for path in out.iterdir()} == saved  # nothing trained
    assert resume(out, "--steps", "5") == 0  # ends before step 6
    assert mine.read_bytes() == b"the user's own file"
    keeps_none = tmp_path / "keeps-none"
    assert train(keeps_none, "--eval-every", "2", "--keep-checkpoints", "0", "--average-last", "0") == 0
    (keeps_none / mine.name).write_bytes(b"the user's own file")
    assert resume(keeps_none, "--steps", "8") == 0
    assert (keeps_none / mine.name).read_bytes() == b"the user's own file"
