"""A model directory on disk: the names of its files, reading one of them within a bound, and
writing an export into it (checked first, then written whole beside it and swapped in: the
directory holds the earlier export or the new one, each whole, whatever ends the export:
write_export)."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import shutil
import signal
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import Any

from ...files import SaveError

CONFIG, WEIGHTS, VOCAB = "config.json", "model.safetensors", "vocab.json"
TARGET_VOCAB = "target_vocab.json"  # the target's vocabulary of a Marian tokenizer of separate ones
SENTENCEPIECE_FILES = ("source.spm", "target.spm")
TOKENIZER_JSON, TARGET_TOKENIZER = "tokenizer.json", "target"  # the target's, of separate vocabularies
GENERATION = "generation_config.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
TARGET_FILES = tuple(f"{TARGET_TOKENIZER}/{name}" for name in (TOKENIZER_JSON, TOKENIZER_CONFIG))
PICKLED = ("pytorch_model.bin", "tf_model.h5", "flax_model.msgpack")
CONVERT = (
    'python -c "from transformers import MarianMTModel as M; '
    "M.from_pretrained('{dir}').save_pretrained('{dir}', safe_serialization=True)\""
)
WRITTEN = (  # what a Hugging Face export holds
    CONFIG,
    WEIGHTS,
    GENERATION,
    *SENTENCEPIECE_FILES,
    VOCAB,
    TOKENIZER_CONFIG,
    TOKENIZER_JSON,
    *TARGET_FILES,
)
CTRANSLATE2_WRITTEN = (
    "config.json",
    "model.bin",
    "shared_vocabulary.json",
    "source_vocabulary.json",
    "target_vocabulary.json",
    TOKENIZER_JSON,
    TOKENIZER_CONFIG,
    *TARGET_FILES,
    *SENTENCEPIECE_FILES,
)  # what a CTranslate2 export holds (one shared vocabulary, or the source's and the target's; the tokenizer)
# every file either kind of export writes: an export with --overwrite removes the other kind's too, so
# that the directory holds one model (transformers cannot load a Marian directory beside model.bin)
EXPORTS_WRITTEN = tuple(dict.fromkeys((*WRITTEN, *CTRANSLATE2_WRITTEN)))
MAX_CONFIG, MAX_VOCAB = 1 << 20, 64 << 20  # config.json and vocab.json are read up to these sizes
# the folders beside --to an export uses, after its name: the new export written whole, the earlier moved aside
STAGED, REPLACED = ".export-staging", ".export-replaced"
NAME_MAX = 255  # the longest file name most file systems take, in bytes, where the system does not say


class PretrainedError(ValueError):
    """A model directory that cannot be read as a Marian translator: the message names the file
    and the problem, and what to do where there is something to do."""


class ExportError(ValueError):
    """A model, vocabulary or directory export_pretrained cannot write: the message names it."""


class ExportInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM (``signum``) ended an export: the message says what ``--to`` holds."""

    def __init__(self, signum: int, message: str = "") -> None:
        super().__init__(message)
        self.signum = signum


def read_bounded(path: Path, limit: int) -> bytes:
    """The file's bytes, refused naming it when it holds more than ``limit`` (a device, a wrong file)."""
    try:
        with open(path, "rb") as file:
            data = file.read(limit + 1)
    except OSError as error:
        raise PretrainedError(f"{path}: cannot be read ({error.strerror or error})") from None
    if len(data) > limit:
        raise PretrainedError(
            f"{path}: larger than {limit >> 20} MiB (a model directory's {path.name} is far smaller): "
            "not the file of a model this package reads"
        )
    return data


def weights_path(directory: str | Path) -> Path:
    """The directory's ``model.safetensors``; a directory with only a pickled checkpoint is refused
    with the command that converts it."""
    path = Path(directory) / WEIGHTS
    if not path.is_file():
        pickled = [name for name in PICKLED if (Path(directory) / name).is_file()]
        if pickled:
            raise PretrainedError(
                f"{Path(directory) / pickled[0]}: a pickled checkpoint, which is never loaded (unpickling can run "
                f"any code); convert it once to {WEIGHTS} with: {CONVERT.format(dir=directory)}"
            )
        what = "not a regular file" if path.exists() else "no such file"
        raise PretrainedError(f"{path}: {what} (a Hugging Face model directory holds its weights in it)")
    return path


def check_destination(
    directory: str | Path, overwrite: bool, written: tuple[str, ...] = EXPORTS_WRITTEN
) -> Path:
    """``directory`` as the export's (never named as a ``.npz`` file): absent (its missing parents are
    made on writing), an empty directory, or (``overwrite``) one to replace the files of an export
    (``written``: either kind's, EXPORTS_WRITTEN) in. What an export ended by a kill left beside it
    is put right first (recover_killed: the earlier export put back, a half-written one removed);
    one still running into it is refused."""
    path = Path(directory).expanduser()
    if path.suffix == ".npz":  # a checkpoint's name, refused as train --out refuses it
        raise ExportError(
            f"--to names the export's directory (it will hold {CONFIG} and the model's weights), not a file: "
            f"got {directory}"
        )
    ancestor = next((parent for parent in path.parents if parent.exists()), path)
    if not ancestor.is_dir():
        raise ExportError(
            f"--to {directory}: {ancestor} is not a directory (expected a folder to make it in)"
        )
    recover_killed(path)
    if path.exists() and not path.is_dir():
        raise ExportError(f"--to {directory}: not a directory (expected a directory to write the model into)")
    if path.is_dir() and any(path.iterdir()) and not overwrite:
        raise ExportError(
            f"--to {directory}: not empty; give an empty or new directory, or --overwrite to replace "
            f"the files an export writes ({', '.join(written)})"
        )
    return path


def write_export(path: Path, write: Callable[[Path], None], names: tuple[str, ...]) -> list[Path]:
    """``write`` fills a folder beside ``path`` (made with its missing parents); the files of ``path``
    but those of ``names`` (either kind of export's: EXPORTS_WRITTEN) join them there, as hard links
    (copies where a link cannot be made); then the folder takes ``path``'s place: ``path`` renamed
    aside, the folder renamed to it, the earlier one removed. ``path`` holds the earlier export or
    the new one, each whole, at every moment: Ctrl-C or SIGTERM (ExportInterrupted) or a failure
    (OSError: a SaveError naming the file) before the swap leaves it as it was, and removes the
    folder and the parents made; once the swap is done, it holds the new one. A kill that no process
    survives (SIGKILL) leaves the folders beside it, which the next export's check_destination
    puts right. Returns the files of the export."""
    destination = real_destination(path)
    staging, replaced = export_siblings(destination)
    interruptions = Interruptions()
    made: list[Path] = []
    staged = False  # the staging folder is this export's (another's is never removed)
    with interruptions.installed(), ExitStack() as locks:
        try:
            make_parents(destination.parent, made)
            try:
                staging.mkdir()
            except FileExistsError:  # made since check_destination looked
                raise ExportError(f"--to {path}: another export into it is running ({staging})") from None
            staged = True
            locks.enter_context(locked(staging, path))
            if destination.is_dir():
                locks.enter_context(locked(destination, path))
            with interruptions.allowed():
                write(staging)
                exported = sorted(file.relative_to(staging) for file in staging.rglob("*") if file.is_file())
                for name in exported:
                    os.chmod(staging / name, 0o644)
                if destination.is_dir():  # --overwrite: the files of yours beside the earlier export stay
                    carry_others(destination, staging, names)
                    shutil.copystat(destination, staging)
            swap(staging, destination, replaced)  # the last step: what fails before it leaves path as it was
        except BaseException as error:
            if staged:
                shutil.rmtree(staging, ignore_errors=True)
            for folder in reversed(made):
                with suppress(OSError):
                    folder.rmdir()
            described = not_written(error, path, staging, made)
            if described is error:
                raise
            raise described from error
        if replaced.exists():
            try:
                shutil.rmtree(replaced)
            except OSError as error:
                warnings.warn(
                    f"--to {path}: the earlier export could not be removed from {replaced} ({error})",
                    stacklevel=2,
                )
    if interruptions.pending is not None:  # it came during the swap, which was done first
        raise ExportInterrupted(
            interruptions.pending, f"{signal_name(interruptions.pending)} once the export was whole in {path}"
        )
    return [path / name for name in exported]


def not_written(error: BaseException, path: Path, staging: Path, made: list[Path]) -> BaseException:
    """The error of an export ended before its swap (nothing of it written): an interruption or a
    failure of writing (OSError: a SaveError naming the file as it would have been in ``path``)
    saying so; any other error as it is."""
    kept = "nothing of the export was written" + (
        f" (the folders made for it are removed: {', '.join(map(str, made))})" if made else ""
    )
    if isinstance(error, KeyboardInterrupt):
        signum = getattr(error, "signum", signal.SIGINT)
        return ExportInterrupted(signum, f"{signal_name(signum)}: {kept}; --to {path} is as it was")
    if isinstance(error, OSError) and not isinstance(error, SaveError):
        failed = Path(error.filename or path)
        if failed.is_relative_to(staging):
            failed = path / failed.relative_to(staging)
        return SaveError.writing(failed, error, kept)
    return error


def signal_name(signum: int) -> str:
    return "interrupted (Ctrl-C)" if signum == signal.SIGINT else f"ended ({signal.Signals(signum).name})"


class Interruptions:
    """Ctrl-C and SIGTERM while an export is written: within ``allowed()`` (writing the new export)
    the first raises ExportInterrupted at once; elsewhere (making the folders, the swap, the clean-up
    after an interruption) each is kept in ``pending`` until that is done. Only the main thread has
    signals: elsewhere none is handled."""

    def __init__(self) -> None:
        self.holding = True
        self.pending: int | None = None

    def handle(self, signum: int, frame: Any) -> None:
        if self.holding:
            self.pending = self.pending or signum
            return
        self.holding = True  # the clean-up that follows is not cut short by a second signal
        raise ExportInterrupted(signum)

    @contextmanager
    def installed(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {number: signal.signal(number, self.handle) for number in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for number, saved in previous.items():
                signal.signal(number, saved)

    @contextmanager
    def allowed(self) -> Iterator[None]:
        if self.pending is not None:  # a signal while the folders were made
            raise ExportInterrupted(self.pending)
        self.holding = False
        try:
            yield
        finally:
            self.holding = True


def real_destination(path: Path) -> Path:
    """``path`` absolute, followed where it is a link: the swap replaces the folder, not the link."""
    return Path(os.path.realpath(path)) if path.is_symlink() else Path(os.path.abspath(path))


def export_siblings(destination: Path) -> tuple[Path, Path]:
    """The folders beside ``destination`` an export writes the new export into and moves the earlier
    one aside to: hidden, named after it (cut short to fit the file system's longest name, with a
    digest of the whole name that tells two long names apart), the same for every export into it."""
    try:
        longest = os.pathconf(destination.parent, "PC_NAME_MAX")
    except (OSError, ValueError):  # the parent is to be made, or the system does not say
        longest = NAME_MAX
    digest = hashlib.sha256(os.fsencode(destination.name)).hexdigest()[:8]
    room = longest - len(f"..{digest}") - max(len(STAGED), len(REPLACED))
    stem = destination.name
    while len(os.fsencode(stem)) > room:
        stem = stem[:-1]
    staging, replaced = (destination.parent / f".{stem}.{digest}{suffix}" for suffix in (STAGED, REPLACED))
    return staging, replaced


def make_parents(folder: Path, made: list[Path]) -> None:
    """The folders of ``folder`` and above it that do not exist made, outermost first, each added to
    ``made`` once made."""
    missing = []
    for parent in (folder, *folder.parents):
        if parent.exists():
            break
        missing.append(parent)
    for parent in reversed(missing):
        parent.mkdir()
        made.append(parent)


@contextmanager
def locked(folder: Path, path: Path) -> Iterator[None]:
    """Meanwhile ``folder`` is locked (flock, released by the system however the process ends):
    an export into ``path`` that holds it is refused by name."""
    handle = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ExportError(
                f"--to {path}: another export into it is running ({folder} is its own): wait for it to end"
            ) from None
        yield
    finally:
        os.close(handle)


def carry_others(old: Path, new: Path, names: tuple[str, ...], prefix: str = "") -> None:
    """Every file of ``old`` but an export's (``names``, relative to the top) into ``new`` at its
    place: a hard link (the same file; ``old`` is left whole) or, where none can be made, a copy. A
    folder of yours where an export's file goes is refused (IsADirectoryError naming it)."""
    for entry in os.scandir(old):
        name, there = prefix + entry.name, new / entry.name
        folder = entry.is_dir(follow_symlinks=False)
        if name in names:
            if folder:
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), entry.path)
        elif folder and any(written.startswith(f"{name}/") for written in names):  # target/: its and yours
            made = not there.exists()
            there.mkdir(exist_ok=True)
            carry_others(Path(entry.path), there, names, f"{name}/")
            shutil.copystat(entry.path, there)
            if made and not any(there.iterdir()):
                there.rmdir()
        elif folder:
            shutil.copytree(entry.path, there, symlinks=True, copy_function=link_or_copy)
        else:
            link_or_copy(entry.path, there)


def link_or_copy(source: str, target: str | Path) -> None:
    """``target`` a hard link to the file (or link) ``source``; a copy where no link can be made."""
    try:
        os.link(source, target, follow_symlinks=False)
    except FileExistsError:
        raise
    except OSError:  # another file system, or one without hard links
        shutil.copy2(source, target, follow_symlinks=False)


def swap(staging: Path, destination: Path, replaced: Path) -> None:
    """``staging`` renamed to ``destination``; a ``destination`` that holds files first renamed to
    ``replaced`` (and renamed back where the second rename fails)."""
    if destination.is_dir() and any(destination.iterdir()):
        os.rename(destination, replaced)
        try:
            os.rename(staging, destination)
        except BaseException:
            os.rename(replaced, destination)
            raise
    else:  # absent, or an empty folder: replaced by the one rename
        os.rename(staging, destination)


def recover_killed(path: Path) -> None:
    """What an export into ``path`` that was killed (SIGKILL: no clean-up ran) left beside it, put
    right, each step said in a warning: the earlier export put back where the kill came between the
    swap's two renames (``path`` absent), the half-written new one or the replaced one removed. An
    export still running into ``path`` (its folders locked) is refused (ExportError)."""
    destination = real_destination(path)
    staging, replaced = export_siblings(destination)
    for folder in (replaced, staging):
        if not folder.is_dir() or folder.is_symlink():
            continue
        with locked(folder, path):
            if folder == replaced and not destination.exists():
                os.rename(replaced, destination)
                warnings.warn(
                    f"--to {path}: an export into it was killed while swapping; the export it held before "
                    f"is put back (from {replaced.name})",
                    stacklevel=2,
                )
            else:
                shutil.rmtree(folder)
                warnings.warn(
                    f"--to {path}: removed {folder.name}, left beside it by an export that was killed",
                    stacklevel=2,
                )


def write_files(staging: Path, files: dict[str, str | bytes]) -> None:
    """Each of ``files`` (its name inside the export: ``target/tokenizer.json``) into ``staging``,
    text as UTF-8."""
    for name, content in files.items():
        (staging / name).parent.mkdir(exist_ok=True)
        (staging / name).write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
