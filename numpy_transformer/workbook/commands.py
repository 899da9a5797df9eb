"""learn train and learn prove as the learner meets them: whose functions each run is made of, and
what each says about them.

The command line (``numpy-transformer learn``) parses the flags and hands in what only the toolkit
has: a training run's exit code and dev results, a task, a finished run's settings. What the runs
are made of and every sentence about the learner's code are decided here."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..kernels import using_kernels
from .exercises.curriculum import BLOCKS, TRAINING_BY_NAME
from .grading.verdicts import FunctionVerdict
from .optimiser import OptimiserSettings, adam_update, first_update
from .proof import MESSAGES, MOST_STEPS_TIMES, NUMBERS, ProofResult, Recipe, Translations, prove
from .training import TRAINED_BLOCKS, Diverged, blocks_using, guarded, learner_functions, train_blocks

COMPARISON = (
    "what this shows: your functions train a translator. Both runs are identical when your "
    "functions compute what the textbook's compute, operation for operation; other orders of "
    "the same sums drift apart a little. It does not prove your gradients right: Adam divides "
    "out a constant factor (a sum where a mean belongs trains almost as well), so a run can "
    "look fine with a wrong function. `learn check` is the proof."
)
PROOF_SHOWS = (
    "what this shows: your backwards train a whole translator end to end. Identical weights mean "
    "your functions compute what the textbook's compute on this run, operation for operation. A "
    "good translation alone would not prove a gradient right (Adam divides out a constant factor): "
    "learn check is the proof of each one."
)


class LearnerTraining:
    """learn train on the learner's file: their functions, loaded and graded once; the model run on
    them (the "learner" kernel set); blocks.py's encoder-decoder trained on their blocks; and the
    lines that say which of their functions each run used."""

    def __init__(self, path: str | Path) -> None:
        self.path = path
        self.blocks: dict[str, Callable] = {}  # their block backwards (blocks.py's names), done or wrong
        self.functions, self.verdicts = learner_functions(path, self.blocks)
        self.ran: set[str] = set()  # those of their functions the model's run called
        self.yours = [v.name for v in self.verdicts if v.status in ("done", "wrong") and v.name not in BLOCKS]
        self.trained_blocks = [name for name in TRAINED_BLOCKS if name in self.blocks]
        self.rungs = [name for name in TRAINING_BY_NAME if name in self.blocks]  # their optimiser's functions

    @property
    def trains_blocks(self) -> bool:
        """Whether blocks.py's encoder-decoder is trained after the package's model: on their blocks,
        or with their optimiser (the package's model updates its weights with the textbook's)."""
        return bool(self.trained_blocks or self.rungs)

    def introduction(self) -> list[str]:
        """What the run is made of, said before it starts: their functions (the wrong ones named),
        their blocks, those checked but not trained, those left to the textbook."""
        wrong = [v.name for v in self.verdicts if v.status == "wrong"]
        yours = [
            name for name in self.yours if name not in self.rungs
        ]  # the optimiser's: a line of their own
        lines = [
            f"your functions: {', '.join(yours)}"
            + (f" ({', '.join(w for w in wrong if w in yours)} wrong)" if set(wrong) & set(yours) else "")
            if yours
            else "training on the textbook alone: the file defines no backward of its own that runs"
        ]
        if self.trained_blocks:
            lines.append(
                f"your blocks: {', '.join(self.trained_blocks)} (the package's model is built of the textbook's "
                "modules; blocks.py's encoder-decoder trains on them after it)"
            )
        if self.rungs:
            wrong_rungs = [name for name in self.rungs if name in wrong]
            updates = [name for name in ("adam_step", "adamw_step") if name in self.rungs]
            package = (
                f"the package's model updates its weights with your {' and '.join(updates)}, its clipping and "
                "schedule the package's"
                if updates
                else "the package's model keeps the package's optimiser"
            )
            lines.append(
                f"your optimiser: {', '.join(self.rungs)}"
                + (f" ({', '.join(wrong_rungs)} wrong)" if wrong_rungs else "")
                + f" ({package}; blocks.py's encoder-decoder trains with all of them after it)"
            )
        checked_only = [name for name in self.blocks if name not in TRAINED_BLOCKS and name not in self.rungs]
        if checked_only:
            lines.append(
                f"checked by learn check, not trained: your {', '.join(checked_only)} (blocks.py's model has none)"
            )
        raised = [v.name for v in self.verdicts if v.status == "error"]
        if raised:
            lines.append(f"left to the textbook (an error in learn check): {', '.join(raised)}")
        return lines

    def fresh_out(self) -> Path:
        """The run's directory when none is given: runs/<stem>-N beside the learner's file, N the first
        number not taken, so that no run replaces another."""
        file = Path(self.path)
        folder = file.expanduser().resolve().parent / "runs"
        number = 1
        while (folder / f"{file.stem}-{number}").exists():
            number += 1
        return folder / f"{file.stem}-{number}"

    @contextmanager
    def on_their_functions(self) -> Iterator[None]:
        """Inside the block the model runs on their functions (guarded, each that runs added to
        ``ran``), its Adam update on their adam_step and adamw_step, the textbook's wherever they wrote
        none."""
        theirs = guarded(
            {**self.functions, **{name: self.blocks[name] for name in self.rungs}}, self.path, self.ran
        )
        kernels = {name: function for name, function in theirs.items() if name not in self.rungs}
        rungs = {name: function for name, function in theirs.items() if name in self.rungs}
        update = (
            adam_update(rungs) if {"adam_step", "adamw_step"} & set(rungs) else None
        )  # else the textbook's
        with using_kernels(kernels, adam_update=update):
            yield

    def first_update(self) -> None:
        """Their adam_step and adamw_step, those the package's model updates its weights with, called
        once on a small parameter before the run makes anything: a RuntimeError saying what is wrong
        with what one returns (or where their code raised)."""
        updates: dict[str, Callable] = {
            name: self.blocks[name] for name in ("adam_step", "adamw_step") if name in self.rungs
        }
        if updates:
            first_update(guarded(updates, self.path))

    @property
    def mine(self) -> list[str]:
        """Their functions the model's run called."""
        return [name for name in self.yours if name in self.ran]

    def what_ran(self) -> list[str]:
        """After the run: which of their functions it called, and which this model never uses."""
        if not self.yours:
            return []
        unused = [name for name in self.yours if name not in self.ran]
        ran = (
            f"the model ran your {', '.join(self.mine)}"
            if self.mine
            else "the model ran none of your functions"
        )
        return [
            ran
            + (f"; not used by this model: {', '.join(unused)}" if unused else "")
            + "; the rest was the textbook's"
        ]

    @staticmethod
    def textbook_run(out: str) -> str:
        return f"the textbook's own code on the same seed, for comparison ({out}):"

    @staticmethod
    def comparison(yours: dict[str, Any] | None, textbook: dict[str, Any] | None) -> list[str]:
        """The two runs' last dev results side by side (``yours``, ``textbook``: a dev record of each
        run's log, None where it has none), and what that does and does not show."""
        if not yours or not textbook:
            return []
        return [
            f"dev after {yours['step']} steps: yours exact {yours['exact_match']:.3f} "
            f"BLEU {yours['bleu']:.2f}; the textbook's exact {textbook['exact_match']:.3f} "
            f"BLEU {textbook['bleu']:.2f} (same seed)",
            COMPARISON,
        ]

    def train_blocks(self, task: Any, compare: bool, **settings: Any) -> str:
        """blocks.py's encoder-decoder trained on ``task`` (``settings``: train_blocks' steps, sizes,
        optimiser settings and the rest): on their block functions (their encoder_decoder_backward, or
        the textbook's calling their blocks and layers) and their optimiser's, then on the textbook's
        alone where ``compare``; the line with both teacher-forced dev results. Their code raising is a
        RuntimeError saying where."""
        ran: set[str] = set()
        theirs = guarded({**self.functions, **self.blocks}, self.path, ran)
        started = time.perf_counter()

        def names() -> list[str]:
            return [name for name in (*TRAINED_BLOCKS, *TRAINING_BY_NAME) if name in ran] or ["nothing"]

        try:
            with blocks_using(theirs):
                yours = train_blocks(task, **settings, training_functions=theirs)
        except Diverged as diverged:
            wrong = [v.name for v in self.verdicts if v.status == "wrong" and v.name in ran]
            said = f" ({', '.join(wrong)} wrong in learn check)" if wrong else ""
            raise Diverged(f"{diverged}, on your {', '.join(names())}{said}") from None
        seconds = time.perf_counter() - started
        textbook = train_blocks(task, **settings) if compare else None
        line = (
            f"the whole encoder-decoder of blocks.py on your {', '.join(names())}: dev loss {yours.dev_loss:.2f}, "
            f"token accuracy {yours.accuracy:.2f}"
        )
        if textbook is not None:
            line += f"; the textbook's: {textbook.dev_loss:.2f}, {textbook.accuracy:.2f} (same seed, "
        else:
            line += " ("
        return f"{line}{yours.steps} steps, {seconds:.1f} s)"


def run_optimiser(train: dict[str, Any], d_model: int, steps: int) -> OptimiserSettings:
    """The optimiser settings of a toolkit run (``train``: its saved train settings), for blocks.py's
    encoder-decoder trained beside it: its rate's schedule, clipping, Adam or AdamW and weight decay."""
    adamw = train.get("optimizer") == "adamw"
    return OptimiserSettings(
        lr=float(train["lr"]),
        weight_decay=float(train.get("weight_decay") or 0.0) if adamw else 0.0,
        clip=float(train.get("clip") or 0.0),
        schedule=str(train.get("schedule", "constant")),
        warmup=int(train.get("warmup") or 0),
        total=steps,
        min_lr=float(train.get("min_lr") or 0.0),
        d_model=d_model,
        factor=float(train.get("factor") or 1.0),
    )


def proof_recipe(steps: int | None, real_text: bool = False) -> Recipe:
    """The proof's recipe, on the numbers or on ``real_text`` (a corpus's short program messages),
    with ``steps`` training steps where given (fewer is a rehearsal)."""
    recipe = MESSAGES if real_text else NUMBERS
    most = MOST_STEPS_TIMES * recipe.steps
    if steps is not None and not 1 <= steps <= most:
        raise ValueError(
            f"--steps must be an integer in [1, {most}] (the proof's own: {recipe.steps}), got {steps}"
        )
    return recipe if steps is None else replace(recipe, steps=steps)


def prove_file(
    path: str | Path,
    task: Any,
    recipe: Recipe = NUMBERS,
    compare: bool = True,
    say: Callable[[str], None] | None = None,
) -> tuple[list[str], int]:
    """learn prove on the learner's file: the proof (see proof.prove) on their block and layer
    functions, and its report: the lines to say and the exit code (0 when proven). Their code raising
    in the run is a RuntimeError saying where; ``say`` gets the progress lines."""
    blocks: dict[str, Callable] = {}
    functions, verdicts = learner_functions(path, blocks)
    failing = [v for v in verdicts if v.status in ("wrong", "error")]
    ran: set[str] = set()
    result = prove(task, guarded({**functions, **blocks}, path, ran), recipe, compare=compare, say=say)
    return _proof_report(result, recipe, sorted(ran), failing)


def _scores(translated: Translations) -> str:
    return f"exact on {translated.exact:.1%}, BLEU {translated.bleu:.1f}, chrF {translated.chrf:.1f}"


def _target(recipe: Recipe) -> str:
    """The recipe's target in words: "90% exact", "BLEU 15"."""
    parts = [f"{recipe.target_exact:.0%} exact"] if recipe.target_exact is not None else []
    parts += [f"BLEU {recipe.target_bleu:g}"] if recipe.target_bleu is not None else []
    return " and ".join(parts)


def _reached(recipe: Recipe, translated: Translations) -> bool:
    return (recipe.target_exact is None or translated.exact >= recipe.target_exact) and (
        recipe.target_bleu is None or translated.bleu >= recipe.target_bleu
    )


def _proof_report(
    result: ProofResult, recipe: Recipe, mine: Sequence[str], failing: Sequence[FunctionVerdict]
) -> tuple[list[str], int]:
    """The proof's lines (what ran, which of the learner's functions learn check finds an error in and
    what it is, how well each run translates, some of the learner's translations, the verdict, what it
    shows) and its exit code: 0 when proven (nothing wrong or failing in learn check, the target
    reached, the weights the textbook's)."""
    wrong = [v.name for v in failing if v.status == "wrong"]
    errors = [v for v in failing if v.status == "error"]
    yours = result.yours_translated
    line = (
        f"blocks.py's encoder-decoder on your {', '.join(mine)} (the rest the textbook's)"
        if mine
        else "blocks.py's encoder-decoder on the textbook alone: FILE defines no backward this model runs"
    )
    lines = [
        f"{line}, {recipe.steps} steps of {recipe.task}: {_scores(yours)} on {len(result.test)} {recipe.unit} "
        f"it never saw ({result.seconds:.0f} s, training and translating)"
    ]
    lines += [
        f"left to the textbook (learn check finds an error in it): your {v.name}: {v.message}" for v in errors
    ]
    if result.textbook_translated is not None:
        same = (
            "identical"
            if result.identical
            else f"not identical (they differ by up to {result.largest_difference:.2g})"
        )
        lines.append(
            f"the textbook's run on the same seed: {_scores(result.textbook_translated)}; the weights are {same}"
        )
    if recipe.shown:
        lines.append(f"your translations of {recipe.unit} it never saw (the reference after =):")
        shown = zip(result.test[: recipe.shown], yours.texts)
        lines += [
            f"  {source}  ->  {translation}  (= {reference})" for (source, reference), translation in shown
        ]
    found = [f"{', '.join(wrong)} wrong"] if wrong else []
    found += [f"an error in {', '.join(v.name for v in errors)}"] if errors else []
    if found:
        verdict = f"not a proof yet: learn check finds {' and '.join(found)}"
    elif not mine:
        verdict = "nothing of yours was proven: write the workbook's backwards first"
    elif not _reached(recipe, yours):
        verdict = f"not yet: the target is {_target(recipe)}"
    elif result.textbook is not None and not result.identical:
        verdict = (
            f"the target of {_target(recipe)} is reached, but your run is not the textbook's: some function "
            "sums in another order, or carries a mistake too small for learn check's tolerance"
        )
    else:
        verdict = f"proven: your encoder-decoder translates, {_target(recipe)} or better"
    return [*lines, verdict, PROOF_SHOWS], 0 if verdict.startswith("proven") else 1
