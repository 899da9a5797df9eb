"""A live training run written into a checkpoint, and read back to continue: resumed as it was
saved (``train --resume``, Trainer.resume) or fine-tuned from (``train --from``, Trainer.create).

What a checkpoint of a run holds: the model, the run's settings, its task's recipe and vocabularies,
and its RunState (run_checkpoint). A resume reads the state and the settings back (saved_state,
saved_settings) and rebuilds the model and the task (checkpoint.restore_model_and_task); a
fine-tune takes the run's model, tokenizer and vocabularies and the settings given
(fine_tune_start).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from ...model import Transformer
from ..config import ModelConfig, TrainConfig, fine_tune_settings
from ..tasks import TranslationTask, make_task
from .checkpoint import (
    CheckpointError,
    check_meta,
    load_checkpoint,
    load_meta,
    resolve_path,
    saved_vocabularies,
    serialized_tokenizer,
    task_recipe,
)
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


def saved_state(path: str | Path, ranks: int) -> tuple[dict[str, Any], dict[str, Any], RunState]:
    """The checkpoint ``path`` of a run to resume (its arrays and metadata) and its RunState: refused
    when it holds an average or an imported model, or another number of ``ranks`` saved it."""
    arrays, meta = load_checkpoint(path)
    held = "an imported model" if "imported_from" in meta else "an average" if "averaged_from" in meta else ""
    if held:  # an average's optimiser state is its last checkpoint's, which its weights did not reach
        raise ValueError(
            f"--resume: {resolve_path(path)} holds {held}, not a training run: fine-tune it "
            f"into a run of its own with train --from {path} --data FILE.tsv --out NEW_RUN"
        )
    state = RunState.from_checkpoint(arrays, meta, path)
    saved_ranks = state.ranks
    if saved_ranks != ranks:
        raise ValueError(
            f"checkpoint {resolve_path(path)} was trained on {saved_ranks} rank(s) and this run has "
            f"{ranks}: resume it with mpiexec -n {saved_ranks}"
            + ("" if saved_ranks > 1 else " or without mpiexec")
        )
    return arrays, meta, state


def saved_settings(
    meta: dict[str, Any], steps: int | None, time_budget: float | None, threads: int | None
) -> TrainConfig:
    """The resumed run's settings: as its checkpoint's metadata ``meta`` saved them, but for the
    length given (``steps`` or ``time_budget``) and ``threads``."""
    config = TrainConfig(**meta["train"]).resolve(saved=True)  # as saved: a new run's refusals aside
    if steps is not None or time_budget is not None:  # the one given replaces the run's length
        config = replace(config, steps=steps, time_budget=time_budget).resolve(saved=True)
    if threads is not None:
        config = replace(config, threads=threads)
    return config


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
        serialized_tokenizer=serialized_tokenizer(meta["task"]),
        vocabularies=saved_vocabularies(path, meta),
        vocab_size=config.vocab_size,
    )
    _warn_unknown_share(task, path, config.data)
    return sizes, task, config


def _warn_unknown_share(task: Any, path: str | Path, data: str | None, sample: int = 10_000) -> None:
    """Warn, with the share, when the corpus of a fine-tune holds tokens outside the vocabularies of
    the run it starts from (they become <unk>): counted over up to ``sample`` training pairs."""
    pairs = getattr(task, "train_pairs", [])[:sample]
    unknown = total = 0
    for source, target in pairs:
        for vocab, tokens in (
            (task.src_vocab, task.tokenizer.tokenize_source(source)),
            (task.tgt_vocab, task.tokenizer.tokenize(target)),
        ):
            unknown += len(vocab.encode(tokens)[1])
            total += len(tokens)
    if unknown:
        warnings.warn(
            f"--data {data}: {unknown / total:.1%} of its tokens ({unknown:,} of {total:,}"
            f"{' in its first ' + format(sample, ',') + ' training pairs' if len(pairs) == sample else ''}) "
            f"are outside the vocabulary of --from {path} and become <unk>",
            stacklevel=3,
        )
