"""Loading the learner's file (a script or a notebook) and running their code under a time limit:
what it raises is shown as theirs, with their file and line."""

from __future__ import annotations
import __future__

import dis
import importlib.util
import os
import re
import signal
import stat
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import CodeType, FrameType, FunctionType, ModuleType
from typing import Any, NoReturn

import numpy

from .. import functional
from ..machine import require
from ..moved import MOVED
from . import blocks
from .exercises.curriculum import BLOCKS
from .optimiser import TEXTBOOK as TRAINING_TEXTBOOK

SCRATCH = "# scratch"  # a notebook cell starting so is never run by check, status or train


class LearnerCodeError(Exception):
    """The learner's own code raised: the message is theirs, with their file and line."""


_NOTEBOOK_CELLS: dict[Path, list[int]] = {}  # a loaded notebook's script: the line each cell starts at


def _place(path: Path, line: int | None) -> str:
    """'file:line', or for a notebook 'file, cell N line M' (its cells counted from 1 as shown)."""
    starts = _NOTEBOOK_CELLS.get(path)
    if not starts or line is None or line < starts[0]:
        return f"{path.name}:{line}"
    cell = max(i for i, start in enumerate(starts) if start <= line)
    return f"{path.name}, cell {cell + 1} line {line - starts[cell]}"


def _their_frames(error: BaseException, path: Path) -> str:
    """'file:line in function' of the innermost frame of the learner's file in error's traceback,
    and the outermost one too when they differ ('..., called from file:line in block_backward'):
    a block's backward that passes the wrong array raises inside the layer it calls."""
    frames = traceback.extract_tb(error.__traceback__)
    theirs = [frame for frame in frames if Path(frame.filename).resolve() == path]
    frame = theirs[-1] if theirs else (frames[-1] if frames else None)
    if isinstance(error, SyntaxError) and error.filename and Path(error.filename).resolve() == path:
        return _place(path, error.lineno)
    if frame is None:
        return ""
    where = f"{_place(Path(frame.filename).resolve(), frame.lineno)} in {frame.name}"
    if len(theirs) > 1 and theirs[0].name != frame.name:
        where += f", called from {_place(path, theirs[0].lineno)} in {theirs[0].name}"
    return where


def their_arrays(error: BaseException, path: Path) -> dict[str, Any]:
    """The arrays among the locals of the innermost frame of the learner's file in error's traceback:
    what the line that raised could see (an accumulator of the wrong shape, say)."""
    tb, found = error.__traceback__, None
    while tb is not None:
        if Path(tb.tb_frame.f_code.co_filename).resolve() == path:
            found = tb.tb_frame
        tb = tb.tb_next
    if found is None:
        return {}
    return {name: value for name, value in found.f_locals.items() if hasattr(value, "shape")}


def describe_error(error: BaseException, path: Path) -> str:
    """One line: the exception as the learner would read it, and where in their file it was raised."""
    where = _their_frames(error, path)
    said = error.msg if isinstance(error, SyntaxError) else str(error)  # its place is said once, as theirs
    text = f"{type(error).__name__}: {said}" if said else type(error).__name__
    return f"{text} ({where})" if where else text


_NOT_REGULAR = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
)


def learner_file(path: str | Path) -> Path:
    """The learner's file, resolved: FileNotFoundError where nothing is there, ValueError where a
    directory is (the workbook is a file inside it) or something else than a regular file (a
    device, a FIFO: told by its status alone, never opened, which would wait on a FIFO)."""
    file = Path(path).expanduser().resolve()
    if file.is_dir():
        raise ValueError(
            f"{path}: a directory, not a file (give the workbook's file, e.g. {Path(path) / 'my_backprop.py'})"
        )
    if not file.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if not file.is_file():
        mode = file.stat().st_mode
        what = next((name for test, name in _NOT_REGULAR if test(mode)), "something")
        raise ValueError(
            f"{path}: {what}, not a regular file (give the workbook's file, my_backprop.py or "
            "my_backprop.ipynb, as learn start writes it)"
        )
    return file


def load_learner(path: str | Path) -> ModuleType:
    """Import the learner's file from its path (their code runs). The textbook's own file is the
    textbook module itself. Raises FileNotFoundError, or LearnerCodeError when importing it raised."""
    if not isinstance(path, (str, Path)):
        raise TypeError(f"path must be a path to a Python file, got {type(path).__name__}")
    file = learner_file(path)
    if file.suffix not in (".py", ".ipynb"):
        raise ValueError(f"{path}: expected a Python file (.py) or a notebook (.ipynb)")
    if file == Path(functional.__file__).resolve():
        return functional
    name = f"numpy_transformer_learner_{abs(hash(str(file)))}"
    if file.suffix == ".ipynb":
        module = ModuleType(name)
        module.__file__ = str(file)
        script, flags = _notebook_source(file)

        def run() -> None:  # a syntax error is theirs too, named by cell and line
            exec(compile(script, str(file), "exec", flags=flags, dont_inherit=True), module.__dict__)

    else:
        if b"\x00" in file.read_bytes():  # Python's own error would point into importlib
            kind = "UTF-16 text" if file.read_bytes()[:2] in (b"\xff\xfe", b"\xfe\xff") else "not text"
            raise LearnerCodeError(
                f"{path} could not be imported: it holds NUL bytes ({kind}); save it as UTF-8 Python text"
            )
        spec = importlib.util.spec_from_file_location(name, file)
        if spec is None or spec.loader is None:
            raise ValueError(f"{path}: cannot be imported as a Python module")
        module = importlib.util.module_from_spec(spec)
        loader = spec.loader

        def run() -> None:
            loader.exec_module(module)

    sys.modules[name] = module
    folder = str(file.parent)  # their file may import a module of its own folder, wherever they run from
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    real_exit = os._exit  # which would end the check with status 0 and no word: made a SystemExit to report
    checking = os.getpid()

    def exit_reported(status: int) -> NoReturn:
        if os.getpid() != checking:  # a process their file forked ends as it asked
            real_exit(status)
        raise SystemExit(f"os._exit({status}) at the top level of the file")

    try:
        os._exit = exit_reported
        # its code is unseen yet: every line watched; the textbook put back after the time limit is off
        with _textbook_kept(name), under_time_limit(TIME_LIMIT, watch_lines=sys.version_info < (3, 11)):
            run()
    except BaseException as error:  # their import-time code: a syntax error, a failing import, anything
        sys.modules.pop(name, None)
        if isinstance(error, KeyboardInterrupt):
            raise
        if isinstance(error, TimedOut):
            raise LearnerCodeError(
                f"{path} could not be imported: its top-level code was still running after {TIME_LIMIT:g} "
                f"seconds ({_their_frames(error, file)}); code outside a function runs on every import: "
                'put it inside a function, or under `if __name__ == "__main__":`'
            ) from None
        missing = (error.name or "") if isinstance(error, ImportError) else ""
        hint = f"; {missing} is now {MOVED[missing]}: change the import" if missing in MOVED else ""
        raise LearnerCodeError(f"{path} could not be imported: {describe_error(error, file)}{hint}") from None
    finally:
        os._exit = real_exit
        if added:
            with suppress(ValueError):
                sys.path.remove(folder)
    return module


def _notebook_source(file: Path) -> tuple[str, int]:
    """A notebook's cells as one script (magics commented out, markdown as comments), each cell
    after a ``# %%`` line; where each starts is kept so that an error names the cell. With it the
    compiler flags of its ``from __future__`` imports, which are commented out: in Jupyter a cell
    may hold them wherever it sits (a cell added above the first), in one script only its start."""
    require(f"{file.name} (a notebook)", "jupytext")
    import jupytext  # type: ignore[import-untyped]

    try:
        notebook = jupytext.read(file)
    except Exception as error:  # not JSON, not a notebook
        raise LearnerCodeError(
            f"{file.name} could not be read as a notebook ({type(error).__name__}: {error}); expected a Jupyter "
            "notebook, JSON with its cells and metadata, as learn start --notebook writes"
        ) from None
    for cell in notebook.cells:  # scratch cells are the learner's to try things in: never run
        if cell.cell_type == "code" and cell.source.lstrip().startswith(SCRATCH):
            cell.source = f"{SCRATCH} (not run)"
    lines = str(jupytext.writes(notebook, fmt="py:percent")).split("\n")
    _NOTEBOOK_CELLS[file] = [n for n, line in enumerate(lines, 1) if line.startswith("# %%")]
    flags = 0
    for number, line in enumerate(lines):
        future = re.fullmatch(r"from __future__ import ([\w ,]+)", line.rstrip())
        names = [name.strip() for name in future.group(1).split(",")] if future else []
        if names and set(names) <= set(__future__.all_feature_names):  # an unknown one: compile names it
            flags |= sum(getattr(__future__, name).compiler_flag for name in names)
            lines[number] = f"# {line}"  # the same number of lines: an error names the cell and line
    return "\n".join(lines), flags


_REPLACED: dict[str, dict[str, tuple[str, Callable]]] = {}  # a learner's module: what its file assigned over


@contextmanager
def _textbook_kept(name: str) -> Iterator[None]:
    """The textbook (functional.py and blocks.py) put back as it was after the learner's file ran,
    whether it ran through or raised: a file that assigns over it (``F.relu_backward = relu_backward``)
    never changes it for the rest of the process. The functions it assigned are kept, by the
    textbook's name, in _REPLACED[name]: theirs to grade, with the textbook's name they took."""
    before = [(textbook, dict(vars(textbook))) for textbook in (functional, blocks)]
    try:
        yield
    finally:
        replaced: dict[str, tuple[str, Callable]] = {}
        for textbook, kept in before:
            space = vars(textbook)
            for key in [key for key in space if key not in kept]:
                del space[key]
            for key, value in kept.items():
                now = space.get(key)
                if now is not value and callable(now):
                    replaced.setdefault(key, (f"{textbook.__name__.rsplit('.', 1)[-1]}.{key}", now))
                space[key] = value
        _REPLACED[name] = replaced


def replaced_textbook(module: ModuleType, name: str) -> str | None:
    """The textbook's function the learner's file assigned its ``name`` over ("functional.relu_backward"),
    or None."""
    return _REPLACED.get(module.__name__, {}).get(name, (None,))[0]


def learners_function(module: ModuleType, name: str) -> Callable | None:
    """The function ``name`` as the learner's file defines it (None if absent or imported); where it
    defines none but assigned one over the textbook's, that one."""
    if module is functional:  # the textbook's own file: the blocks' and the training rungs' textbooks too
        value = TRAINING_TEXTBOOK.get(name) or getattr(blocks if name in BLOCKS else module, name, None)
        return value if callable(value) else None
    value = getattr(module, name, None)
    textbook = (getattr(functional, name, None), getattr(blocks, name, None), TRAINING_TEXTBOOK.get(name))
    if value is None or any(value is function for function in textbook if function is not None):
        value = _REPLACED.get(module.__name__, {}).get(name, (None, None))[1]
    return value if callable(value) else None


class TimedOut(BaseException):
    """Raised inside the learner's code when its function has run past its time (a BaseException,
    so that their own ``except Exception`` cannot swallow it)."""


TIME_LIMIT = 60.0  # seconds for importing the learner's file, and for every case of one exercise
# seconds their function runs before the wait is said (the textbook's slowest grades in 5 on a busy machine)
WAITING_AFTER = 10.0
_NOT_THEIRS = tuple(
    os.path.join(os.path.dirname(module.__file__ or ""), "") for module in (functional, numpy)
)


def _loops_past_signals(code: CodeType) -> bool:
    """Whether ``code``, or code inside it, has a loop that Python 3.10 never stops for a signal: one
    whose jump back lands on the start of a try or with block (``while True: try: ...``), where its
    eval loop never looks for one (3.11 and later do)."""
    instructions, jumps = list(dis.get_instructions(code)), {*dis.hasjabs, *dis.hasjrel}
    blocks = {i.offset for i in instructions if i.opname in ("SETUP_FINALLY", "SETUP_WITH")}
    if any(i.opcode in jumps and i.argval in blocks and i.argval <= i.offset for i in instructions):
        return True
    return any(_loops_past_signals(const) for const in code.co_consts if isinstance(const, CodeType))


def needs_line_watch(module: ModuleType) -> bool:
    """Whether the learner's functions need under_time_limit's ``watch_lines`` to be stopped (only
    ever on Python 3.10, and only for a loop like ``while True: try: ...``)."""
    if sys.version_info >= (3, 11):
        return False
    file = getattr(module, "__file__", None)
    functions = [
        f for f in vars(module).values() if isinstance(f, FunctionType) and f.__code__.co_filename == file
    ]
    return any(_loops_past_signals(function.__code__) for function in functions)


@contextmanager
def under_time_limit(
    seconds: float | None,
    watch_lines: bool = False,
    say: Callable[[str], None] | None = None,
    waiting: str = "",
) -> Iterator[None]:
    """Raise TimedOut in whatever runs after ``seconds`` (on the main thread, where signals can
    interrupt it; elsewhere, or with None, no limit). ``watch_lines`` also looks at the clock on every
    line of code outside the package and NumPy, for what no signal can stop (needs_line_watch); it
    slows that code, so it is on only where needed. Where it still runs after WAITING_AFTER seconds,
    ``say`` gets a line saying what it waits for (``waiting``, "your adam_step") and how long at most:
    else a learner would look at a silent command for a minute."""
    if seconds is None:
        yield
        return
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return
    fired = False  # TimedOut is raised once, by whichever of the two below comes first
    deadline = time.monotonic() + seconds

    def expire(signum: int, frame: Any) -> None:
        nonlocal fired
        if not fired:
            fired = True
            raise TimedOut()

    def line_by_line(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal fired
        if event == "call":  # a new frame: its lines are watched unless it is the package's or NumPy's
            return None if frame.f_code.co_filename.startswith(_NOT_THEIRS) else line_by_line
        if event == "line" and not fired and time.monotonic() > deadline:
            fired = True
            raise TimedOut()
        return line_by_line

    previous_trace = sys.gettrace()
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    if watch_lines:
        sys.settrace(line_by_line)
    notice = None
    if say is not None and seconds > WAITING_AFTER:  # said from a thread: a signal handler may not print
        notice = threading.Timer(WAITING_AFTER, say, [f"waiting for {waiting} (a limit of {seconds:g} s)…"])
        notice.daemon = True
        notice.start()
    try:
        yield
    finally:
        if notice is not None:
            notice.cancel()
        if watch_lines:
            sys.settrace(previous_trace)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
