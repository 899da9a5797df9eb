"""``numpy-transformer`` / ``python -m numpy_transformer``: train, translate, evaluate, plot, import."""

from __future__ import annotations

import argparse
import json
import re
import sys
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from ..backend import set_backend
from ..files import silence
from ..machine import restart_with_openblas_timeout, tune_cpu
from .checkpoint import FILENAME, CheckpointError
from .config import (
    DTYPES,
    MODEL_SIZES,
    ModelConfig,
    TrainConfig,
    add_arguments,
    given_settings,
    read_config_file,
    resumable_fields,
    resumable_flags,
    resume_conflicts,
)
from .distributed import launched_rank

if TYPE_CHECKING:
    from .distributed import Communicator
    from .training import Trainer

T = TypeVar("T")

DEFAULT_OUT = "runs/numbers-en-fr"
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
TRANSLATE_BATCH = 256  # sentences decoded together by translate
BROKEN_PIPE = 141  # the exit code when the reader of standard output has gone: 128 + SIGPIPE, as cat's


def _int_at_least(minimum: int, description: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {description}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {description}, got {value}")
        return value

    return parse


_positive_int = _int_at_least(1, "a positive integer")
_non_negative_int = _int_at_least(0, "an integer >= 0")


def _float_in(description: str, accept: Callable[[float], bool]) -> Callable[[str], float]:
    """An argparse type: a float for which ``accept`` holds, else one line naming the value."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {description}, got {text!r}") from None
        if not accept(value):
            raise argparse.ArgumentTypeError(f"expected {description}, got {value}")
        return value

    return parse


_positive_float = _float_in("a positive finite number", lambda value: 0 < value < float("inf"))
_non_negative_float = _float_in("a finite number >= 0", lambda value: 0 <= value < float("inf"))
_probability = _float_in("a number in (0, 1]", lambda value: 0 < value <= 1)
# length ** alpha stays finite for any length up to 10**30 (alpha 0.6 to 2 are the usual choices)
_length_penalty = _float_in("a number in [0, 10]", lambda value: 0 <= value <= 10)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose refusals are one line, pointing to --help instead of printing the
    usage, and that takes only whole option names (an abbreviation is refused, never guessed)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{**kwargs, "allow_abbrev": False})

    def error(self, message: str) -> NoReturn:
        # under mpiexec every rank parses the same arguments: rank 0 alone says what is wrong
        said = f"{self.prog}: error: {message} (see {self.prog} --help)\n" if launched_rank() == 0 else None
        self.exit(2, said)


def _add_backend(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--backend",
        choices=["numpy", "cupy"],
        default=None,
        help="array backend (default: $NUMPY_TRANSFORMER_BACKEND, else numpy); cupy runs on a CUDA GPU",
    )


def _add_train(commands: argparse._SubParsersAction) -> None:
    _add_train_arguments(commands.add_parser("train", help="train a translation model"), DEFAULT_OUT)


def _add_train_arguments(p: argparse.ArgumentParser, default_out: str | None) -> None:
    _add_backend(p)
    p.add_argument(
        "--config",
        metavar="FILE.toml",
        help="settings from a TOML file of [model] and [train] tables (a run's config.toml is one); "
        "flags given beside it win",
    )
    add_arguments(p.add_argument_group("model"), ModelConfig, "model")
    add_arguments(p.add_argument_group("training"), TrainConfig, "train")
    run = p.add_argument_group("the run directory")
    run.add_argument("--out", default=default_out, help=f"run directory (default: {default_out})")
    run.add_argument(
        "--resume",
        action="store_true",
        help=f"continue the run saved in --out as it was saved ({', '.join(resumable_flags())} may change)",
    )
    run.add_argument("--overwrite", action="store_true", help="replace the run saved in --out with a new one")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument(
        "--show",
        type=_non_negative_int,
        default=5,
        help="translations of unseen test sources to print at the end",
    )


class _DefaultInt(int):
    """A flag's default value, told apart from the same value typed (which is a plain int)."""


class _DefaultFloat(float):
    """A flag's default value, told apart from the same value typed (which is a plain float)."""


STRATEGY_OPTIONS = {  # the flags that apply to one strategy only
    "beam": ("beam_width", "length_penalty", "beam_style"),
    "sample": ("temperature", "top_k", "top_p", "seed"),
}


def _typed(args: argparse.Namespace, name: str) -> bool:
    value = getattr(args, name, None)
    if name == "beam_style":
        return value not in (None, "default")
    return value is not None and not isinstance(value, (_DefaultInt, _DefaultFloat))


def _add_decode_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--strategy",
        choices=["greedy", "sample", "beam"],
        default=None,
        help="default: beam for a subword (bpe, marian) model, as the paper evaluates; greedy for the others",
    )
    p.add_argument("--beam-width", type=_positive_int, default=_DefaultInt(4))
    p.add_argument(
        "--length-penalty",
        type=_length_penalty,
        default=_DefaultFloat(1.0),
        help="beam search's length penalty alpha: a translation's log-probability is divided by its length "
        "** alpha (default 1: per token, generate()'s default too; 0: none)",
    )
    p.add_argument(
        "--beam-style",
        choices=["default", "transformers"],
        default="default",
        help="default: a finished translation keeps its place in the beam; transformers: as Hugging Face "
        "transformers' generate(num_beams=...) searches, finished ones set aside",
    )
    p.add_argument(
        "--temperature",
        type=_positive_float,
        default=_DefaultFloat(1.0),
        help="softmax temperature (sampling only)",
    )
    p.add_argument(
        "--top-k",
        type=_positive_int,
        default=None,
        help="sample from the k most likely tokens (sampling only)",
    )
    p.add_argument("--top-p", type=_probability, default=None, help="nucleus sampling mass (sampling only)")
    p.add_argument(
        "--max-len", type=_positive_int, default=None, help="default: the model's target table length"
    )
    p.add_argument(
        "--seed", type=_non_negative_int, default=_DefaultInt(0), help="sampling seed (sampling only)"
    )
    p.add_argument(
        "--no-repeat-ngram",
        type=_non_negative_int,
        default=0,
        metavar="N",
        help="never repeat an n-gram of N tokens in one translation (0: off)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="numpy-transformer", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    _add_train(commands)
    p = commands.add_parser("translate", help="translate sentences with a trained model")
    p.add_argument("--checkpoint", default=DEFAULT_OUT, help="run directory or model.npz")
    p.add_argument(
        "sentences", nargs="*", help="sentences to translate (default: one per line from standard input)"
    )
    p.add_argument(
        "--batch-size",
        type=_positive_int,
        default=TRANSLATE_BATCH,
        help=f"sentences translated together (default: {TRANSLATE_BATCH}); standard input is translated "
        "as its lines come, at most this many at a time",
    )
    p.add_argument(
        "--n-best",
        type=_positive_int,
        default=1,
        metavar="N",
        help="the N best translations of each sentence by beam search, best first, each with its score "
        "(log-probability / length ** length-penalty)",
    )
    p.add_argument(
        "--score",
        action="store_true",
        help="score given translations instead: each input is 'source<TAB>reference', and the output adds "
        "log P(reference | source) in nats",
    )
    _add_decode_options(p)
    _add_backend(p)
    p = commands.add_parser("evaluate", help="loss, token accuracy, exact match, BLEU and chrF on a test set")
    p.add_argument("--checkpoint", default=DEFAULT_OUT, help="run directory or model.npz")
    p.add_argument(
        "--data", metavar="FILE.tsv", help="evaluate on this file instead of the task's test split"
    )
    p.add_argument("--limit", type=_positive_int, default=None, help="evaluate on the first N pairs only")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    _add_decode_options(p)
    _add_backend(p)
    p = commands.add_parser(
        "average", help="average the weights of checkpoints of one model, as the paper does"
    )
    p.add_argument(
        "checkpoints", nargs="+", metavar="RUN_OR_CHECKPOINT", help="run directories or .npz checkpoints"
    )
    p.add_argument(
        "--out",
        required=True,
        help="the averaged checkpoint: a .npz file, or a directory that gets model.npz (new, or holding "
        "only an earlier average; never a training run's directory, nor one of the checkpoints averaged)",
    )
    p.add_argument(
        "--overwrite", action="store_true", help="replace the file --out names, if it exists (nothing else)"
    )
    p.add_argument(
        "--allow-no-run-id",
        action="store_true",
        help="also average checkpoints saved before runs recorded a run id (you vouch they are of one run)",
    )
    _add_plot(commands)
    _add_learn(commands)
    _add_import(commands)
    return parser


def _add_import(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "import",
        help="a pretrained Marian (OPUS-MT) translator, downloaded in the Hugging Face format, as a run "
        "directory that translate, evaluate --data, plot attention and train --from read",
    )
    p.add_argument(
        "directory",
        metavar="DIR",
        help="the model's directory: config.json, model.safetensors, source.spm, target.spm, vocab.json",
    )
    p.add_argument("--out", required=True, metavar="RUN", help="the run directory to write")
    p.add_argument("--overwrite", action="store_true", help="replace the run saved in --out")
    p.add_argument(
        "--dtype",
        choices=DTYPES,
        default="float32",
        help="the weights' type (default: float32)",
    )


def _add_learn(commands: argparse._SubParsersAction) -> None:
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
    p = actions.add_parser("hint", help="the next hint for exercise NAME (one step further each time)")
    p.add_argument("file", metavar="FILE")
    p.add_argument("name", metavar="NAME")
    p = actions.add_parser(
        "train",
        help="train a model on FILE's functions wherever it defines them (options as train's; without "
        "--task, --data or --config: the copy task, 400 steps of a one-layer model of width 32), then "
        "the textbook's own code on the same seed beside it; where FILE has block backwards too, "
        "blocks.py's encoder-decoder trained on them the same way, beside the textbook's blocks",
    )
    p.add_argument("file", metavar="FILE")
    _add_train_arguments(p, None)
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


def _add_plot(commands: argparse._SubParsersAction) -> None:
    plot = commands.add_parser(
        "plot", help="pictures: attention maps, training curves, gradient flow (needs matplotlib)"
    )
    kinds = plot.add_subparsers(dest="picture", required=True)
    p = kinds.add_parser("attention", help="layer x head attention heatmaps for one sentence")
    p.add_argument("--checkpoint", default=DEFAULT_OUT, help="run directory or model.npz")
    p.add_argument(
        "--out", default="attention.png", help="writes <stem>-encoder.png, -decoder.png, -cross.png"
    )
    p.add_argument("sentence")
    p = kinds.add_parser("curves", help="loss, dev BLEU and learning rate from a training log")
    p.add_argument("--run", default=DEFAULT_OUT, help="run directory or its log.jsonl")
    p.add_argument("--out", default="curves.png")
    p = kinds.add_parser(
        "gradients", help="per-layer gradient norms at initialisation, pre-norm vs post-norm"
    )
    p.add_argument(
        "--checkpoint", help="take the model configuration and task from this run (default: copy task)"
    )
    p.add_argument("--layers", type=_positive_int, default=6, help="N when no checkpoint is given")
    p.add_argument("--out", default="gradients.png")


def _train(args: argparse.Namespace) -> int:
    from .distributed import Communicator, RanksStopped

    comm = Communicator.from_environment()  # None unless started by mpiexec (or srun) with several ranks
    if comm is None:
        try:
            return _train_run(args, None)
        except _InterruptedBeforeTraining as interrupted:
            print(interrupted, file=sys.stderr)
            return 130
    try:
        return _train_run(args, comm)
    except RanksStopped as stopped:
        return stopped.code
    except BaseException as error:  # out of step with the others (a second Ctrl-C), which may wait for
        # this rank in a collective call for ever: say why here, then end every rank
        code, line = _failure(error, Path(args.out).expanduser(), comm.rank)
        if line:
            print(line, file=sys.stderr)
        comm.abort(code)


def _train_run(args: argparse.Namespace, comm: Communicator | None) -> int:
    """train, alone or as one rank of several; under MPI each stage ends with the ranks agreeing
    (_on_every_rank), so that a refusal or failure on any rank stops every rank, said once."""
    from .run_directory import RunLock, check_run_directory

    root = comm is None or comm.rank == 0
    say = print if root else (lambda *a, **k: None)
    created: list[Path] = []  # --out, if this run made it
    try:
        with ExitStack() as locked:

            def claim_out() -> tuple[dict[str, dict[str, Any]], Path]:
                settings = _settings(args)  # every refusal of a setting comes before any work
                _refuse_out_of_from(settings["train"].get("from_run"), args.out)
                out = check_run_directory(args.out, args.resume, args.overwrite, check_lock=root)
                if root:  # rank 0 alone writes the run directory
                    if not out.exists():
                        created.append(out)
                    locked.enter_context(RunLock(out))
                return settings, out

            settings, out = _on_every_rank(comm, args.out, claim_out)
            trainer, started = _on_every_rank(comm, out, lambda: _trainer(args, settings, out, comm))
            say(started)
            return _on_every_rank(comm, out, lambda: _fit(args, trainer, out, say))
    finally:
        for directory in created:  # stopped before anything was written: no empty directory stays
            with suppress(OSError):
                directory.rmdir()


def _refuse_out_of_from(from_run: str | None, out: str) -> None:
    """--out may not be the run --from starts from (its directory, or the directory of the checkpoint
    it names): --overwrite would replace what the new run is made of. As import refuses --out DIR."""
    if from_run is None:
        return
    source = Path(from_run).expanduser()
    source = source if source.is_dir() else source.parent
    if source.resolve() == Path(out).expanduser().resolve():
        raise ValueError(
            f"--out {out} is the run --from {from_run} starts from, which it would replace: choose a run "
            "directory of its own for --out"
        )


def _on_every_rank(comm: Communicator | None, out: str | Path, work: Callable[[], T]) -> T:
    """``work()`` alone; under MPI on every rank, then one agreement (Ranks.run_together): if it raised
    on any rank, rank 0 prints the first rank's reason and every rank stops with its exit status
    (raises RanksStopped)."""
    from .distributed import ranks_of

    ranks = ranks_of(comm)
    return ranks.run_together(work, lambda error: _failure(error, Path(out), ranks.rank))


def _failure(error: BaseException, out: Path, rank: int = 0) -> tuple[int, str]:
    """The exit status of ``train`` stopped by ``error`` and the line that says why (naming the MPI
    rank where it is not rank 0): 2 for a refusal, 1 for a failure, 130 for a second Ctrl-C."""
    from .training import TrainingDiverged

    where = f"rank {rank}: " if rank else ""
    if isinstance(error, _InterruptedBeforeTraining):
        return 130, f"{where}{error}"
    if isinstance(error, KeyboardInterrupt):  # the second Ctrl-C: saves are atomic, so the last one is whole
        kept = (
            f"{out / FILENAME} holds the last checkpoint"
            if (out / FILENAME).exists()
            else "nothing was saved"
        )
        return 130, f"interrupted again: {where}stopped at once without saving this step; {kept}"
    if isinstance(error, TrainingDiverged):
        kept = (
            f"the last good checkpoint in {out} is kept"
            if (out / FILENAME).exists()
            else f"no checkpoint was written to {out}"
        )
        return 1, f"numpy-transformer train: error: {where}training stopped: {error}; {kept}"
    if isinstance(error, (ValueError, TypeError, RuntimeError, CheckpointError)):
        return 2, f"numpy-transformer train: error: {where}{error}"
    if isinstance(error, (OSError, MemoryError)):  # a full disk, an allocation refused
        return 1, f"numpy-transformer train: error: {where}{error}"
    if isinstance(error, SystemExit):
        return (error.code if isinstance(error.code, int) else 1), ""
    lines = traceback.format_exception(type(error), error, error.__traceback__)  # a bug: where it is
    return 1, f"numpy-transformer train: error: {where}{''.join(lines).rstrip()}"


def _settings(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """section -> field -> value of the settings given: a --config file's, then the flags' over them."""
    given = given_settings(args)
    from_file = read_config_file(args.config) if args.config else {}
    train_file, train_given = dict(from_file.get("train", {})), given["train"]
    # a flag wins over the file, and over the file's settings it excludes: what the run learns
    # from (--task or --data) takes the file's other source and the settings tied to it away;
    # --steps or --time-budget the other one
    if ("task" in train_given or "data" in train_given) and (
        train_file.get("task") != train_given.get("task", train_file.get("task"))
        or train_file.get("data") != train_given.get("data", train_file.get("data"))
    ):
        for name in ("task", "data", *TASK_TIED, *(("from_run",) if "task" in train_given else ())):
            if name not in train_given:
                train_file.pop(name, None)
    for name, other in (("steps", "time_budget"), ("time_budget", "steps")):
        if name in train_given and other not in train_given:
            train_file.pop(other, None)
    from_file = {**from_file, "train": train_file}
    settings = {section: {**from_file.get(section, {}), **given[section]} for section in given}
    if args.config and not getattr(args, "resume", False):
        try:  # a refusal the file's settings take part in names the file
            TrainConfig(**settings["train"]).resolve()
        except (ValueError, TypeError) as error:
            if set(from_file.get("train", {})) - set(train_given):
                raise type(error)(f"{error} (with the settings of --config {args.config})") from None
            raise
    return settings


# a --config file's settings that belong to its task or corpus: dropped when a flag names another
TASK_TIED = ("tokenizer", "vocab_size", "max_length", "bpe_dropout", "shared_vocab")


def _trainer(
    args: argparse.Namespace, settings: dict[str, dict[str, Any]], out: Path, comm: Communicator | None
) -> tuple[Trainer, str]:
    """The Trainer of a new run or of the one saved in ``out`` (--resume), and the line that says
    what it trains. With --overwrite the old run is cleared only now, once the new one is ready: a
    refusal or a Ctrl-C before this point keeps it."""
    from .data import FileTask
    from .run_directory import clear_run, resume_checkpoint
    from .training import Trainer

    ranks = f" on {comm.size} MPI ranks" if comm else ""
    saved = resume_checkpoint(out) if args.resume else out / FILENAME
    if saved.name != FILENAME:
        warnings.warn(
            f"--resume: {out / FILENAME} is missing or older than {saved.name} (its save failed): "
            f"resuming from {saved}, the run's newest complete checkpoint",
            stacklevel=2,
        )
    try:  # reading the corpus and learning its subwords can take minutes: Ctrl-C must end it cleanly
        if args.resume:
            may_change = {name: settings["train"].get(name) for name in resumable_fields()}
            trainer = Trainer.resume(saved, comm=comm, **may_change)
        else:
            trainer = Trainer.create(TrainConfig(**settings["train"]), settings["model"], comm=comm)
    except KeyboardInterrupt as interrupt:
        kept = (
            f"the run saved in {out} is unchanged" if args.resume or args.overwrite else "nothing was written"
        )
        raise _InterruptedBeforeTraining(
            f"interrupted before training started (reading the corpus, learning its subwords): {kept}"
        ) from interrupt
    length = (
        f"{trainer.steps} steps"
        if trainer.budget is None
        else f"{trainer.config.time_budget:g} minutes in all, steps planned from the measured speed"
        + ("" if "time_budget" in settings["train"] else " (--steps N to fix them)")
    )
    if args.resume:
        resume_conflicts(settings, {"model": trainer.model_config, "train": trainer.config})
        if trainer.budget is not None and trainer.budget.spent() >= trainer.budget.seconds:
            trainer.plan_steps(trainer.step)  # the run ends where it is
            warnings.warn(
                f"--resume: the run in {out} has spent its {trainer.config.time_budget:g} minutes "
                f"({trainer.budget.spent() / 60:.1f} so far) at step {trainer.step}: nothing is left to train; "
                "give a larger --time-budget (minutes in all) or --steps N above the step reached",
                stacklevel=2,
            )
        elif trainer.step >= trainer.steps:
            warnings.warn(
                f"--resume: the run in {out} is at step {trainer.step} and --steps {trainer.steps} asks for "
                f"no more: nothing is left to train; give --steps above {trainer.step} to train on",
                stacklevel=2,
            )
        return trainer, f"resuming {saved} at step {trainer.step} for {length}{ranks}"
    if args.overwrite and (comm is None or comm.rank == 0):
        clear_run(out)
    config, task, sizes = trainer.config, trainer.task, trainer.model_config
    n_params = sum(p.data.size for p in trainer.model.parameters())
    model = f"the model of {config.from_run}" if config.from_run else f"{sizes.attention} model"
    units = f" of {config.vocab_size:,} subword units" if config.vocab_size else ""
    chosen = [name for name in MODEL_SIZES if name not in settings["model"]]
    if config.data and config.vocab_size and "vocab_size" not in settings["train"]:
        chosen.append("vocab_size")
    why = (  # a --from run's model and vocabularies are that run's: nothing is chosen
        f"; {', '.join(chosen)} chosen for {len(task.train_pairs):,} training pairs"
        + (f" and {config.time_budget:g} minutes" if config.time_budget else "")
        if config.data and not config.from_run and chosen and isinstance(task, FileTask)
        else ""
    )
    return trainer, (
        f"training {model} ({n_params:,} parameters: d_model {sizes.d_model}, {sizes.N} layers, "
        f"{sizes.h} heads, d_ff {sizes.d_ff}, dropout {sizes.dropout:g}) on {config.data or config.task}{ranks} "
        f"for {length}; vocabularies {len(task.src_vocab):,}/{len(task.tgt_vocab):,}{units}{why}; saving to {out}"
    )


class _InterruptedBeforeTraining(Exception):
    """Ctrl-C while the run was being built: nothing of it was written (exit status 130)."""


def _fit(args: argparse.Namespace, trainer: Trainer, out: Path, say: Callable[..., None]) -> int:
    """Train, then show translations of unseen test sources; ``say`` prints on rank 0 only."""
    from .training import TrainingDiverged

    if args.resume and trainer.step >= trainer.steps:  # said when it resumed: nothing is rewritten
        return 0
    try:
        trainer.fit(out, progress=not args.no_progress)
    except (KeyboardInterrupt, TrainingDiverged) as error:
        if trainer.comm is not None:  # the ranks agree on it first (_on_every_rank), or end together (_train)
            raise
        code, line = _failure(error, out)
        say(line, file=sys.stderr)
        return code
    if trainer.stop == "reader gone":  # saved; nobody is left to read the translations
        return BROKEN_PIPE
    if trainer.ranks.is_root:
        _show_translations(trainer, args.show)
    return 0


def _show_translations(trainer: Trainer, count: int) -> None:
    """Print the model's translations of the first ``count`` test pairs, never seen in training."""
    from .data import printable
    from .evaluation import translate_ids

    task = trainer.task
    pairs = task.test[:count]
    if not pairs:
        return
    print(f"translations of {len(pairs)} unseen test sources:")
    outputs = translate_ids(trainer.model, task.encode_pairs(pairs)[0], ids=task.ids)
    for (source, reference), ids in zip(pairs, outputs):
        hypothesis = task.tokenizer.detokenize(task.tgt_vocab.decode(ids))
        mark = "ok" if hypothesis == reference else f"expected: {printable(reference)}"
        print(f"  {printable(source)}  ->  {printable(hypothesis)}   [{mark}]")


def _decode_options(args: argparse.Namespace, tokenizer: Any) -> dict:
    """The decoding the flags ask for; without --strategy, beam search for a subword model (and for
    --n-best)."""
    from . import decoding

    strategy = args.strategy or ("beam" if tokenizer.subwords or getattr(args, "n_best", 1) > 1 else "greedy")
    for other, names in STRATEGY_OPTIONS.items():
        typed = [name for name in names if other != strategy and _typed(args, name)]
        if typed:
            flag = "--" + typed[0].replace("_", "-")
            chosen = (
                f"--strategy {strategy}"
                if args.strategy
                else f"{strategy} decoding, this model's default (--strategy {other} to use it)"
            )
            raise ValueError(
                f"{flag} {getattr(args, typed[0])} applies to --strategy {other} only, not to {chosen}"
            )
    common = {"no_repeat_ngram": args.no_repeat_ngram}
    if strategy == "greedy":
        return {"strategy": decoding.greedy_decode, **common}
    if strategy == "beam":
        return {
            "strategy": decoding.beam_search,
            "beam_width": args.beam_width,
            "length_penalty": args.length_penalty,
            **({"style": args.beam_style} if args.beam_style != "default" else {}),
            **common,
        }
    return {
        "strategy": decoding.sample_decode,
        "temperature": args.temperature,
        "top_k": args.top_k,
        "top_p": args.top_p,
        "seed": args.seed,
        **common,
    }


def _translate(args: argparse.Namespace) -> int:
    from .checkpoint import load_for_inference
    from .data import encode_sentences, printable
    from .evaluation import score_ids, translate_ids, translate_n_best

    if args.n_best > 1 and (args.strategy not in (None, "beam") or args.score):
        used = "--score" if args.score else f"--strategy {args.strategy}"
        raise ValueError(f"--n-best {args.n_best} needs beam search, not {used}")
    if args.n_best > args.beam_width:
        raise ValueError(
            f"--n-best {args.n_best} exceeds --beam-width {args.beam_width}: a beam keeps that many"
        )
    if args.sentences:
        empty = [number for number, sentence in enumerate(args.sentences, start=1) if not sentence.strip()]
        if empty:
            raise ValueError(f"sentence {empty[0]} of the arguments is empty: give text to translate")
    model, tokenizer, src_vocab, tgt_vocab = load_for_inference(args.checkpoint)

    def over_long(where: str, text: str, target: bool = False) -> str | None:
        """Why ``text`` (a source, or a ``target`` translation to score, which gains <eos>) does not
        fit the model's positional table, or None; a cheap bound first, so that a 25 MB line is
        never tokenised."""
        table, extra = (model.tgt_pos, 1) if target else (model.src_pos, 0)
        length = tokenizer.fewest_tokens(text, table.seq_len) + extra
        at_least = "at least " if length > table.seq_len else ""
        if not at_least:
            length = len((tokenizer.tokenize if target else tokenizer.tokenize_source)(text)) + extra
        if length <= table.seq_len:
            return None
        return (
            f"{where} ({printable(text[:40])!r}) has {at_least}{length:,} tokens, longer than the "
            f"positional table's seq_len={table.seq_len}"
        )

    def fitting(batch: list[tuple[str, str]], references: list[str]) -> list[int]:
        """The indices of the batch's lines that fit; each that does not is named on standard error."""
        kept = []
        for index, (where, sentence) in enumerate(batch):
            why = over_long(where, sentence) or (
                over_long(f"{where}'s translation", references[index], target=True) if references else None
            )
            if why is None:
                kept.append(index)
            else:
                warnings.warn(f"not translated: {why}", stacklevel=2)
        return kept

    def text_of(ids: list[int]) -> str:
        return printable(tokenizer.detokenize(tgt_vocab.decode(ids)))

    size = args.batch_size
    if args.sentences:
        numbered = [(f"sentence {number}", text) for number, text in enumerate(args.sentences, start=1)]
        why = next(filter(None, (over_long(where, text) for where, text in numbered)), None)
        if why is not None:  # every argument before any work
            raise ValueError(why)
        batches: Iterable[list[tuple[str, str]]] = (
            numbered[start : start + size] for start in range(0, len(numbered), size)
        )
    else:
        batches = _standard_input_batches(size)
    options = _decode_options(args, tokenizer)
    translated = skipped = 0
    for batch in batches:  # batch by batch: memory stays bounded, and each is printed as soon as it is done
        references = []
        if args.score:  # each line: source, tab, the translation to score
            pairs = [(where, _source_and_reference(where, text)) for where, text in batch]
            batch = [(where, source) for where, (source, _) in pairs]
            references = [reference for _, (_, reference) in pairs]
        if not args.sentences or args.score:  # a line that does not fit is left out, the others go on
            kept = fitting(batch, references)
            skipped += len(batch) - len(kept)
            batch = [batch[index] for index in kept]
            references = [references[index] for index in kept] if references else []
            if not batch:
                continue
        sentences = [sentence for _, sentence in batch]
        src_ids = encode_sentences(sentences, tokenizer, src_vocab)
        if args.score:
            references_ids = encode_sentences(references, tokenizer, tgt_vocab, target=True)
            scores = score_ids(model, src_ids, references_ids, tgt_vocab.ids)
            for sentence, reference, score in zip(sentences, references, scores):
                print(f"{printable(sentence)}\t{printable(reference)}\t{score:.4f}")
        elif args.n_best > 1:
            beam = {key: value for key, value in options.items() if key != "strategy"}
            for sentence, best in zip(
                sentences, translate_n_best(model, src_ids, args.n_best, args.max_len, tgt_vocab.ids, **beam)
            ):
                for ids, score in best:
                    print(f"{printable(sentence)}\t{text_of(ids)}\t{score:.4f}")
        else:
            outputs = translate_ids(model, src_ids, args.max_len, tgt_vocab.ids, **dict(options))
            for sentence, ids in zip(sentences, outputs):
                print(f"{printable(sentence)}\t{text_of(ids)}")
        sys.stdout.flush()
        translated += len(batch)
    if skipped:
        raise ValueError(
            f"{skipped} of {skipped + translated} lines of standard input were not translated (each named "
            "above): longer than the model's positional table"
        )
    if not translated:
        raise ValueError("no sentences given: pass them as arguments or one per line on standard input")
    return 0


def _source_and_reference(where: str, text: str) -> tuple[str, str]:
    """A --score input line split at its tab into the source and the translation to score."""
    parts = [part.strip() for part in text.split("\t")]
    if len(parts) == 1 or (len(parts) == 2 and parts[0] and not parts[1]):
        raise ValueError(
            f"{where}: --score reads 'source<TAB>translation', but the translation to score is missing or "
            f"empty in {text[:60]!r}"
        )
    if len(parts) != 2 or not all(parts):
        raise ValueError(
            f"{where}: --score reads 'source<TAB>translation', got {len(parts)} tab-separated part(s) "
            f"in {text[:60]!r}"
        )
    return parts[0], parts[1]


def _standard_input_batches(size: int) -> Iterator[list[tuple[str, str]]]:
    """(where, sentence) of each line of standard input, in batches of at most ``size`` handed on as
    the lines come (line_batches): a pipe that stays open, a ``tail -f`` or a user typing gets each
    translation without waiting for the end of the input. Blank lines are not sentences."""
    from .data import line_batches, text_lines

    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # no standard input at all (closed)
        return
    stream = getattr(stream, "raw", stream)  # unbuffered: a read returns what has come
    first = 1
    for lines in line_batches(stream, size):
        numbered = text_lines(lines, "standard input", start=first)
        batch = [(f"standard input:{n}", text.strip()) for n, text in numbered if text.strip()]
        first += len(lines)
        if batch:
            yield batch


def _evaluate(args: argparse.Namespace) -> int:
    from .checkpoint import load_checkpoint, model_from_checkpoint, restore_model_and_task, saved_task
    from .data import read_tsv
    from .evaluation import evaluate

    arrays, meta = load_checkpoint(args.checkpoint)
    if args.data:  # the model's own tokenizer and vocabularies: the training corpus is not needed
        pairs = read_tsv(args.data)
        model, task = model_from_checkpoint(args.checkpoint, arrays, meta), saved_task(args.checkpoint, meta)
    else:  # the test split of the task it was trained on, rebuilt
        model, task = restore_model_and_task(args.checkpoint, arrays, meta)
        pairs = task.test
    pairs = pairs[: args.limit] if args.limit else pairs
    options = _decode_options(args, task.tokenizer)
    metrics = evaluate(model, task, pairs, **options)
    metrics["decoding"] = _describe(options)
    if args.json:
        print(json.dumps(metrics))
    else:
        print(
            "\n".join(
                f"{name:>15}: {value:.4f}" if isinstance(value, float) else f"{name:>15}: {value}"
                for name, value in metrics.items()
            )
        )
    return 0


def _describe(options: dict[str, Any]) -> str:
    """The decoding in words, as evaluate reports it beside its scores."""
    name = options["strategy"].__name__.removesuffix("_decode").removesuffix("_search")
    settings = ", ".join(
        f"{key.replace('_', ' ')} {value}" for key, value in options.items() if key != "strategy"
    )
    return f"{name} ({settings})"


def _average(args: argparse.Namespace) -> int:
    from .checkpoint import average_checkpoints, save_checkpoint
    from .run_directory import check_average_out

    out = check_average_out(args.out, args.checkpoints, args.overwrite)
    arrays, meta = average_checkpoints(args.checkpoints, allow_no_run_id=args.allow_no_run_id)
    written = save_checkpoint(out, arrays, meta)  # atomic: replaces that one file and nothing else
    print(f"averaged {len(args.checkpoints)} checkpoints into {written}")
    return 0


def _plot(args: argparse.Namespace) -> int:
    from . import plots

    folder = Path(args.out).expanduser().parent
    if not folder.is_dir():
        raise ValueError(
            f"--out {args.out}: the folder {folder} does not exist"
            + (" (it is a file)" if folder.exists() else "")
            + ": create it first, or name a file in an existing folder"
        )

    if args.picture == "attention":
        from .checkpoint import load_for_inference

        model, tokenizer, src_vocab, tgt_vocab = load_for_inference(args.checkpoint)
        written = plots.plot_attention(model, tokenizer, src_vocab, tgt_vocab, args.sentence, args.out)
    elif args.picture == "curves":
        written = [plots.plot_curves(args.run, args.out)]
    else:
        from .checkpoint import load_meta, trained_task
        from .data import make_task

        if args.checkpoint:
            meta = load_meta(args.checkpoint)
            config, task = meta["model"], trained_task(args.checkpoint, meta)
        else:
            task = make_task("copy")
            config = {
                "src_vocab_size": len(task.src_vocab),
                "tgt_vocab_size": len(task.tgt_vocab),
                "src_seq_len": 16,
                "tgt_seq_len": 16,
                "d_model": 64,
                "N": args.layers,
                "h": 4,
                "d_ff": 256,
                "dropout": 0.0,
            }
        written = [plots.plot_gradient_flow(config, task, args.out)]
    for path in written:
        print(f"wrote {path}")
    return 0


def _import(args: argparse.Namespace) -> int:
    from ..model import parameter_count
    from .pretrained import import_run

    written, model = import_run(args.directory, args.out, args.overwrite, args.dtype)
    run = written.parent
    print(
        f"imported {args.directory} ({parameter_count(model.config):,} parameters, vocabulary "
        f"{model.config.tgt_vocab_size:,}) into {written}\n"
        f"translate:  numpy-transformer translate --checkpoint {run} 'A sentence.'\n"
        f"fine-tune:  numpy-transformer train --from {run} --data FILE.tsv --out NEW_RUN"
    )
    return 0


def _learn(args: argparse.Namespace) -> int:
    """learn start / check / train: refusals are one line and exit 2, the learner's own code failing
    to import is one line (theirs, with their file:line) and exit 1; Ctrl-C ends with 130, no traceback."""
    from .. import learn

    speak = launched_rank() == 0  # under mpiexec every rank loads the file, rank 0 speaks for them
    say = print if speak else (lambda *a, **k: None)
    try:
        if args.action == "start":
            written = learn.start(args.directory, overwrite=args.overwrite, notebook=args.notebook)
            print(
                f"wrote {written[0]} and {written[1]}; start with: numpy-transformer learn check {written[0]}"
            )
            return 0
        if args.action == "check":
            report, code = learn.run_check(args.file, args.names)
            print(report)
            return code
        if args.action == "hint":
            print(learn.next_hint(args.file, args.name))
            return 0
        block_table: dict[str, Callable] = {}
        table, verdicts = learn.learner_functions(args.file, block_table)
    except (FileExistsError, FileNotFoundError, NotADirectoryError) as refused:
        print(f"numpy-transformer learn {args.action}: error: {refused}", file=sys.stderr)
        return 2
    except learn.LearnerCodeError as theirs:
        print(f"numpy-transformer learn {args.action}: {theirs}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"numpy-transformer learn {args.action}: interrupted", file=sys.stderr)
        return 130
    from ..kernels import get_kernels, set_kernels, set_learner_functions

    yours = [v.name for v in verdicts if v.status in ("done", "wrong") and v.name not in learn.BLOCKS]
    wrong = [v.name for v in verdicts if v.status == "wrong"]
    trained_blocks = [name for name in learn.TRAINED_BLOCKS if name in block_table]
    checked_only = [name for name in block_table if name not in learn.TRAINED_BLOCKS]
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
    if not args.config and not {"train.task", "train.data"} & set(vars(args)):
        for dest, value in LEARN_DEFAULTS.items():  # a small task, unless one is chosen
            if not hasattr(args, dest):
                setattr(args, dest, value)
    if args.out is None:  # beside the learner's file, a fresh folder for every run: nothing is replaced
        args.out = str(_fresh_learn_out(Path(args.file)))
    ran: set[str] = set()
    previous = get_kernels()
    set_learner_functions(learn.guarded(table, args.file, ran))
    set_kernels("learner")
    try:
        code = _train(args)
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
    # a resumed run whose first session skipped the comparison starts the textbook's afresh
    textbook_args.resume = args.resume and Path(textbook_args.out).is_dir()
    say(f"the textbook's own code on the same seed, for comparison ({textbook_args.out}):")
    code = _train(textbook_args)
    textbook_dev = _last_dev(Path(textbook_args.out))
    if code == 0 and yours_dev and textbook_dev:
        say(
            f"dev after {yours_dev['step']} steps: yours exact {yours_dev['exact_match']:.3f} "
            f"BLEU {yours_dev['bleu']:.2f}; the textbook's exact {textbook_dev['exact_match']:.3f} "
            f"BLEU {textbook_dev['bleu']:.2f} (same seed)"
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

    from .. import learn
    from .checkpoint import load_meta, trained_task

    meta = load_meta(args.out)
    model, train = meta["model"], meta["train"]
    task = trained_task(args.out, meta)
    settings = {
        "steps": int(meta["step"]),
        "batch_size": train["batch_size"],
        "lr": train["lr"],
        "width": model["d_model"],
        "n_layers": model["N"],
        "n_heads": model["h"],
        "d_ff": model["d_ff"],
        "seed": train["seed"],
        "label_smoothing": train["label_smoothing"],
        "dev_pairs": task.dev[: train["eval_size"]],
    }
    ran: set[str] = set()
    theirs = learn.guarded({**table, **block_table}, args.file, ran)
    whole = theirs.pop("encoder_decoder_backward", None)
    started = time.perf_counter()
    try:
        with learn.blocks_using(theirs):
            yours = learn.train_blocks(task, backward=whole, **settings)
        seconds = time.perf_counter() - started
        textbook = learn.train_blocks(task, **settings) if args.compare else None
    except KeyboardInterrupt:
        print("numpy-transformer learn train: interrupted", file=sys.stderr)
        return 130
    except RuntimeError as error:  # their code raised (guarded says where)
        print(f"numpy-transformer learn train: blocks.py's encoder-decoder: {error}", file=sys.stderr)
        return 1
    names = [name for name in learn.TRAINED_BLOCKS if name in ran] or ["nothing"]
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
    from .plots import read_log
    from .run_directory import LOG_NAME

    try:
        records = read_log(out / LOG_NAME)  # a torn line skipped, as everywhere a log is read
    except OSError:
        return None
    dev = [r for r in records if r.get("split") == "dev" and "exact_match" in r]
    return dev[-1] if dev else None


def main(argv: Sequence[str] | None = None) -> int:
    """The ``numpy-transformer`` command; ``argv`` None reads the process's own arguments and opts
    the process in to the CPU settings (tune_cpu), as a program of its own may.

    Exit codes: 0 done; 2 refused (one line naming what is wrong); 130 interrupted (Ctrl-C); 141 the
    reader of standard output went away (``| head``), as 128 + SIGPIPE says for cat and its kin.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if argv is None:
        restart_with_openblas_timeout()
        tune_cpu()
    handlers = {
        "train": _train,
        "translate": _translate,
        "evaluate": _evaluate,
        "average": _average,
        "plot": _plot,
        "learn": _learn,
        "import": _import,
    }

    def say_warning(message: Warning | str, *_: Any, **__: Any) -> None:  # one line, not a source location
        if launched_rank() == 0:  # under mpiexec the ranks read the same data, and rank 0 speaks for them
            print(f"numpy-transformer {args.command}: warning: {message}", file=sys.stderr)

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always", UserWarning)
            warnings.showwarning = say_warning
            if getattr(args, "backend", None):
                set_backend(args.backend)
            code = handlers[args.command](args)
        sys.stdout.flush()  # a reader that has gone shows here, not as a traceback when Python exits
        return code
    except BrokenPipeError:  # `translate ... | head -n 1`: the reader has all it wanted
        silence(sys.stdout)
        return BROKEN_PIPE
    except (ValueError, TypeError, RuntimeError, CheckpointError) as error:
        print(f"numpy-transformer {args.command}: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # the work failed, not its input (a full disk: SaveError names the file)
        print(f"numpy-transformer {args.command}: error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
