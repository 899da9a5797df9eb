"""Writing an export into a directory (huggingface.directory.write_export): the new export is written
whole beside ``--to``, then swapped in, so that ``--to`` holds the earlier export or the new one,
each whole, however the export ends: Ctrl-C or SIGTERM at each step (a step made to raise, and a
real signal sent at that step, in this process and in a child process), a failure, or a kill that
no clean-up survives (SIGKILL), which the next export puts right. Also: a name as long as the file
system takes, missing parents made (and only those removed on failure)."""

import os
import signal
import subprocess
import sys
import textwrap
import warnings

import pytest

from numpy_transformer.files import SaveError
from numpy_transformer.translator.huggingface import directory
from numpy_transformer.translator.huggingface.directory import (
    ExportError,
    ExportInterrupted,
    check_destination,
    export_siblings,
    write_export,
)

NAMES = ("config.json", "model.bin", "target/tokenizer.json")  # the files the two fake exports write
OLD = {"config.json": "old config", "model.bin": "old weights", "target/tokenizer.json": "old target"}
NEW = {"config.json": "new config", "model.bin": "new weights"}  # one vocabulary: no target/


def contents(folder):
    return {
        str(path.relative_to(folder)): path.read_text()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def writer(files, then=None):
    """A write of ``files`` into the staging folder; ``then(name)`` called after each file."""

    def write(staging):
        for name, text in files.items():
            (staging / name).parent.mkdir(exist_ok=True)
            (staging / name).write_text(text)
            if then is not None:
                then(name)

    return write


@pytest.fixture
def earlier(tmp_path):
    """``tmp_path/out``: an earlier export, and a file of the user's beside it."""
    out = tmp_path / "out"
    write_export(out, writer(OLD), NAMES)
    (out / "notes.txt").write_text("mine")
    return out


def assert_whole(out, files):
    """``out`` holds the export ``files`` and the user's notes, and nothing is left beside it."""
    assert contents(out) == {**files, "notes.txt": "mine"}
    assert sorted(path.name for path in out.parent.iterdir()) == ["out"]


def test_an_overwrite_swaps_in_the_new_export_and_keeps_the_users_files(earlier):
    inode = (earlier / "notes.txt").stat().st_ino
    written = write_export(earlier, writer(NEW), NAMES)
    assert sorted(path.relative_to(earlier).as_posix() for path in written) == ["config.json", "model.bin"]
    assert_whole(earlier, NEW)
    assert (earlier / "notes.txt").stat().st_ino == inode  # the same file, linked, not copied
    assert not (earlier / "target").exists()  # the earlier export's folder, emptied of its files, is gone


def raising_at(monkeypatch, module, name, call, error=KeyboardInterrupt):
    """``module.name`` raising ``error`` at its ``call``-th call (from 1), as it is otherwise."""
    real, calls = getattr(module, name), []

    def patched(*args, **kwargs):
        calls.append(args)
        if len(calls) == call:
            raise error()
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, patched)


@pytest.mark.parametrize(
    "step",
    [
        "writing the first file",
        "carrying the user's files",
        "renaming the earlier aside",
        "renaming the new in",
    ],
)
def test_ctrl_c_at_each_step_before_the_swap_leaves_the_earlier_export_whole(earlier, monkeypatch, step):
    write = writer(NEW)
    if step == "writing the first file":
        write = writer(NEW, then=lambda name: (_ for _ in ()).throw(KeyboardInterrupt()))
    elif step == "carrying the user's files":
        raising_at(monkeypatch, directory, "link_or_copy", 1)
    else:
        raising_at(monkeypatch, directory.os, "rename", 1 if step == "renaming the earlier aside" else 2)
    with pytest.raises(
        ExportInterrupted, match=r"^interrupted \(Ctrl-C\): nothing of the export was written; "
    ):
        write_export(earlier, write, NAMES)
    assert_whole(earlier, OLD)


def test_a_failure_before_the_swap_names_the_file_and_leaves_the_earlier_export(earlier, monkeypatch):
    def full(staging):
        raise OSError(28, "No space left on device", str(staging / "model.bin"))

    with pytest.raises(SaveError, match=r"could not write .*/out/model.bin: \[Errno 28\] No space left on device; "
                       r"nothing of the export was written$"):  # fmt: skip
        write_export(earlier, full, NAMES)
    assert_whole(earlier, OLD)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_writing_ends_the_export_and_leaves_the_earlier_one(earlier, signum):
    write = writer(NEW, then=lambda name: os.kill(os.getpid(), signum))
    with pytest.raises(ExportInterrupted) as interrupted:
        write_export(earlier, write, NAMES)
    assert interrupted.value.signum == signum
    assert "nothing of the export was written" in str(interrupted.value)
    assert_whole(earlier, OLD)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handlers are put back


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_the_swap_waits_until_the_new_export_is_whole(earlier, monkeypatch, signum):
    real = os.rename

    def rename(*args):
        os.kill(os.getpid(), signum)  # between the swap's two renames
        real(*args)

    monkeypatch.setattr(directory.os, "rename", rename)
    with pytest.raises(ExportInterrupted, match="once the export was whole in"):
        write_export(earlier, writer(NEW), NAMES)
    assert_whole(earlier, NEW)


KILLED = """
import os, signal, sys
from pathlib import Path
from numpy_transformer.translator.huggingface import directory
out, at = Path(sys.argv[1]), sys.argv[2]
real = os.rename
def rename(*args):
    if at == "swap" and Path(args[0]) == out:  # the earlier export renamed aside: killed before the new is in
        real(*args)
        os.kill(os.getpid(), signal.SIGKILL)
    real(*args)
directory.os.rename = rename
def write(staging):
    (staging / "config.json").write_text("new config")
    if at in ("SIGTERM", "SIGKILL"):
        os.kill(os.getpid(), getattr(signal, at))
    (staging / "model.bin").write_text("new weights")
try:
    directory.write_export(out, write, ("config.json", "model.bin", "target/tokenizer.json"))
except directory.ExportInterrupted as interrupted:  # as the command line says it
    sys.exit(f"{interrupted}: {128 + interrupted.signum}")
"""


def killed(out, at):
    """A child process exporting into ``out``, ended by ``at`` (SIGTERM or SIGKILL while writing, or
    SIGKILL between the swap's renames): its exit status and standard error."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(KILLED), str(out), at],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, done.stderr


def test_sigterm_in_a_child_process_leaves_the_earlier_export_whole_and_no_staging(earlier):
    code, err = killed(earlier, "SIGTERM")
    assert code == 1 and err.startswith("ended (SIGTERM): nothing of the export was written")
    assert err.strip().endswith(": 143")
    assert_whole(earlier, OLD)


@pytest.mark.parametrize("at", ["SIGKILL", "swap"])
def test_what_a_killed_export_left_is_put_right_by_the_next_one(earlier, at):
    code, _ = killed(earlier, at)
    assert code == -signal.SIGKILL
    left = [path.name for path in earlier.parent.iterdir()]
    assert len(left) == 2 and (at == "swap") == ("out" not in left)  # between the renames: no out
    assert any(name.startswith(".out.") for name in left)  # litter beside it
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        check_destination(earlier, overwrite=True)
    messages = " ".join(str(warning.message) for warning in said)
    assert ("is put back" if at == "swap" else "left beside it by an export that was killed") in messages
    assert_whole(earlier, OLD)  # the earlier export, whole, and nothing beside it
    write_export(earlier, writer(NEW), NAMES)
    assert_whole(earlier, NEW)


def test_an_export_still_running_into_the_directory_is_refused(earlier):
    staging, _ = export_siblings(earlier)

    def write(folder):
        with pytest.raises(ExportError, match=r"another export into it is running"):
            check_destination(earlier, overwrite=True)

    write_export(earlier, write, NAMES)  # while this one writes, the second is refused
    assert not staging.exists()


def test_a_name_as_long_as_the_file_system_takes(tmp_path):
    out = tmp_path / ("é" * 127 + "x")  # 255 bytes
    assert all(len(os.fsencode(folder.name)) <= 255 for folder in export_siblings(out))
    assert export_siblings(out) != export_siblings(tmp_path / ("é" * 127 + "y"))  # told apart
    write_export(out, writer(NEW), NAMES)
    assert contents(out) == NEW


def test_missing_parents_are_made_and_only_they_removed_on_failure(tmp_path):
    out = tmp_path / "a" / "b" / "out"
    check_destination(out, overwrite=False)  # makes nothing
    assert list(tmp_path.iterdir()) == []

    def full(staging):
        raise OSError(28, "No space left on device", str(staging / "model.bin"))

    with pytest.raises(
        SaveError, match=r"nothing of the export was written \(the folders made for it are removed"
    ):
        write_export(out, full, NAMES)
    assert list(tmp_path.iterdir()) == []
    write_export(out, writer(NEW), NAMES)
    assert contents(out) == NEW
    (tmp_path / "file").write_text("")
    with pytest.raises(ExportError, match=r"file is not a directory \(expected a folder to make it in\)"):
        check_destination(tmp_path / "file" / "c" / "out", overwrite=False)


def test_an_export_into_a_run_or_of_an_export_is_refused_before_any_work(tmp_path, capsys):
    """export RUN --to RUN (--overwrite or not) would put an export's files among the run's; a run
    directory as --to is refused, never with --overwrite suggested. A Hugging Face export given as
    RUN is said to be one, with the import that reads it as a run. A --to named as a .npz file is
    refused as train --out refuses it."""
    from numpy_transformer.translator.cli import main

    run = tmp_path / "run"
    sizes = ["--d-model", "16", "--layers", "1", "--heads", "2", "--d-ff", "16", "--batch-size", "8"]
    quiet = ["--steps", "2", "--eval-every", "2", "--eval-size", "4", "--no-progress", "--show", "0"]
    assert main(["train", "--task", "copy", *sizes, *quiet, "--out", str(run)]) == 0
    before = contents_bytes(run)
    capsys.readouterr()
    for given, flags in (
        (run, ["--overwrite"]),
        (run / "model.npz", []),
        (run, ["--ctranslate2", "--overwrite"]),
    ):
        assert main(["export", str(given), "--to", str(run), "--no-tokenizer", *flags]) == 2
        error = capsys.readouterr().err
        assert f"--to {run}: is RUN itself, a training run (model.npz" in error
        assert "--overwrite" not in error and error.count("\n") == 1
    assert contents_bytes(run) == before
    other = tmp_path / "other"
    other.mkdir()
    (other / "log.jsonl").write_text("")
    assert main(["export", str(run), "--to", str(other), "--overwrite", "--no-tokenizer"]) == 2
    assert f"--to {other}: holds a training run (log.jsonl)" in capsys.readouterr().err
    hf = tmp_path / "hf"
    assert main(["export", str(run), "--to", str(hf), "--no-tokenizer"]) == 0
    capsys.readouterr()
    assert main(["export", str(hf), "--to", str(tmp_path / "again"), "--no-tokenizer"]) == 2
    error = capsys.readouterr().err
    assert f"RUN {hf}: a Hugging Face export (config.json, model.safetensors), not a run: import it" in error
    assert f"numpy-transformer import {hf} --out NEW_RUN" in error
    assert not (tmp_path / "again").exists()
    for flags in ([], ["--overwrite"]):  # a checkpoint's name, as train --out refuses it
        assert main(["export", str(run), "--to", str(tmp_path / "x.npz"), "--no-tokenizer", *flags]) == 2
        error = capsys.readouterr().err
        assert error.endswith(
            "--to names the export's directory (it will hold config.json and the model's weights), not a "
            f"file: got {tmp_path / 'x.npz'}\n"
        )
        assert error.count("\n") == 1
    assert not (tmp_path / "x.npz").exists()


def contents_bytes(folder):
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }
