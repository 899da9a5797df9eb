"""Ctrl-C while the ``numpy-transformer`` command starts: imported first by the package, before the
modules that take the command's first second to load."""

import os
import signal
import sys


def _interrupted_while_starting(signum: int, frame: object) -> None:
    """Ctrl-C while the command's modules load: one line and exit status 130, never a traceback of
    the imports (the command's main() hands Ctrl-C back to Python once they are loaded)."""
    sys.stderr.write("numpy-transformer: interrupted while starting; nothing was done\n")
    sys.stderr.flush()
    os._exit(130)


# the command starting (python -m numpy_transformer, or the numpy-transformer script), not a library
# user, and Ctrl-C not ignored (a background job's)
if (
    getattr(sys, "argv", [""])[:1] == ["-m"] or os.path.basename(sys.argv[0]).startswith("numpy-transformer")
) and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _interrupted_while_starting)
