"""A live training run written into a checkpoint, and read back to continue: resumed as it was
saved (``train --resume``, Trainer.resume) or fine-tuned from (``train --from``, Trainer.create).

What a checkpoint of a run holds: the model, the run's settings, its task's recipe and vocabularies,
and its RunState (run_checkpoint). A resume reads it back once (resumed_run): the state, the settings,
the model and the task rebuilt (checkpoint.restore_model_and_task); a
fine-tune takes the run's model, tokenizer and vocabularies and the settings given
(fine_tune_start).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

from ...model import Transformer
from ...moved import MOVED, refuse_moved_name
from ..config import ModelConfig, TrainConfig, fine_tune_settings
from ..tasks import TranslationTask, make_task
from .checkpoint import (
    CheckpointError,
    check_meta,
    load_checkpoint,
    load_meta,
    resolve_path,
    restore_model_and_task,
    saved_step,
    saved_vocabularies,
    serialized_tokenizer,
    task_recipe,
)
from .directory import BEST_NAME, evaluation_checkpoints, resume_checkpoint
from .state import RunState


def run_checkpoint(
    model: Transformer, task: TranslationTask, config: TrainConfig, state: RunState
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A checkpoint's arrays and metadata: the model, the run's settings, its task's recipe and
    vocabularies, and its state."""
    state_arrays, state_meta = state.to_checkpoint()
    arrays = {**{f"param/{name}": value for name, value in model.state_dict().items()}, **state_arrays}
    meta = {
        "model": asdict(model.config),
        "train": asdict(config),
        "task": task_recipe(task, config),
        **state_meta,
        "src_vocab": task.src_vocab.itos,
        "tgt_vocab": task.tgt_vocab.itos,
    }
    return arrays, meta


class ResumedRun(NamedTuple):
    """A run read back from its checkpoint to continue (resumed_run): all that Trainer.resume needs."""

    model: Transformer
    task: TranslationTask
    config: TrainConfig  # as saved, but for the length and the threads given
    state: RunState
    checkpoint: Path  # the file read


def resumed_run(
    path: str | Path, ranks: int, steps: int | None, time_budget: float | None, threads: int | None
) -> ResumedRun:
    """The run saved in the checkpoint ``path`` (a file, or a run directory's newest complete
    checkpoint: its model.npz, or an evaluation checkpoint newer than it), read once:
    its state, its settings as saved but for the length given (``steps`` or ``time_budget``) and
    ``threads``, its model and its task rebuilt. Refused when it holds an average or an imported
    model, or another number of ``ranks`` saved it."""
    checkpoint, last = resume_checkpoint(path), resolve_path(path)
    why = ""
    if checkpoint != last:  # a run directory whose model.npz is missing, unreadable or older
        try:
            why = (
                f"{last} holds step {load_meta(last)['step']}, older than the step {saved_step(checkpoint)} that "
                f"{checkpoint.name} holds"
            )
        except CheckpointError as error:  # missing, or torn
            why = str(error).removeprefix("checkpoint ")
    try:
        arrays, meta = load_checkpoint(checkpoint)
    except CheckpointError as error:
        if not why:
            raise
        raise CheckpointError(f"--resume: {why}, and its newest evaluation {error}") from None
    if why:
        warnings.warn(
            f"--resume: {why}: resuming from {checkpoint}, the run's newest complete checkpoint", stacklevel=3
        )
    held = "an imported model" if "imported_from" in meta else "an average" if "averaged_from" in meta else ""
    if held:  # an average's optimiser state is its last checkpoint's, which its weights did not reach
        raise ValueError(
            f"--resume: {checkpoint} holds {held}, not a training run: fine-tune it "
            f"into a run of its own with train --from {path} --data FILE.tsv --out NEW_RUN"
        )
    state = RunState.from_checkpoint(arrays, meta, checkpoint)
    refuse_torn_kept(checkpoint.parent, state)
    if state.ranks != ranks:
        raise ValueError(
            f"checkpoint {checkpoint} was trained on {state.ranks} rank(s) and this run has "
            f"{ranks}: resume it with mpiexec -n {state.ranks}"
            + ("" if state.ranks > 1 else " or without mpiexec")
        )
    config = TrainConfig(**meta["train"]).resolve(saved=True)  # as saved: a new run's refusals aside
    if steps is not None or time_budget is not None:  # the one given replaces the run's length
        config = replace(config, steps=steps, time_budget=time_budget).resolve(saved=True)
    if threads is not None:
        config = replace(config, threads=threads)
    if config.checkpoints_kept:
        refuse_unrecorded_later(checkpoint.parent, state, config.steps)
    model, task = restore_model_and_task(checkpoint, arrays, meta)
    return ResumedRun(model, task, config, state, checkpoint)


def refuse_torn_kept(directory: Path, state: RunState) -> None:
    """The checkpoints a resumed run in ``directory`` reads again or keeps (its evaluation checkpoints,
    which it averages at its end, and best.npz, which it compares the average with) read, before any
    step: one that cannot be read (a torn copy) is refused naming it, never found at the end of the
    run. One removed by hand is left out of the average, as a run leaves it out."""
    for path in [*(directory / name for name in state.kept), directory / BEST_NAME]:
        if path.exists():
            try:
                load_meta(path)
            except CheckpointError as error:
                raise CheckpointError(
                    f"--resume: {error}: the run keeps it (to average, or as its best); remove it, and the "
                    "run goes on without it, or put a whole copy back"
                ) from None


def refuse_unrecorded_later(directory: Path, state: RunState, steps: int | None) -> None:
    """A resumed run that keeps evaluation checkpoints writes step-N.npz as it reaches step N: a file of
    such a name in ``directory``, of a step after the resumed one and up to the run's ``steps`` (None:
    a time budget's, any), and not among those its checkpoint records (a copy of the user's, or one
    of a later run resumed from an earlier checkpoint), is refused naming it before any step, never
    written over."""
    last = steps if steps is not None else float("inf")
    reached = [
        path
        for path in evaluation_checkpoints(directory)
        if path.name not in state.kept and state.step < int(path.stem.removeprefix("step-")) <= last
    ]
    if reached:
        named = ", ".join(str(path) for path in reached)
        raise ValueError(
            f"--resume: {named} {'is' if len(reached) == 1 else 'are'} not among the evaluation checkpoints "
            f"the run recorded at step {state.step}, and the resumed run writes its own step-N.npz as it "
            "reaches step N: move or rename it first (a name such as step-0000400-mine.npz is never "
            "touched by a run)"
        )


def fine_tune_start(
    given: TrainConfig, config: TrainConfig, model: ModelConfig | Mapping[str, Any] | None
) -> tuple[dict[str, Any], TranslationTask, TrainConfig]:
    """(the model's configuration, the task, the run's settings) of a fine-tune from ``config.from_run``
    (config.fine_tune_settings refuses the settings given that the run decides otherwise). The corpus
    is split with the run's own tokenizer."""
    path = config.from_run
    assert path is not None
    try:
        meta = load_meta(path)
        check_meta(path, meta)
    except CheckpointError as error:
        raise CheckpointError(f"--from {path}: {error}") from None
    tokenizer, vocabularies = serialized_tokenizer(meta["task"]), saved_vocabularies(path, meta)
    sizes, config = fine_tune_settings(given, config, model, meta)
    assert config.max_length is not None  # the run's tables bound it
    task = make_task(
        None,
        config.data,
        config.seed,
        config.tokenizer,
        config.max_length,
        config.dev,
        config.test,
        serialized_tokenizer=tokenizer,
        vocabularies=vocabularies,
        vocab_size=config.vocab_size,
    )
    # tokens outside the vocabularies of the run it starts from become <unk>: said, with their share
    pairs = getattr(task, "train_pairs", [])[:UNKNOWN_SAMPLE]
    unknown, total = task.unknown_tokens(pairs)
    if unknown:
        counted = f" in its first {UNKNOWN_SAMPLE:,} training pairs" if len(pairs) == UNKNOWN_SAMPLE else ""
        warnings.warn(
            f"--data {config.data}: {unknown / total:.1%} of its tokens ({unknown:,} of {total:,}{counted}) "
            f"are outside the vocabulary of --from {path} and become <unk>",
            stacklevel=2,
        )
    return sizes, task, config


UNKNOWN_SAMPLE = 10_000  # the training pairs of a fine-tune's corpus counted for its share of <unk>


def __getattr__(name: str) -> NoReturn:
    """A name that moved out of this module (saved_state, saved_settings: resumed_run) answers with its new place."""
    if f"{__name__}.{name}" in MOVED:
        refuse_moved_name(__name__, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
