"""learn prove: the learner's own encoder-decoder trains a real translator, beside the textbook's.

The proof is the workbook's last milestone, in two parts. The whole encoder-decoder of blocks.py
(float64) is trained on English number words to French ones (NUMBERS), or on short program
messages of a real corpus (MESSAGES: see messages.py), its gradients from the learner's block and
layer backwards wherever their file defines them, its weights updated by their optimiser (their
adam_step) where it does, then the same run on the textbook's own code; each translates the task's
unseen test sentences greedily, scored by exact match, BLEU and chrF. When every function the run
called computes what the textbook's computes, operation for operation, the two runs' weights are
identical.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..backend import get_array_module, to_numpy
from ..machine import blas_threads
from ..presets import LABEL_SMOOTHING, LEARN_PROVE, LEARN_PROVE_MESSAGES
from ..scores import translation_scores
from . import blocks
from .grading.diagnosis import loss_of
from .training import BlocksResult, blocks_using, train_blocks


@dataclass(frozen=True)
class Recipe:
    """A proof's run: what it learns (``task``, its test sentences called ``unit`` in what it says,
    split into tokens by the toolkit's ``tokenizer``), its sizes and training, and its target: the
    share of unseen test sentences it must translate exactly (``target_exact``) and the BLEU it
    must reach (``target_bleu``), each where given; the textbook's run reaches them at these
    settings (see docs/learn.md for its time). ``shown``: how many of the test sentences'
    translations the report prints."""

    task: str = "numbers-en-fr"
    unit: str = "numbers"
    tokenizer: str = "word"
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
    target_exact: float | None = 0.9
    target_bleu: float | None = None
    shown: int = 0


NUMBERS = Recipe()
# the proof on real text: the short program messages of a corpus (messages.SHORT_MESSAGES chooses them)
MESSAGES = Recipe(
    task="short program messages",
    unit="messages",
    d_model=LEARN_PROVE_MESSAGES.d_model,
    N=LEARN_PROVE_MESSAGES.N,
    h=LEARN_PROVE_MESSAGES.h,
    d_ff=LEARN_PROVE_MESSAGES.d_ff,
    steps=1000,
    test_size=200,
    target_exact=None,
    target_bleu=20.0,  # the textbook's run reaches 26.6 on the corpus of docs/learn.md
    shown=8,
)
MOST_STEPS_TIMES = 10  # learn prove --steps: up to ten times the proof's own; longer proves nothing more


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


@dataclass(frozen=True)
class Translations:
    """A run's greedy translations of the test pairs, and their scores against the references."""

    texts: list[str]
    exact: float  # the share translated token for token as the reference
    bleu: float
    chrf: float


def translate(params: blocks.Params, task: Any, pairs: list[tuple[str, str]], recipe: Recipe) -> Translations:
    """The greedy translations of ``pairs`` (on the textbook's forward), a hundred at a time, and
    their exact share (token for token), BLEU and chrF."""
    xp = get_array_module()
    exact = 0
    texts: list[str] = []
    for start in range(0, len(pairs), 100):
        chunk = pairs[start : start + 100]
        references = task.encode_pairs(chunk)[1]
        batch = task.batch(chunk)
        longest = max(len(reference) for reference in references) + 2
        translations = greedy_ids(params, xp.asarray(batch.src), recipe.N, recipe.h, task.ids, longest)
        exact += sum(t == list(r) for t, r in zip(translations, references))
        texts += [task.tokenizer.detokenize(task.tgt_vocab.decode(ids)) for ids in translations]
    scores = translation_scores(texts, [target for _, target in pairs])
    return Translations(texts, exact / max(len(pairs), 1), scores.bleu, scores.chrf)


@dataclass
class ProofResult:
    test: list[tuple[str, str]]  # the unseen pairs both runs translated
    yours: BlocksResult
    yours_translated: Translations
    seconds: float  # the learner's run: training and translating
    textbook: BlocksResult | None  # None when the comparison is skipped
    textbook_translated: Translations | None
    largest_difference: float | None  # between the two runs' weights: 0.0 when identical

    @property
    def identical(self) -> bool:
        return self.largest_difference == 0.0


PROGRESS_EVERY = 50  # steps between two progress lines: six a run of the numbers' 300 steps


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
    recipe: Recipe = NUMBERS,
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

    def run(
        whose: str, training_functions: dict[str, Any] | None = None
    ) -> tuple[BlocksResult, Translations]:
        # one BLAS thread: the model is small, and a second thread on a shared machine spins more than
        # it works (a step of the messages' model: 0.5 s on one thread, 4 to 8 s on two, 7 other jobs running)
        with blas_threads(1):
            trained = train_blocks(
                task,
                **settings,
                on_step=_progress_of(say, whose, recipe.steps),
                training_functions=training_functions,
            )
            if say is not None:
                say(f"{whose}: translating {len(test)} {recipe.unit} it never saw")
            return trained, translate(trained.params, task, test, recipe)  # on the textbook's forward

    started = time.perf_counter()
    with blocks_using(functions):
        yours, yours_translated = run("your run", functions)
    seconds = time.perf_counter() - started
    if not compare:
        return ProofResult(test, yours, yours_translated, seconds, None, None, None)
    textbook, textbook_translated = run("the textbook's run")
    xp = get_array_module()
    largest = max(float(xp.abs(yours.params[key] - textbook.params[key]).max()) for key in textbook.params)
    return ProofResult(test, yours, yours_translated, seconds, textbook, textbook_translated, largest)
