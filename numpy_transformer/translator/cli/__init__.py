"""``numpy-transformer`` / ``python -m numpy_transformer``: train, translate, evaluate, average, plot, learn,
import, export; one module per command, each registered here (build_parser, _main's handlers)."""

from __future__ import annotations

import argparse
import signal
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from ...backend import set_backend
from ...files import silence
from ...machine import restart_with_openblas_timeout, tune_cpu
from ..corpora import printable
from ..distributed import launched_rank
from ..run.checkpoint import CheckpointError
from .average import add_average, run_average
from .common import BROKEN_PIPE, Parser, parse_arguments, refuse_empty_paths
from .export import add_export, run_export
from .import_model import add_import, run_import
from .learn import add_learn, run_learn
from .plot import add_plot, run_plot
from .train import add_train, run_train
from .translate import add_evaluate, add_translate, run_evaluate, run_translate

__all__ = ["build_parser", "main"]

DESCRIPTION = (
    "A translation toolkit around the Transformer of 'Attention Is All You Need' written in NumPy: train, "
    "translate, evaluate, average, plot, learn, import, export. numpy-transformer COMMAND --help says "
    "what each does and takes."
)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="numpy-transformer", description=DESCRIPTION)
    commands = parser.add_subparsers(dest="command", required=True)
    add_train(commands)
    add_translate(commands)
    add_evaluate(commands)
    add_average(commands)
    add_plot(commands)
    add_learn(commands)
    add_import(commands)
    add_export(commands)
    _describe(parser)
    return parser


def _describe(parser: argparse.ArgumentParser) -> None:
    """Each command's own --help opens with what the list of commands says of it (its help), which
    it would otherwise leave out: ``learn hint --help`` said "FILE NAME" and nothing more."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for listed in action._choices_actions:
                command = action.choices[listed.dest]
                if command.description is None:
                    command.description = listed.help
                _describe(command)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``numpy-transformer`` command; ``argv`` None reads the process's own arguments and opts
    the process in to the CPU settings (tune_cpu), as a program of its own may.

    Exit codes: 0 done; 2 refused (one line naming what is wrong); 130 interrupted (Ctrl-C), 143 an
    export or a run being built ended by SIGTERM; 141 the reader of standard output went away (``| head``), as
    128 + SIGPIPE says for cat and its kin.
    """
    if argv is None and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        # the modules are loaded (see numpy_transformer/__init__.py): Ctrl-C is a KeyboardInterrupt again
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return _main(argv)
    except KeyboardInterrupt as interruption:  # where no command handles it: nothing was written
        # or an export's (ExportInterrupted, of Ctrl-C or SIGTERM), which says what its --to holds
        print(f"numpy-transformer: {str(interruption) or 'interrupted'}", file=sys.stderr)
        return 128 + getattr(interruption, "signum", signal.SIGINT)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parse_arguments(parser, argv)
    refuse_empty_paths(parser, args)
    refused = _platform_refused() or _environment_refused(args)
    if refused:  # before any work: else it surfaces inside whatever first asks for the backend
        if launched_rank() == 0:  # under mpiexec every rank reads the same environment
            print(f"numpy-transformer {args.command}: error: {refused}", file=sys.stderr)
        return 2
    if argv is None:
        restart_with_openblas_timeout()
        tune_cpu()
    handlers = {
        "train": run_train,
        "translate": run_translate,
        "evaluate": run_evaluate,
        "average": run_average,
        "plot": run_plot,
        "learn": run_learn,
        "import": run_import,
        "export": run_export,
    }

    def say_warning(message: Warning | str, *_: Any, **__: Any) -> None:  # one line, not a source location
        if launched_rank() == 0:  # under mpiexec the ranks read the same data, and rank 0 speaks for them
            # a library's warning may quote the text it was given (matplotlib's missing glyph: an ESC)
            print(f"numpy-transformer {args.command}: warning: {printable(str(message))}", file=sys.stderr)

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always", UserWarning)
            warnings.showwarning = say_warning
            if getattr(args, "backend", None):
                set_backend(args.backend)
            code = handlers[args.command](args)
        sys.stdout.flush()  # a reader that has gone shows here, not as a traceback when Python exits
        return code
    except BrokenPipeError:  # `translate ... | head -n 1`: the reader has all it wanted
        silence(sys.stdout)
        return BROKEN_PIPE
    except (ValueError, TypeError, RuntimeError, CheckpointError) as error:
        print(f"numpy-transformer {args.command}: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # the work failed, not its input (a full disk: SaveError names the file)
        # the operating system's own error without a file (not a SaveError naming its file) and a standard
        # output that fails again: `> /dev/full`, not the run's disk
        if error.filename is None and len(error.args) == 2 and _standard_output_fails():
            silence(sys.stdout)
            error = OSError(f"could not write to standard output ({error.strerror or error})")
        print(f"numpy-transformer {args.command}: error: {error}", file=sys.stderr)
        return 1


def _platform_refused() -> str | None:
    """The refusal of native Windows, before any work: a run directory's lock (a process id asked
    whether it lives), a checkpoint's save (its mode set on the open file) and an export's lock of its
    folder are POSIX calls, and none of the commands is tested there."""
    if sys.platform != "win32":
        return None
    return (
        "the commands run on Linux (where they are tested) and macOS, not on native Windows: run them in "
        "WSL (the Windows Subsystem for Linux)"
    )


def _environment_refused(args: argparse.Namespace) -> str | None:
    """What is wrong with NUMPY_TRANSFORMER_BACKEND (unless --backend replaces it),
    NUMPY_TRANSFORMER_KERNELS or NUMPY_TRANSFORMER_FUSED, naming the variable, its value and the
    choices; None when nothing. The fused kernels' switch is checked on every backend: a value
    that a GPU run would refuse in its first step is refused before any work, wherever it runs."""
    from ...backend import BACKENDS, environment_choice
    from ...backend import ENV_VAR as BACKEND_VAR
    from ...kernels import ENV_VAR as KERNELS_VAR
    from ...kernels import KERNEL_SETS
    from ...kernels.cuda_fused import switched_on

    try:  # the model's own check, which would otherwise surface inside the first work asking for it
        if not getattr(args, "backend", None):
            environment_choice(BACKEND_VAR, BACKENDS, "numpy")
        environment_choice(KERNELS_VAR, KERNEL_SETS, "fast")
        switched_on()
    except ValueError as refused:
        return str(refused)
    return None


def _standard_output_fails() -> bool:
    """Whether standard output cannot take what is written to it (a full disk or a device that
    refuses it), the failure an OSError without a file name then came from."""
    try:
        sys.stdout.write("\n" if sys.stdout.isatty() else "")
        sys.stdout.flush()
    except OSError:
        return True
    except ValueError:  # closed
        return False
    return False
