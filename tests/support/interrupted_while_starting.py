"""Ctrl-C at the moment the command starting imports MODULE: ``python interrupted_while_starting.py
HOW MODULE ARGS...``, HOW ``-m`` (as ``python -m numpy_transformer ARGS`` starts) or ``script`` (as
the ``numpy-transformer`` console script does: its module imported, then main())."""

from __future__ import annotations

import importlib.abc
import os
import runpy
import signal
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType


class InterruptAt(importlib.abc.MetaPathFinder):
    """Sends this process SIGINT (Ctrl-C) when ``module`` is about to be imported."""

    def __init__(self, module: str) -> None:
        self.module = module

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name == self.module:
            os.kill(os.getpid(), signal.SIGINT)
        return None  # the usual finders import it


if __name__ == "__main__":
    how, module, *argv = sys.argv[1:]
    sys.meta_path.insert(0, InterruptAt(module))
    if how == "-m":
        sys.argv = ["-m", *argv]  # what Python's -m sets while it imports the package
        runpy.run_module("numpy_transformer", run_name="__main__", alter_sys=True)
    else:
        sys.argv = [os.path.join(os.path.dirname(sys.executable), "numpy-transformer"), *argv]
        from numpy_transformer.translator.cli import main

        sys.exit(main())
