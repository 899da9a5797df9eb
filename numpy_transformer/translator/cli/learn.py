"""``numpy-transformer learn``: the workbook's commands (start, check, status, hint, train, prove)."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...kernels import using_kernels
from ..distributed import launched_rank
from ..run_directory import CONFIG_NAME
from .train import add_train_arguments, require_evaluation_library, run_train

# learn train without --task, --data or --config: the copy task on a small model, under a minute on 2 cores
LEARN_DEFAULTS = {
    "train.task": "copy",
    "train.steps": 400,
    "train.lr": 3e-3,
    "train.warmup": 50,
    "model.d_model": 32,
    "model.N": 1,
    "model.h": 2,
    "model.d_ff": 64,
    "model.dropout": 0.0,
}


def add_learn(commands: argparse._SubParsersAction) -> None:
    learn = commands.add_parser(
        "learn", help="learn backprop by writing it: a workbook of every backward pass"
    )
    actions = learn.add_subparsers(dest="action", required=True)
    p = actions.add_parser("start", help="write a workbook (my_backprop.py and README.md) into DIR")
    p.add_argument("directory", metavar="DIR")
    p.add_argument(
        "--overwrite", action="store_true", help="replace an existing workbook, your work included"
    )
    p.add_argument(
        "--notebook", action="store_true", help="write the workbook as a Jupyter notebook, my_backprop.ipynb"
    )
    p = actions.add_parser(
        "check", help="grade the backward passes FILE (.py or .ipynb) defines (every one, or those NAMEd)"
    )
    p.add_argument("file", metavar="FILE")
    p.add_argument("names", metavar="NAME", nargs="*", help="textbook names, e.g. layer_norm_backward")
    p = actions.add_parser(
        "status",
        help="the ladder of exercises FILE is on: done (passes learn check), ready (the exercises it "
        "builds on done) or locked (behind which), and the next to do",
    )
    p.add_argument("file", metavar="FILE")
    p = actions.add_parser("hint", help="the next hint for exercise NAME (one step further each time)")
    p.add_argument("file", metavar="FILE")
    p.add_argument("name", metavar="NAME")
    p = actions.add_parser(
        "prove",
        help="the last milestone: blocks.py's encoder-decoder on FILE's backwards (blocks and layers, "
        "wherever it defines them) learns English number words to French and translates 1,000 "
        "numbers it never saw, beside the textbook's identical run",
    )
    p.add_argument("file", metavar="FILE")
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="training steps (default: the proof's own, 300); fewer is a rehearsal",
    )
    p.add_argument(
        "--no-compare", dest="compare", action="store_false", help="skip the textbook's run beside yours"
    )
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress lines (by default one every 50 steps, with the seconds so far, on stderr)",
    )
    p = actions.add_parser(
        "train",
        help="train a model on FILE's functions wherever it defines them (options as train's; without "
        "--task, --data or --config: the copy task, 400 steps of a one-layer model of width 32), then "
        "the textbook's own code on the same seed beside it; where FILE has block backwards too, "
        "blocks.py's encoder-decoder trained on them the same way, beside the textbook's blocks",
    )
    p.add_argument("file", metavar="FILE")
    add_train_arguments(p, None)
    for action in p._actions:  # learn train's own defaults, not train's
        if action.dest in LEARN_DEFAULTS:
            text = re.sub(r"\s*\(?default.*$", "", action.help or "", flags=re.S)
            value = LEARN_DEFAULTS[action.dest]
            action.help = f"{text} (learn train's default without --task, --data or --config: {value})"
        if action.dest == "out":
            action.help = "run directory (default: runs/FILESTEM-N beside FILE, N the first number free)"
    p.add_argument(
        "--no-compare",
        dest="compare",
        action="store_false",
        help="skip the second run on the textbook's own code (same seed) that learn train prints beside yours "
        "(the blocks' too)",
    )


def run_learn(args: argparse.Namespace) -> int:
    """learn start / check / status / hint / train: refusals are one line and exit 2, the learner's own code failing
    to import is one line (theirs, with their file:line) and exit 1; Ctrl-C ends with 130, no traceback."""
    from ... import workbook

    speak = launched_rank() == 0  # under mpiexec every rank loads the file, rank 0 speaks for them
    say = print if speak else (lambda *a, **k: None)
    try:
        if args.action == "start":
            written = workbook.start(args.directory, overwrite=args.overwrite, notebook=args.notebook)
            print(
                f"wrote {written[0]} and {written[1]}; start with: numpy-transformer learn check {written[0]}"
            )
            return 0
        if args.action == "check":
            report, code = workbook.run_check(args.file, args.names)
            print(report)
            return code
        if args.action == "status":
            print(workbook.format_status(workbook.status(args.file)))
            return 0
        if args.action == "hint":
            print(workbook.next_hint(args.file, args.name))
            return 0
        if args.action == "prove":
            return _learn_prove(args, say)
        require_evaluation_library()
        block_table: dict[str, Callable] = {}
        table, verdicts = workbook.learner_functions(args.file, block_table)
    except (FileExistsError, FileNotFoundError, NotADirectoryError) as refused:
        print(f"numpy-transformer learn {args.action}: error: {refused}", file=sys.stderr)
        return 2
    except workbook.LearnerCodeError as theirs:
        print(f"numpy-transformer learn {args.action}: {theirs}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"numpy-transformer learn {args.action}: interrupted", file=sys.stderr)
        return 130
    from ...kernels import get_kernels, set_kernels, set_learner_functions

    yours = [
        v.name for v in verdicts if v.status in ("done", "wrong") and v.name not in workbook.exercises.BLOCKS
    ]
    wrong = [v.name for v in verdicts if v.status == "wrong"]
    trained_blocks = [name for name in workbook.training.TRAINED_BLOCKS if name in block_table]
    checked_only = [name for name in block_table if name not in workbook.training.TRAINED_BLOCKS]
    say(
        f"your functions: {', '.join(yours)}"
        + (f" ({', '.join(w for w in wrong if w in yours)} wrong)" if set(wrong) & set(yours) else "")
        if yours
        else "training on the textbook alone: the file defines no backward of its own that runs"
    )
    if trained_blocks:
        say(
            f"your blocks: {', '.join(trained_blocks)} (the package's model is built of the textbook's "
            "modules; blocks.py's encoder-decoder trains on them after it)"
        )
    if checked_only:
        say(
            f"checked by learn check, not trained: your {', '.join(checked_only)} (blocks.py's model has none)"
        )
    raised = [v.name for v in verdicts if v.status == "error"]
    if raised:
        say(f"left to the textbook (your code raised in check): {', '.join(raised)}")
    if not args.config and not args.resume and not {"train.task", "train.data"} & set(vars(args)):
        for dest, value in LEARN_DEFAULTS.items():  # a small task, unless one is chosen or saved
            if not hasattr(args, dest):
                setattr(args, dest, value)
    if args.out is None:  # beside the learner's file, a fresh folder for every run: nothing is replaced
        args.out = str(_fresh_learn_out(Path(args.file)))
    ran: set[str] = set()
    previous = get_kernels()
    set_learner_functions(workbook.training.guarded(table, args.file, ran))
    set_kernels("learner")
    try:
        code = run_train(args)
    finally:
        set_kernels(previous)
        set_learner_functions({})
    mine = [name for name in yours if name in ran]
    unused = [name for name in yours if name not in ran]
    if yours:
        say(
            f"the model ran your {', '.join(mine) or 'nothing'}"
            + (f"; not used by this model: {', '.join(unused)}" if unused else "")
            + "; the rest was the textbook's"
        )
    if code == 0 and args.compare and mine:
        code = _learn_compare(args, say)
    if code != 0 or not trained_blocks or not speak:  # the blocks' run is serial: rank 0 alone
        return code
    return _learn_blocks(args, block_table, table, say)


def _learn_compare(args: argparse.Namespace, say: Callable[..., None]) -> int:
    """The textbook's own run on the same seed beside the learner's, and both dev results."""
    yours_dev = _last_dev(Path(args.out))
    textbook_args = argparse.Namespace(**vars(args))
    textbook_args.out = str(Path(args.out) / "textbook")
    textbook_args.show = 0
    # a resumed run whose first session skipped the comparison starts the textbook's afresh, with
    # the settings the learner's run was saved with
    textbook_args.resume = args.resume and Path(textbook_args.out).is_dir()
    if args.resume and not textbook_args.resume:
        textbook_args.config = str(Path(args.out) / CONFIG_NAME)
    say(f"the textbook's own code on the same seed, for comparison ({textbook_args.out}):")
    # on the textbook alone, as the learner's run is (its functions in place of the textbook's): the
    # kernels would round otherwise, and two runs of equal functions would drift apart
    with using_kernels("reference"):
        code = run_train(textbook_args)
    textbook_dev = _last_dev(Path(textbook_args.out))
    if code == 0 and yours_dev and textbook_dev:
        say(
            f"dev after {yours_dev['step']} steps: yours exact {yours_dev['exact_match']:.3f} "
            f"BLEU {yours_dev['bleu']:.2f}; the textbook's exact {textbook_dev['exact_match']:.3f} "
            f"BLEU {textbook_dev['bleu']:.2f} (same seed)"
        )
        say(
            "what this shows: your functions train a translator. Both runs are identical when your "
            "functions compute what the textbook's compute, operation for operation; other orders of "
            "the same sums drift apart a little. It does not prove your gradients right: Adam divides "
            "out a constant factor (a sum where a mean belongs trains almost as well), so a run can "
            "look fine with a wrong function. `learn check` is the proof."
        )
    return code


def _learn_blocks(
    args: argparse.Namespace,
    block_table: dict[str, Callable],
    table: dict[str, Callable],
    say: Callable[..., None],
) -> int:
    """blocks.py's encoder-decoder trained on the run's task, steps and sizes: on the learner's block
    functions (their encoder_decoder_backward, or the textbook's calling their blocks and layers), then
    on the textbook's alone (unless --no-compare), and both teacher-forced dev results on one line."""
    import time

    from ... import workbook
    from ..checkpoint import load_meta, trained_task

    meta = load_meta(args.out)
    model, train = meta["model"], meta["train"]
    task = trained_task(args.out, meta)
    settings = {
        "steps": int(meta["step"]),
        "batch_size": train["batch_size"],
        "lr": train["lr"],
        "d_model": model["d_model"],
        "N": model["N"],
        "h": model["h"],
        "d_ff": model["d_ff"],
        "seed": train["seed"],
        "label_smoothing": train["label_smoothing"],
        "dev_pairs": task.dev[: train["eval_size"]],
    }
    ran: set[str] = set()
    theirs = workbook.training.guarded({**table, **block_table}, args.file, ran)
    started = time.perf_counter()
    try:
        with workbook.training.blocks_using(theirs):
            yours = workbook.train_blocks(task, **settings)
        seconds = time.perf_counter() - started
        textbook = workbook.train_blocks(task, **settings) if args.compare else None
    except KeyboardInterrupt:
        print("numpy-transformer learn train: interrupted", file=sys.stderr)
        return 130
    except RuntimeError as error:  # their code raised (guarded says where)
        print(f"numpy-transformer learn train: blocks.py's encoder-decoder: {error}", file=sys.stderr)
        return 1
    names = [name for name in workbook.training.TRAINED_BLOCKS if name in ran] or ["nothing"]
    line = (
        f"the whole encoder-decoder of blocks.py on your {', '.join(names)}: dev loss {yours.dev_loss:.2f}, "
        f"token accuracy {yours.accuracy:.2f}"
    )
    if textbook is not None:
        line += f"; the textbook's: {textbook.dev_loss:.2f}, {textbook.accuracy:.2f} (same seed, "
    else:
        line += " ("
    say(f"{line}{yours.steps} steps, {seconds:.1f} s)")
    return 0


def _fresh_learn_out(file: Path) -> Path:
    """runs/<stem>-N beside the learner's file, N the first number not taken."""
    folder = file.expanduser().resolve().parent / "runs"
    number = 1
    while (folder / f"{file.stem}-{number}").exists():
        number += 1
    return folder / f"{file.stem}-{number}"


def _last_dev(out: Path) -> dict[str, Any] | None:
    """The last dev evaluation a run logged, or None."""
    from ..plots import read_log
    from ..run_directory import LOG_NAME

    try:
        records = read_log(out / LOG_NAME)  # a torn line skipped, as everywhere a log is read
    except OSError:
        return None
    dev = [r for r in records if r.get("split") == "dev" and "exact_match" in r]
    return dev[-1] if dev else None


def _say_progress(line: str) -> None:
    """A progress line of learn prove, on stderr as a training run's progress bar is: stdout keeps
    the result alone."""
    print(f"learn prove: {line}", file=sys.stderr, flush=True)


def _learn_prove(args: argparse.Namespace, say: Callable[..., None]) -> int:
    """The proof (workbook.proof): the learner's encoder-decoder trains a real translator, beside the
    textbook's identical run, and the verdict says what that does and does not show."""
    from dataclasses import replace

    from ... import workbook
    from ...workbook.proof import MOST_STEPS, PROOF, prove
    from ..tasks import make_task

    if args.steps is not None and not 1 <= args.steps <= MOST_STEPS:
        raise ValueError(
            f"--steps must be an integer in [1, {MOST_STEPS}] (the proof's own: {PROOF.steps}), got {args.steps}"
        )
    recipe = PROOF if args.steps is None else replace(PROOF, steps=args.steps)
    task = make_task(recipe.task, seed=0)  # before the learner's file runs: a missing library is said first
    block_table: dict[str, Callable] = {}
    table, verdicts = workbook.learner_functions(args.file, block_table)
    wrong = [v.name for v in verdicts if v.status == "wrong"]
    ran: set[str] = set()
    theirs = workbook.training.guarded({**table, **block_table}, args.file, ran)
    try:
        progress = None if args.no_progress or say is not print else _say_progress
        result = prove(task, theirs, recipe, compare=args.compare, say=progress)
    except RuntimeError as error:  # their code raised (guarded says where)
        print(f"numpy-transformer learn prove: {error}", file=sys.stderr)
        return 1
    mine = sorted(ran)
    n = min(recipe.test_size, len(task.test))
    line = (
        f"blocks.py's encoder-decoder on your {', '.join(mine)} (the rest the textbook's)"
        if mine
        else "blocks.py's encoder-decoder on the textbook alone: FILE defines no backward this model runs"
    )
    say(
        f"{line}, {recipe.steps} steps of {recipe.task}: exact on {result.yours_exact:.1%} of {n} numbers "
        f"it never saw ({result.seconds:.0f} s, training and translating)"
    )
    if result.textbook is not None and result.textbook_exact is not None:
        same = (
            "identical"
            if result.identical
            else f"not identical (they differ by up to {result.largest_difference:.2g})"
        )
        say(
            f"the textbook's run on the same seed: exact on {result.textbook_exact:.1%}; the weights are {same}"
        )
    reached = result.yours_exact >= recipe.target
    if not mine:
        verdict = "nothing of yours was proven: write the workbook's backwards first"
    elif wrong:
        verdict = f"not a proof yet: learn check finds {', '.join(wrong)} wrong"
    elif not reached:
        verdict = f"not yet: the target is {recipe.target:.0%} exact"
    elif result.textbook is not None and not result.identical:
        verdict = (
            f"the target of {recipe.target:.0%} is reached, but your run is not the textbook's: some function "
            "sums in another order, or carries a mistake too small for learn check's tolerance"
        )
    else:
        verdict = f"proven: your encoder-decoder translates, {recipe.target:.0%} exact or better"
    say(verdict)
    say(
        "what this shows: your backwards train a whole translator end to end. Identical weights mean "
        "your functions compute what the textbook's compute on this run, operation for operation. A "
        "good translation alone would not prove a gradient right (Adam divides out a constant factor): "
        "learn check is the proof of each one."
    )
    return 0 if verdict.startswith("proven") else 1
