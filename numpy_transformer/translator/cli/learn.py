"""``numpy-transformer learn``: the workbook's commands (start, check, status, hint, train, prove)."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...kernels import using_kernels
from ...machine import require
from ...presets import LEARN_TRAIN
from ..distributed import launched_rank
from ..run.directory import CONFIG_NAME
from .train import add_train_arguments, require_evaluation_library, run_train, train_settings

if TYPE_CHECKING:
    from ...workbook import LearnerTraining

# learn train without --task, --data or --config: the copy task on a small model, under a minute on 2 cores
LEARN_DEFAULTS = {
    "train.task": "copy",
    "train.steps": 400,
    "train.lr": 3e-3,
    "train.warmup": 50,
    **{f"model.{name}": value for name, value in LEARN_TRAIN.settings().items()},
}


WORKBOOK_FILE = "the workbook's file: my_backprop.py (or .ipynb) as learn start wrote it, your code in it"


def add_learn(commands: argparse._SubParsersAction) -> None:
    learn = commands.add_parser(
        "learn", help="learn backprop by writing it: a workbook of every backward pass"
    )
    actions = learn.add_subparsers(dest="action", required=True)
    p = actions.add_parser("start", help="write a workbook (my_backprop.py and README.md) into DIR")
    p.add_argument("directory", metavar="DIR", help="the folder to write the workbook into (made if missing)")
    p.add_argument(
        "--overwrite", action="store_true", help="replace an existing workbook, your work included"
    )
    p.add_argument(
        "--notebook", action="store_true", help="write the workbook as a Jupyter notebook, my_backprop.ipynb"
    )
    p = actions.add_parser(
        "check", help="grade the backward passes FILE (.py or .ipynb) defines (every one, or those NAMEd)"
    )
    p.add_argument("file", metavar="FILE", help=WORKBOOK_FILE)
    p.add_argument("names", metavar="NAME", nargs="*", help="textbook names, e.g. layer_norm_backward")
    p = actions.add_parser(
        "status",
        help="the ladder of exercises FILE is on: done (passes learn check), ready (the exercises it "
        "builds on done) or locked (behind which), and the next to do",
    )
    p.add_argument("file", metavar="FILE", help=WORKBOOK_FILE)
    p = actions.add_parser("hint", help="the next hint for exercise NAME (one step further each time)")
    p.add_argument("file", metavar="FILE", help=WORKBOOK_FILE)
    p.add_argument("name", metavar="NAME", help="an exercise's textbook name, e.g. layer_norm_backward")
    p = actions.add_parser(
        "prove",
        help="the last milestone: blocks.py's encoder-decoder on FILE's backwards (blocks and layers, "
        "wherever it defines them) learns English number words to French and translates 1,000 "
        "numbers it never saw, beside the textbook's identical run; with --corpus, real program messages",
    )
    p.add_argument("file", metavar="FILE", help=WORKBOOK_FILE)
    p.add_argument(
        "--corpus",
        metavar="TSV",
        default=None,
        help="the proof on real text: learn the short messages of this corpus of program messages "
        "(source<TAB>target lines; python examples/debian_messages.py builds one offline) and translate "
        "200 of them it never saw, with BLEU and chrF",
    )
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="training steps (default: the proof's own, 300 on the numbers, 1000 with --corpus); fewer is a "
        "rehearsal",
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
    p.add_argument("file", metavar="FILE", help=WORKBOOK_FILE)
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
    """learn start / check / status / hint / train / prove: refusals are one line and exit 2, the learner's own code
    failing to import is one line (theirs, with their file:line) and exit 1; Ctrl-C ends with 130, no traceback."""
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
            report, code = workbook.run_check(args.file, args.names, say=_on_stderr("check"))
            print(report)
            return code
        if args.action == "status":
            print(workbook.format_status(workbook.status(args.file, say=_on_stderr("status"))))
            return 0
        if args.action == "hint":
            print(workbook.next_hint(args.file, args.name))
            return 0
        if args.action == "prove":
            return _learn_prove(args, say)
        require_evaluation_library()
        if not args.config and not args.resume and not {"train.task", "train.data"} & set(vars(args)):
            for dest, value in LEARN_DEFAULTS.items():  # a small task, unless one is chosen or saved
                if not hasattr(args, dest):
                    setattr(args, dest, value)
        # a run that cannot start is refused before their file runs, and before a word about it
        train_settings(args)
        learner = workbook.LearnerTraining(args.file)
    except (FileExistsError, FileNotFoundError, NotADirectoryError) as refused:
        print(f"numpy-transformer learn {args.action}: error: {refused}", file=sys.stderr)
        return 2
    except workbook.LearnerCodeError as theirs:
        print(f"numpy-transformer learn {args.action}: {theirs}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"numpy-transformer learn {args.action}: interrupted", file=sys.stderr)
        return 130
    for line in learner.introduction():
        say(line)
    try:  # their optimiser's first update, tried before the run makes its directory
        learner.first_update()
    except RuntimeError as error:  # their code raised (guarded says where), or returned the wrong shapes
        print(f"numpy-transformer learn train: {error}; nothing was run", file=sys.stderr)
        return 1
    if args.out is None:  # beside the learner's file, a fresh folder for every run: nothing is replaced
        args.out = str(learner.fresh_out())
    with learner.on_their_functions():
        code = run_train(args)
    for line in learner.what_ran():
        say(line)
    if code == 0 and args.compare and learner.mine:
        code = _learn_compare(args, say)
    if code != 0 or not learner.trains_blocks or not speak:  # the blocks' run is serial: rank 0 alone
        return code
    return _learn_blocks(args, learner, say)


def _learn_compare(args: argparse.Namespace, say: Callable[..., None]) -> int:
    """The textbook's own run on the same seed beside the learner's, and both dev results."""
    from ... import workbook

    yours_dev = _last_dev(Path(args.out))
    textbook_args = argparse.Namespace(**vars(args))
    textbook_args.out = str(Path(args.out) / "textbook")
    textbook_args.show = 0
    # a resumed run whose first session skipped the comparison starts the textbook's afresh, with
    # the settings the learner's run was saved with
    textbook_args.resume = args.resume and Path(textbook_args.out).is_dir()
    if args.resume and not textbook_args.resume:
        textbook_args.config = str(Path(args.out) / CONFIG_NAME)
    say(workbook.LearnerTraining.textbook_run(textbook_args.out))
    # on the textbook alone, as the learner's run is (its functions in place of the textbook's): the
    # kernels would round otherwise, and two runs of equal functions would drift apart
    with using_kernels("reference"):
        code = run_train(textbook_args)
    if code == 0:
        for line in workbook.LearnerTraining.comparison(yours_dev, _last_dev(Path(textbook_args.out))):
            say(line)
    return code


def _learn_blocks(args: argparse.Namespace, learner: LearnerTraining, say: Callable[..., None]) -> int:
    """blocks.py's encoder-decoder trained on the learner's blocks and optimiser with the run's task, steps,
    sizes and optimiser settings (workbook.LearnerTraining.train_blocks), beside the textbook's unless
    --no-compare."""
    from ... import workbook
    from ..run.checkpoint import load_meta, trained_task

    meta = load_meta(args.out)
    model, train = meta["model"], meta["train"]
    task = trained_task(args.out, meta)
    try:
        line = learner.train_blocks(
            task,
            args.compare,
            steps=int(meta["step"]),
            **{key: model[key] for key in ("d_model", "N", "h", "d_ff")},
            **{key: train[key] for key in ("batch_size", "lr", "seed", "label_smoothing")},
            dev_pairs=task.dev[: train["eval_size"]],
            optimiser_settings=workbook.run_optimiser(train, int(model["d_model"]), int(meta["step"])),
        )
    except KeyboardInterrupt:
        print("numpy-transformer learn train: interrupted", file=sys.stderr)
        return 130
    except RuntimeError as error:  # their code raised (guarded says where)
        print(f"numpy-transformer learn train: blocks.py's encoder-decoder: {error}", file=sys.stderr)
        return 1
    say(line)
    return 0


def _last_dev(out: Path) -> dict[str, Any] | None:
    """The last dev evaluation a run logged, or None."""
    from ..plots import read_log
    from ..run.directory import LOG_NAME

    try:
        records = read_log(out / LOG_NAME)  # a torn line skipped, as everywhere a log is read
    except OSError:
        return None
    dev = [r for r in records if r.get("split") == "dev" and "exact_match" in r]
    return dev[-1] if dev else None


def _on_stderr(action: str) -> Callable[[str], None]:
    """What says a progress line of learn ``action`` (learn prove's, a wait on the learner's code), on
    stderr as a training run's progress bar is: stdout keeps the result alone."""

    def say(line: str) -> None:
        print(f"learn {action}: {line}", file=sys.stderr, flush=True)

    return say


def _learn_prove(args: argparse.Namespace, say: Callable[..., None]) -> int:
    """The proof (workbook.prove_file): the learner's encoder-decoder trains a real translator, beside the
    textbook's identical run, and the verdict says what that does and does not show."""
    from ... import workbook
    from ..corpora import read_tsv
    from ..tasks import PairsTask, make_task

    require("learn prove's BLEU and chrF", "sacrebleu")  # said before any work, the learner's file included
    recipe = workbook.proof_recipe(args.steps, real_text=args.corpus is not None)
    if args.corpus is None:
        task = make_task(recipe.task, seed=0, tokenizer=recipe.tokenizer)
    else:
        train, dev, test = workbook.SHORT_MESSAGES.choose(
            read_tsv(args.corpus, "--corpus"), f"--corpus {args.corpus}"
        )
        task = PairsTask(train, dev, test, recipe.tokenizer)
    progress = None if args.no_progress or say is not print else _on_stderr("prove")
    try:
        lines, code = workbook.prove_file(args.file, task, recipe, compare=args.compare, say=progress)
    except RuntimeError as error:  # their code raised (guarded says where)
        print(f"numpy-transformer learn prove: {error}", file=sys.stderr)
        return 1
    for line in lines:
        say(line)
    return code
