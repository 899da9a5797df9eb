"""learn prove: the learner's own encoder-decoder trains a real translator, beside the textbook's.

The proof is the workbook's last milestone. The whole encoder-decoder of blocks.py (float64) is
trained on English number words to French ones, its gradients from the learner's block and layer
backwards wherever their file defines them, its weights updated by their optimiser (their adam_step)
where it does, then the same run on the textbook's own code; each
translates the task's unseen test numbers greedily. When every function the run called computes
what the textbook's computes, operation for operation, the two runs' weights are identical.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..backend import get_array_module, to_numpy
from ..presets import LABEL_SMOOTHING, LEARN_PROVE
from . import blocks
from .grading.diagnosis import loss_of
from .training import BlocksResult, blocks_using, train_blocks


@dataclass(frozen=True)
class Recipe:
    """The proof's run: its task and sizes, and the share of unseen test sentences it must translate
    exactly (the textbook's run reaches it at these settings; see docs/learn.md for its time)."""

    task: str = "numbers-en-fr"
    d_model: int = LEARN_PROVE.d_model
    N: int = LEARN_PROVE.N
    h: int = LEARN_PROVE.h
    d_ff: int = LEARN_PROVE.d_ff
    steps: int = 300
    batch_size: int = 64
    lr: float = 2e-3
    label_smoothing: float = LABEL_SMOOTHING
    seed: int = 1
    test_size: int = 1000
    target: float = 0.9


PROOF = Recipe()
MOST_STEPS = 10 * PROOF.steps  # learn prove --steps: ten times the proof's own; longer proves nothing more


def greedy_ids(params: blocks.Params, src: Any, N: int, h: int, ids: Any, max_length: int) -> list[list[int]]:
    """Greedy translations of the (B, S) source ids ``src`` with blocks.encoder_decoder_forward: each
    step runs the whole forward on the prefix so far (no key/value cache: the workbook's model is
    read, not served) and appends the most probable next token of its last position. ``ids``: the
    vocabulary's special ids (pad, bos, eos). Returns each sentence's ids, without bos and eos."""
    xp = get_array_module()
    rows = src.shape[0]
    prefix = xp.full((rows, 1), ids.bos, dtype=src.dtype)
    finished = xp.zeros(rows, dtype=bool)
    for _ in range(max_length):
        labels = xp.full(
            prefix.shape, ids.eos, dtype=src.dtype
        )  # the loss needs labels; the probabilities do not
        _, cache = blocks.encoder_decoder_forward(src, prefix, labels, params, N, h, ids.pad, 0.0)
        probs = loss_of(cache).probs.reshape(rows, prefix.shape[1], -1)[:, -1]
        chosen = xp.where(finished, ids.pad, probs.argmax(axis=-1))
        prefix = xp.concatenate([prefix, chosen[:, None].astype(src.dtype)], axis=1)
        finished = finished | (chosen == ids.eos)
        if bool(finished.all()):
            break
    translations = []
    for row in to_numpy(prefix[:, 1:]).tolist():
        translations.append(row[: row.index(ids.eos)] if ids.eos in row else [t for t in row if t != ids.pad])
    return translations


def exact_share(params: blocks.Params, task: Any, pairs: list[tuple[str, str]], recipe: Recipe) -> float:
    """The share of ``pairs`` whose greedy translation is the reference, token for token."""
    xp = get_array_module()
    exact = 0
    for start in range(0, len(pairs), 100):
        chunk = pairs[start : start + 100]
        references = task.encode_pairs(chunk)[1]
        batch = task.batch(chunk)
        longest = max(len(reference) for reference in references) + 2
        translations = greedy_ids(params, xp.asarray(batch.src), recipe.N, recipe.h, task.ids, longest)
        exact += sum(t == list(r) for t, r in zip(translations, references))
    return exact / max(len(pairs), 1)


@dataclass
class ProofResult:
    yours: BlocksResult
    yours_exact: float
    seconds: float  # the learner's run: training and translating
    textbook: BlocksResult | None  # None when the comparison is skipped
    textbook_exact: float | None
    largest_difference: float | None  # between the two runs' weights: 0.0 when identical

    @property
    def identical(self) -> bool:
        return self.largest_difference == 0.0


PROGRESS_EVERY = 50  # steps between two progress lines: six a run of the proof's 300 steps


def _progress_of(say: Callable[[str], None] | None, whose: str, steps: int) -> Callable[[int], None] | None:
    """A train_blocks on_step that says, every PROGRESS_EVERY steps and at the last, the steps done
    and the seconds since the run began (``whose``: "your run", "the textbook's run")."""
    if say is None:
        return None
    started = time.perf_counter()

    def on_step(done: int) -> None:
        if done % PROGRESS_EVERY == 0 or done == steps:
            say(f"{whose}: step {done} of {steps} ({time.perf_counter() - started:.0f} s)")

    return on_step


def prove(
    task: Any,
    functions: dict[str, Callable],
    recipe: Recipe = PROOF,
    compare: bool = True,
    say: Callable[[str], None] | None = None,
) -> ProofResult:
    """Train blocks.py's encoder-decoder on ``task`` with ``functions`` (the learner's, by textbook
    name, wrapped as training.guarded wraps them: their backwards, and their adam_step updating the
    weights where they wrote it) in place of the textbook's, then on the textbook's
    alone (unless ``compare`` is false); each translates ``recipe.test_size`` of the task's test pairs.
    ``say`` gets a progress line now and then (the steps done, the seconds so far, the translating)."""
    settings: dict[str, Any] = {
        "steps": recipe.steps,
        "batch_size": recipe.batch_size,
        "lr": recipe.lr,
        "d_model": recipe.d_model,
        "N": recipe.N,
        "h": recipe.h,
        "d_ff": recipe.d_ff,
        "seed": recipe.seed,
        "label_smoothing": recipe.label_smoothing,
        "dev_pairs": task.dev[:200],
    }
    test = list(task.test[: recipe.test_size])
    started = time.perf_counter()
    with blocks_using(functions):
        yours = train_blocks(
            task,
            **settings,
            on_step=_progress_of(say, "your run", recipe.steps),
            training_functions=functions,
        )
    if say is not None:
        say(f"your run: translating {len(test)} numbers it never saw")
    yours_exact = exact_share(yours.params, task, test, recipe)  # translated on the textbook's forward
    seconds = time.perf_counter() - started
    if not compare:
        return ProofResult(yours, yours_exact, seconds, None, None, None)
    textbook = train_blocks(task, **settings, on_step=_progress_of(say, "the textbook's run", recipe.steps))
    if say is not None:
        say(f"the textbook's run: translating {len(test)} numbers it never saw")
    textbook_exact = exact_share(textbook.params, task, test, recipe)
    xp = get_array_module()
    largest = max(float(xp.abs(yours.params[key] - textbook.params[key]).max()) for key in textbook.params)
    return ProofResult(yours, yours_exact, seconds, textbook, textbook_exact, largest)
