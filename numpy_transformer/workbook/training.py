"""learn train: the learner's functions as kernels, and the blocks' encoder-decoder trained on them."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy

from .. import functional
from ..backend import get_array_module
from . import blocks
from .exercises.curriculum import BLOCKS, BY_NAME, TRAINING_BY_NAME
from .grading import check
from .grading.verdicts import FunctionVerdict
from .loading import describe_error, learners_function, load_learner
from .optimiser import OptimiserSettings, training_optimiser


def learner_functions(
    path: str | Path, block_table: dict[str, Callable] | None = None
) -> tuple[dict[str, Callable], list[FunctionVerdict]]:
    """The functions of the learner's file that the "learner" kernel set runs: every exercise they
    wrote (done or wrong: a wrong backward is theirs to see fail), with their forward where they
    wrote one. Exercises still to do, or whose code raised, stay the textbook's. Their block
    backwards (blocks.py's names) and their training rungs (the optimiser's: see
    optimiser.training_optimiser), done or wrong, go into ``block_table`` where one is given."""
    module = load_learner(path)
    verdicts = check(path, module=module)
    table: dict[str, Callable] = {}
    for verdict in verdicts:
        if verdict.name in TRAINING_BY_NAME:
            own_rung = learners_function(module, verdict.name)
            if verdict.status in ("done", "wrong") and own_rung is not None and block_table is not None:
                block_table[verdict.name] = own_rung
            continue
        own_block = learners_function(module, verdict.name) if verdict.name in BLOCKS else None
        if verdict.status in ("done", "wrong") and own_block is not None and block_table is not None:
            block_table[verdict.name] = own_block
        if verdict.status in ("done", "wrong") and verdict.name not in BLOCKS:
            exercise = BY_NAME[verdict.name]
            own_backward = learners_function(
                module, exercise.backward
            )  # defined, or assigned over the textbook's
            if own_backward is not None:
                table[exercise.backward] = own_backward
            own_forward = learners_function(module, exercise.forward)
            if own_forward is not None:
                table[exercise.forward] = own_forward
    return table, verdicts


def guarded(
    functions: dict[str, Callable], path: str | Path, ran: set[str] | None = None
) -> dict[str, Callable]:
    """The learner's functions, each raising a RuntimeError that says what their code raised or
    exited with (with their file:line) instead of a traceback of the model around it; the name of
    each that runs is added to ``ran``."""
    file = Path(path).expanduser().resolve()

    said: set[tuple[str, str]] = set()

    def guard(name: str, function: Callable) -> Callable:
        def call(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread() is not threading.main_thread():  # warnings' filters are global
                return function(*args, **kwargs)
            with warnings.catch_warnings(record=True) as caught:  # NumPy's NaN warnings: say whose
                warnings.simplefilter("always", RuntimeWarning)
                result = function(*args, **kwargs)
            for warning in caught:
                where = f"{Path(warning.filename).name}:{warning.lineno}"
                if (name, str(warning.message)) not in said:
                    said.add((name, str(warning.message)))
                    warnings.warn(f"your {name}: {warning.message} ({where})", UserWarning, stacklevel=2)
            return result

        def run(*args: Any, **kwargs: Any) -> Any:
            if ran is not None:
                ran.add(name)
            try:
                return call(*args, **kwargs)
            except KeyboardInterrupt:
                raise
            except BaseException as error:  # SystemExit included: their code ending the run is theirs to see
                raise RuntimeError(f"your {name} raised {describe_error(error, file)}") from None

        run.__name__ = name
        return run

    wrapped = {name: guard(name, function) for name, function in functions.items()}
    for name, function in functions.items():  # their functions calling each other: guarded and counted too
        space = getattr(function, "__globals__", None)
        if isinstance(space, dict) and _their_module(space, file) and space.get(name) is function:
            space[name] = wrapped[name]
    return wrapped


def _their_module(space: dict[str, Any], file: Path) -> bool:
    """Whether ``space`` is the namespace of the learner's own file (loaded from ``file``), never a
    module of the package: the textbook's functions stand in for what a file leaves out, and a run
    must leave the package's modules as it found them."""
    package = str(space.get("__name__", "")).split(".")[0] == functional.__name__.split(".")[0]
    where = space.get("__file__")
    return not package and isinstance(where, str) and Path(where).resolve() == file


TRAINED_BLOCKS = ("feed_forward_backward", "embedding_with_positions_backward", "encoder_block_backward",
                  "decoder_block_backward", "encoder_stack_backward", "decoder_stack_backward",
                  "projection_loss_backward", "encoder_decoder_backward")  # fmt: skip


@contextmanager
def blocks_using(functions: dict[str, Callable]) -> Iterator[None]:
    """numpy_transformer.workbook.blocks calling ``functions`` (textbook names: blocks or layers) instead of
    the textbook's wherever it calls them by name; its globals restored on the way out.

    While one of ``functions`` runs, blocks.py is the textbook's own again: what the learner's code
    calls (``blocks.encoder_block_backward`` wrapped, ``textbook()``) reaches the textbook's code,
    never back into theirs."""
    space = vars(blocks)
    saved = {name: space[name] for name in functions if name in space}
    theirs: dict[str, Callable] = {}

    def on_the_textbook(function: Callable) -> Callable:
        def call(*args: Any, **kwargs: Any) -> Any:
            space.update(saved)
            try:
                return function(*args, **kwargs)
            finally:
                space.update(theirs)

        call.__name__ = function.__name__
        return call

    theirs.update({name: on_the_textbook(functions[name]) for name in saved})
    try:
        space.update(theirs)
        yield
    finally:
        space.update(saved)


class Diverged(RuntimeError):
    """blocks.py's encoder-decoder's weights became NaN or infinite: the run stopped there."""


@dataclass
class BlocksResult:
    dev_loss: float
    accuracy: float  # teacher-forced: the share of the dev targets (padding aside) predicted first
    steps: int
    params: blocks.Params  # the trained weights


def train_blocks(
    task: Any,
    *,
    steps: int,
    batch_size: int,
    lr: float,
    d_model: int,
    N: int,
    h: int,
    d_ff: int,
    seed: int,
    label_smoothing: float,
    dev_pairs: Sequence[tuple[str, str]],
    on_step: Callable[[int], None] | None = None,
    training_functions: Mapping[str, Callable] | None = None,
    optimiser_settings: OptimiserSettings | None = None,
) -> BlocksResult:
    """Train blocks.encoder_decoder_forward's model (float64, blocks.init_params) on ``task``'s
    training batches, the gradients from blocks.encoder_decoder_backward as blocks.py reads it now
    (see blocks_using), and evaluate it teacher-forced on ``dev_pairs``: the mean loss (without label
    smoothing) and the token accuracy. The weights are updated by optimiser.training_optimiser: the
    training rungs of ``training_functions`` (the learner's, by name) where it has them, else the
    textbook's, as ``optimiser_settings`` says (by default Adam at the constant rate ``lr``, betas
    0.9 and 0.98, no clipping).
    ``on_step(n)`` is called after each step, n the steps done (a progress line's)."""
    xp = get_array_module()
    pad = task.ids.pad
    params = blocks.init_params(
        numpy.random.default_rng(seed), len(task.src_vocab), len(task.tgt_vocab), d_model, d_ff, N,
        scale=d_model**-0.5,
    )  # fmt: skip
    updates = training_optimiser(training_functions or {}, optimiser_settings or OptimiserSettings(lr=lr))
    for step in range(steps):
        batch = task.train_batch(step, batch_size)
        _, cache = blocks.encoder_decoder_forward(
            batch.src, batch.tgt_in, batch.tgt_out, params, N, h, pad, label_smoothing
        )
        grads = blocks.encoder_decoder_backward(1.0, cache)
        for key, param in params.items():
            grad = grads.get(key) if isinstance(grads, dict) else None
            if grad is None or getattr(grad, "shape", None) != param.shape:
                got = "nothing" if grad is None else f"shape {getattr(grad, 'shape', None)}"
                raise RuntimeError(f"the gradient of {key} is {got}, not shape {param.shape}")
        params = updates.step(
            params, {key: xp.asarray(grads[key], dtype=params[key].dtype) for key in params}
        )
        broken = next((key for key, value in params.items() if not bool(xp.isfinite(value).all())), None)
        if broken is not None:
            raise Diverged(f"diverged at step {step + 1}: the weights of {broken} are NaN or infinite")
        if on_step is not None:
            on_step(step + 1)
    total = correct = tokens = 0.0
    for start in range(0, len(dev_pairs), 100):
        batch = task.batch(dev_pairs[start : start + 100])
        loss, cache = blocks.encoder_decoder_forward(
            batch.src, batch.tgt_in, batch.tgt_out, params, N, h, pad, 0.0
        )
        output = cache.output.loss
        predicted = output.probs.argmax(axis=-1)
        valid = output.valid
        n = float(valid.sum())
        total += float(loss) * n
        correct += float(((predicted == output.targets) & valid).sum())
        tokens += n
    return BlocksResult(total / max(tokens, 1.0), correct / max(tokens, 1.0), steps, params)
