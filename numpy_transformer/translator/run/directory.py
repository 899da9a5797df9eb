"""The run directory of ``train --out``: claimed by one owner (RunDirectory: checked before any
work, made and locked while a run writes to it, cleared of the run it replaces, released at the
end), and the files a run writes there (RunFiles).

A run directory holds ``model.npz`` (the last checkpoint), ``best.npz`` (the best by dev BLEU),
``log.jsonl``, ``config.toml`` (the resolved configuration) and ``step-*.npz``, the last evaluation
checkpoints (``--average-last`` of them while the run goes, ``--keep-checkpoints`` after it).
Training into one that already holds a run
would overwrite its model at the first evaluation, and two processes training into one directory
would overwrite each other's, so both are refused unless the user says what they mean
(``--resume`` or ``--overwrite``), and a lock file names the process that writes there.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from ...files import SaveError, refuse_empty, write_text_atomically
from .checkpoint import FILENAME, load_meta, resolve_path, saved_step
from .state import KEPT_NAME, RunState

LOG_NAME = "log.jsonl"
BEST_NAME = "best.npz"  # the checkpoint with the best dev BLEU so far, beside the last (model.npz)
KEPT_PATTERN = "step-*.npz"  # the last evaluation checkpoints, for averaging
CONFIG_NAME = "config.toml"  # the run's resolved configuration, which train --config reads back
LOCK_NAME = ".lock"
SYSTEM_ROOTS = (Path("/proc"), Path("/sys"), Path("/dev"))
Write = Callable[[Path, RunState], object]  # writes a checkpoint holding the state to a path (Trainer.save)


def check_run_directory(
    out: str | Path, resume: bool, overwrite: bool, check_lock: bool = True, command: str = "train"
) -> Path:
    """Raise a ValueError naming ``--out`` and what is wrong with it, before any work; return it as a Path.

    ``check_lock`` False skips the lock (the MPI ranks besides rank 0, which takes it); ``command``
    "import" writes a run that no --resume continues.
    """
    refuse_empty(out)
    path = Path(out).expanduser()
    resolved = path.resolve()
    if resume and overwrite:
        raise ValueError("--resume continues the run in --out and --overwrite replaces it: give one of them")
    if any(resolved == root or root in resolved.parents for root in SYSTEM_ROOTS):
        raise ValueError(
            f"--out {out} is under {resolved.parts[0]}{resolved.parts[1]}: choose a directory of your own"
        )
    if path.suffix == ".npz":
        raise ValueError(
            f"--out names a run directory (it will hold {FILENAME} and {LOG_NAME}), not a file: got {out}"
        )
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out {out} exists and is not a directory")
    existing = next(parent for parent in (resolved, *resolved.parents) if parent.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"--out {out} cannot be written: {existing} is not a writable directory")
    owner = RunLock(path).owner() if check_lock else None
    if owner is not None:
        raise RunLock.in_use(path, owner)
    RunLock(path).check_file()
    held = run_files(path)
    if resume and not (path / FILENAME).is_file() and not evaluation_checkpoints(path):
        raise ValueError(
            f"--resume: --out {out} holds no saved run ({FILENAME} or {KEPT_PATTERN}); start a new run "
            + ("without --resume" if not held else "in a new --out (its other files stay)")
        )
    if held and not (resume or overwrite):
        resume_it = "continue it with --resume, " if command == "train" else ""
        raise ValueError(
            f"--out {out} already holds a training run ({', '.join(p.name for p in held[:3])}): {resume_it}"
            "choose a new --out, or replace it with --overwrite"
        )
    return path


def check_fit_directory(directory: Path, run_id: str, resumed_in: Path | None) -> None:
    """Trainer.fit's check of its directory, as check_run_directory is the command line's: a
    ValueError when it is not a directory, another process's run holds its lock, or it holds a run
    other than this one (its newest checkpoint records another run id), which training would
    replace. ``resumed_in``: the directory the trainer was resumed from (a run saved before runs
    recorded an id continues there)."""
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"{directory} exists and is not a directory: give the run directory to train into")
    owner = RunLock(directory).owner()
    if owner is not None and owner != os.getpid():
        raise RunLock.in_use(directory, owner)
    held = run_files(directory) if directory.is_dir() else []
    if not held or (resumed_in is not None and directory.resolve() == resumed_in.resolve()):
        return
    try:
        saved = load_meta(resume_checkpoint(directory)).get("run_id")
    except (ValueError, OSError, KeyError):  # no checkpoint of a run, or not one that can be read
        saved = None
    if saved != run_id:
        raise ValueError(
            f"{directory} already holds another training run ({', '.join(p.name for p in held[:3])}), "
            "which training into it would replace: give a new directory, continue that run with "
            "Trainer.resume, or remove its run files first (run.directory.clear_run)"
        )


def check_average_out(out: str | Path, inputs: Sequence[str | Path], overwrite: bool) -> Path:
    """The file ``average`` writes for ``--out``, or a ValueError naming what is wrong, before any work.

    ``--out`` names a ``.npz`` file, or a directory (new, or holding only an earlier average) that
    gets ``model.npz``, so ``--checkpoint DIR`` finds it. ``--overwrite`` replaces that one file and
    nothing else. Refused even with ``--overwrite``: one of the checkpoints being averaged, and any
    file of a training run (its model.npz holds the optimiser state a --resume needs).
    """
    refuse_empty(out)
    path = Path(out).expanduser()
    resolved = path.resolve()
    if any(resolved == root or root in resolved.parents for root in SYSTEM_ROOTS):
        raise ValueError(
            f"--out {out} is under {resolved.parts[0]}{resolved.parts[1]}: choose a file of your own"
        )
    if path.is_dir() or (path.suffix != ".npz" and not path.exists()):
        target = path / FILENAME
    elif path.suffix == ".npz":
        target = path
    else:
        raise ValueError(f"--out {out} exists and is neither a directory nor a .npz file")
    for number, given in enumerate(inputs, start=1):
        source = resolve_path(given)
        if source.resolve() == target.resolve() or (
            source.is_file() and target.is_file() and os.path.samefile(source, target)
        ):
            raise ValueError(
                f"--out {out} would write {target}, which is checkpoint {number} of those being averaged "
                f"({given}): an input is never replaced, even with --overwrite; choose another --out"
            )
    folder = target.parent
    training = [held.name for held in run_files(folder) if held.name != FILENAME] if folder.is_dir() else []
    if training and (
        target.name in (FILENAME, BEST_NAME, LOG_NAME, CONFIG_NAME) or target.match(KEPT_PATTERN)
    ):
        raise ValueError(
            f"--out {out} would write {target}, a file of the training run in {folder} "
            f"({', '.join(training[:3])}), which average never replaces, even with --overwrite: name "
            f"another file (--out {folder / 'average.npz'}) or directory"
        )
    owner = (
        RunLock(folder).owner() if target.name == FILENAME and folder.is_dir() else None
    )  # a run just begun
    if owner is not None:
        raise RunLock.in_use(folder, owner)
    if target.exists() and not target.is_file():
        raise ValueError(f"--out {out}: {target} exists and is not a file")
    if target.exists() and not overwrite:
        raise ValueError(
            f"--out {out}: {target} already exists: replace it with --overwrite, or choose another --out"
        )
    existing = next(parent for parent in (folder.resolve(), *folder.resolve().parents) if parent.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"--out {out} cannot be written: {existing} is not a writable directory")
    return target


class RunLock:
    """``with RunLock(directory):`` holds ``directory/.lock`` (the owner's process id) while a run writes there.

    A second run into the same directory is refused by name; a lock left by a process that no
    longer exists (killed) is taken over.
    """

    def __init__(self, directory: Path) -> None:
        self.directory, self.path = directory, directory / LOCK_NAME

    def __enter__(self) -> RunLock:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.check_file()
        for _ in range(2):
            try:
                handle = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                owner = self.owner()
                if owner is not None:
                    raise self.in_use(self.directory, owner) from None
                self.path.unlink(missing_ok=True)  # left by a process that is gone
                continue
            with os.fdopen(handle, "w") as lock:
                lock.write(f"{os.getpid()}\n")
            for orphan in self.directory.glob(".*.npz.*.tmp"):  # a save cut off by a kill; ours now
                orphan.unlink(missing_ok=True)
            return self
        raise ValueError(f"--out {self.directory}: could not take the lock {self.path}")

    def __exit__(self, *exc: object) -> None:
        self.path.unlink(missing_ok=True)

    def check_file(self) -> None:
        """Refuse a lock path that is no file (a directory): no run made it, and none can take it."""
        if self.path.exists() and not self.path.is_file():
            what = "a directory" if self.path.is_dir() else "not a regular file"
            raise ValueError(
                f"--out {self.directory}: its lock {self.path} is {what}, not the lock file a run writes: "
                f"remove it if it holds nothing of yours (rm -r {self.path}), or choose another --out"
            )

    def owner(self) -> int | None:
        """The process id holding the lock, if that process is alive; else None."""
        try:
            pid = int(self.path.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if _alive(pid) else None

    @staticmethod
    def in_use(directory: Path, owner: int) -> ValueError:
        """The refusal of a lock whose process is alive: a training run's, or one that may be stale
        (its run killed, the process id since taken by another program), with how to tell."""
        lock = directory / LOCK_NAME
        if owner == os.getpid():  # a second claim in one program: neither another run nor stale
            return ValueError(
                f"--out {directory} is claimed already by this process ({owner}, {lock}): a run directory "
                "has one owner; claim it again once the first claim is released, or choose another --out"
            )
        command = _command_line(owner)
        if command is not None and ("numpy_transformer" in command or "numpy-transformer" in command):
            return ValueError(
                f"--out {directory} is in use by another training run (process {owner}, {lock}): "
                "wait for it to finish or choose another --out"
            )
        shown = command if command is None or len(command) <= 80 else command[:77] + "..."
        running = f"runs `{shown}`, not numpy-transformer" if shown else "is running, maybe no training run"
        return ValueError(
            f"--out {directory} is locked by process {owner} ({lock}), which {running}: the lock may "
            f"be stale, left by a run that was killed, its process id since reused. If `ps -p {owner} -o args=` "
            f"shows no training run writing to {directory}, remove {lock} and run again; otherwise wait for "
            "it to finish or choose another --out"
        )


def _command_line(pid: int) -> str | None:
    """The command line of the process ``pid``, or None where the system does not say (no /proc)."""
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    command = " ".join(word.decode(errors="replace") for word in words if word)
    return "".join(c if c.isprintable() else "?" for c in command) or None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by someone else
        return True
    return True


def run_files(directory: Path) -> list[Path]:
    """The files of a run in ``directory``: any of them marks it as holding one. Only the names a
    run writes count (``step-0000005.npz``, never the user's ``step-0000005-mynote.npz``): these
    are the files --overwrite removes."""
    names = [FILENAME, BEST_NAME, LOG_NAME, CONFIG_NAME]
    return [directory / name for name in names if (directory / name).exists()] + sorted(
        path for path in directory.glob(KEPT_PATTERN) if KEPT_NAME.fullmatch(path.name) and path.is_file()
    )


def evaluation_checkpoints(directory: Path) -> list[Path]:
    """The evaluation checkpoints (step-*.npz) in ``directory``, by the names a run writes, oldest first."""
    return [path for path in run_files(directory) if KEPT_NAME.fullmatch(path.name)]


def resume_checkpoint(path: str | Path) -> Path:
    """The checkpoint --resume continues from ``path``: a checkpoint file itself; of a run directory
    its model.npz, or the newest evaluation checkpoint when it holds a later step (the save of
    model.npz after it failed, a full disk) or model.npz is missing or cannot be read (a torn copy).
    The steps compared are those the files hold, never those their names give (a copy renamed)."""
    kept = evaluation_checkpoints(Path(path)) if Path(path).is_dir() else []
    last = resolve_path(path)
    if not kept:
        return last
    held = saved_step(last)  # -1: missing or torn
    return kept[-1] if held < 0 or saved_step(kept[-1]) > held else last


def clear_run(directory: Path) -> None:
    """--overwrite: remove the old run's files before the new run writes its own."""
    for path in run_files(directory):
        path.unlink(missing_ok=True)


class RunDirectory:
    """The run directory of one ``train`` run, and its one owner: checked before any work, claimed
    (where this process writes it, made and locked), cleared of the run it replaces, and released
    at the end.

        with RunDirectory(out, resume, overwrite, writes=rank == 0) as directory:
            ...                  # build the run; --overwrite: directory.clear() once it is ready
            trainer.fit(directory.path)

    Only rank 0 of several MPI ranks writes (``writes``); the others check it alone. What the claim
    made (the directory and its missing parents) is removed again at the release where the run
    stopped before writing anything into it.
    """

    def __init__(self, out: str | Path, resume: bool, overwrite: bool, writes: bool = True) -> None:
        """``out`` checked (check_run_directory); nothing is written yet."""
        self.path = check_run_directory(out, resume, overwrite, check_lock=writes)
        self.overwrite = overwrite
        self.writes = writes
        self._locked = False  # between the claim and the release
        self._made: list[Path] = []  # the directory and its missing parents, deepest first
        self._held = ExitStack()  # the lock

    def __enter__(self) -> RunDirectory:
        """The claim: where this process writes, the directory made and locked (RunLock)."""
        if self.writes:
            self._made = self._missing()
            try:
                self._held.enter_context(RunLock(self.path))
                self._locked = True
            except BaseException:  # in use: what the claim made goes again
                self.release()
                raise
        return self

    def _missing(self) -> list[Path]:
        """The directory and those of its parents that do not exist yet, deepest first."""
        missing = []
        for path in (self.path, *self.path.absolute().parents):
            if path.exists():
                break
            missing.append(path)
        return missing

    def clear(self) -> None:
        """--overwrite: the old run's files removed (clear_run), where this process writes; called
        once the new run is ready, so that a refusal or a Ctrl-C before it keeps them. Refused where
        the claim was made without ``overwrite`` (a resumed run is continued, never removed) and, where
        this process writes, outside ``with`` (unlocked, another run may be writing there)."""
        if not self.overwrite:
            raise ValueError(
                f"RunDirectory({str(self.path)!r}).clear(): made with overwrite=False, so the run in it "
                "is kept: only a claim made with overwrite=True (--overwrite) replaces a run"
            )
        if self.writes:
            if not self._locked:
                raise RuntimeError(
                    f"RunDirectory({str(self.path)!r}).clear() outside `with RunDirectory(...)`: the run "
                    "directory is cleared only while this process holds its lock"
                )
            clear_run(self.path)

    def release(self) -> None:
        """The lock removed, then the directories the claim made, where they are still empty."""
        self._held.close()
        self._locked = False
        for path in self._made:  # stopped before anything was written: no empty directory stays
            try:
                path.rmdir()
            except OSError:  # it holds the run, or a file of someone else's: it stays, and its parents
                break
        self._made = []

    def __exit__(self, *exc: object) -> None:
        self.release()


class RunFiles:
    """What a training run writes into its directory: the log, the configuration and the checkpoints.

    ``with RunFiles(directory) as run:`` keeps the log open. The checkpoints hold a RunState, written
    by the ``write(path, state)`` given (the Trainer's save); RunFiles decides which evaluation
    checkpoints (step-*.npz) stay and returns the state that records them (its ``kept``). They are
    rotated among the ones the run wrote itself, so a file the run did not write is never deleted.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.best_path = directory / BEST_NAME
        self.saved_step: int | None = None  # the step of the last model.npz written
        self.saved_best: tuple[float, float | None] | None = None  # and the best dev BLEU and loss it records
        self._log: IO[str] | None = None

    def __enter__(self) -> RunFiles:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._log = (self.directory / LOG_NAME).open("a", encoding="utf-8")
        return self

    def __exit__(self, kind: type | None, error: BaseException | None, trace: TracebackType | None) -> None:
        if self._log:
            self._log.close()

    def log(self, record: dict[str, Any]) -> None:
        assert self._log is not None, "log inside `with RunFiles(...)`"
        try:
            self._log.write(json.dumps(record) + "\n")
            self._log.flush()
        except OSError as error:  # a full disk: name the file (a torn last line is skipped when read)
            raise SaveError.writing(self.directory / LOG_NAME, error, "its earlier lines are kept") from error

    def write_config(self, text: str) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        write_text_atomically(self.directory / CONFIG_NAME, text)

    def save(self, state: RunState, write: Write) -> None:
        """The run's last checkpoint, model.npz."""
        write(self.directory, state)
        self.saved_step, self.saved_best = state.step, (state.best_bleu, state.best_loss)

    def save_evaluated(self, state: RunState, write: Write, best: bool, keep: int) -> RunState:
        """After an evaluation: the last evaluation checkpoints (``keep`` of them), the last checkpoint,
        and best.npz when it is the best (``best``: EvaluationState.keep_best). Returns ``state`` with
        the evaluation checkpoints kept (as the checkpoints record them); a failed save raises and
        deletes none."""
        if keep:
            name = f"step-{state.step:07d}.npz"
            kept = [*(kept for kept in state.kept if kept != name), name]
            state = replace(state, kept=tuple(kept[-keep:]))
            write(self.directory / name, state)
            self._remove(kept[:-keep])  # only once the new one is on disk: a failed save loses none
        self.save(state, write)
        if best:
            write(self.best_path, state)
        return state

    def keep_last(self, state: RunState, write: Write, keep: int) -> RunState:
        """At the end of a run: only the last ``keep`` evaluation checkpoints stay (those beyond were
        kept for averaging), and model.npz records them and the run's best dev BLEU. Returns
        ``state`` with the checkpoints kept."""
        dropped = state.kept[: max(len(state.kept) - keep, 0)]
        if dropped or (state.best_bleu, state.best_loss) != self.saved_best:
            state = replace(state, kept=state.kept[len(dropped) :])
            self.save(state, write)
            self._remove(dropped)
        return state

    def _remove(self, names: Sequence[str]) -> None:
        for name in names:
            (self.directory / name).unlink(missing_ok=True)
