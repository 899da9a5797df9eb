"""A picture of a failed check: |analytic - numeric| over each failing tensor (matplotlib, imported
only when a picture is asked for)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy

from ..backend import Array, to_numpy
from .report import GradcheckResult


def draw_errors(
    result: GradcheckResult, variables: Mapping[str, Array], analytic: Mapping[str, Array], path: Path
) -> str:
    """A PNG of |analytic - numeric| over each failing tensor's checked entries (or, in fast mode,
    the located entries marked on the analytic gradient). Needs matplotlib, imported only here."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return f"(no picture saved to {path}: matplotlib is not installed; pip install matplotlib)"
    failing = [r for r in result.reports if not r.passed]
    figure, axes = plt.subplots(1, len(failing), figsize=(5 * len(failing), 4), squeeze=False)
    for axis, report in zip(axes[0], failing):
        grad = to_numpy(analytic[report.name]).astype(numpy.float64)
        error = report.error_map if report.error_map is not None else numpy.zeros(grad.shape)
        for index, a, n in report.worst:
            error[index] = abs(a - n)
        image = error.reshape(-1, grad.shape[-1]) if grad.ndim >= 2 else error.reshape(1, -1)
        shown = axis.imshow(image, aspect="auto", cmap="magma", interpolation="nearest")
        figure.colorbar(shown, ax=axis, label="|analytic - numeric|")
        axis.set_title(f"{report.name}: |analytic - numeric| (rows: leading axes flattened)")
    figure.tight_layout()
    try:  # a failure to save is said in the message: it must never hide the failed check itself
        path.parent.mkdir(parents=True, exist_ok=True)
        # the format named, so that a name without a suffix is the file written (not name.png)
        figure.savefig(path, dpi=100, format=path.suffix[1:].lower() or "png")
    except (OSError, ValueError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        return f"(no picture saved to {path}: {reason})"
    finally:
        plt.close(figure)
    return str(path)
