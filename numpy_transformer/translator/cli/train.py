"""``numpy-transformer train``: a run's settings from the flags, ``--config`` and ``--resume``, the
Trainer made or resumed on every rank, fitted, and what a failure leaves behind."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ...machine import require
from ..config import (
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
from ..run.checkpoint import FILENAME, CheckpointError

if TYPE_CHECKING:
    from ..distributed import Communicator
    from ..run.directory import RunDirectory
    from ..training.trainer import Trainer
from .common import BROKEN_PIPE, DEFAULT_OUT, add_backend, non_negative_int

T = TypeVar("T")


def add_train(commands: argparse._SubParsersAction) -> None:
    add_train_arguments(commands.add_parser("train", help="train a translation model"), DEFAULT_OUT)


def add_train_arguments(p: argparse.ArgumentParser, default_out: str | None) -> None:
    add_backend(p)
    p.add_argument(
        "--config",
        metavar="FILE.toml",
        help="settings from a TOML file of [model] and [train] tables (a run's config.toml is one); "
        "flags given beside it win",
    )
    add_arguments(p.add_argument_group("model"), ModelConfig, "model")
    add_arguments(p.add_argument_group("training"), TrainConfig, "train")
    run = p.add_argument_group("the run directory")
    run.add_argument(
        "--out",
        default=default_out,
        help=f"run directory (default: {default_out}, whatever the task or --data: the directory translate, "
        "evaluate and plot read by default)",
    )
    run.add_argument(
        "--resume",
        action="store_true",
        help=f"continue the run saved in --out as it was saved ({', '.join(resumable_flags())} may change)",
    )
    run.add_argument("--overwrite", action="store_true", help="replace the run saved in --out with a new one")
    run.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (there is none where standard error is not a terminal: a file or a pipe gets "
        "the log lines on standard output alone)",
    )
    run.add_argument(
        "--show",
        type=non_negative_int,
        default=5,
        help="translations of unseen test sources to print at the end",
    )


def run_train(args: argparse.Namespace) -> int:
    from ..distributed import Communicator, RanksStopped

    comm = Communicator.from_environment()  # None unless started by mpiexec (or srun) with several ranks
    command = TrainCommand(args, comm)
    try:
        return command.run()
    except RanksStopped as stopped:  # the ranks agreed to stop (under MPI alone)
        return stopped.code
    except BaseException as error:
        if comm is None:
            if isinstance(error, _InterruptedBeforeTraining):
                print(error, file=sys.stderr)
                return error.code
            raise
        # out of step with the others (a second Ctrl-C), which may wait for this rank in a
        # collective call for ever: say why here, then end every rank
        code, line = command.failure(error, Path(args.out).expanduser())
        if line:
            print(line, file=sys.stderr)
        comm.abort(code)


class TrainCommand:
    """``train``'s stages, read top to bottom in ``run``: the settings checked and the run directory
    claimed, the Trainer made (new, resumed or fine-tuned), then fitted and its translations shown.
    Alone, or as one rank of several: under MPI each stage ends with the ranks agreeing
    (``together``), so that a refusal or failure on any rank stops every rank, said once."""

    settings: dict[str, dict[str, Any]]  # section -> field -> value given (train_settings), set by claim
    from_the_file: bool  # settings of a --config file are in effect (_from_the_file)
    directory: RunDirectory  # the run directory, claimed by claim

    def __init__(self, args: argparse.Namespace, comm: Communicator | None) -> None:
        from ..distributed import ranks_of

        self.args = args
        self.comm = comm
        self.ranks = ranks_of(comm)
        self.say: Callable[..., None] = print if self.ranks.is_root else (lambda *a, **k: None)
        # the command its errors are said by: learn train runs this one on the learner's functions
        learn = getattr(args, "command", "train") == "learn"
        self.command = f"numpy-transformer {'learn ' if learn else ''}train"

    def run(self) -> int:
        with ExitStack() as held:  # the run directory, from its claim on, whatever the other ranks say
            with _terminated_as_interrupted():  # until the Trainer's own handlers take SIGTERM over
                self.together(self.args.out, lambda: self.claim(held))
                out = self.directory.path
                trainer, started = self.together(out, lambda: self.trainer())
            self.say(started)
            return self.together(out, lambda: self.fit(trainer))

    def together(self, out: str | Path, work: Callable[[], T]) -> T:
        """``work()`` alone; under MPI on every rank, then one agreement (Ranks.run_together): if it raised
        on any rank, rank 0 prints the first rank's reason and every rank stops with its exit status
        (raises RanksStopped)."""
        return self.ranks.run_together(work, lambda error: self.failure(error, Path(out)))

    def claim(self, held: ExitStack) -> None:
        """The settings, every refusal of one before any work, and the run directory claimed (held
        by ``held``): rank 0 alone writes it."""
        from ..run.directory import RunDirectory

        args = self.args
        require_evaluation_library()
        if not args.no_progress:
            require("a training run's progress bar (--no-progress trains without one)", "tqdm")
        self.settings = train_settings(args)
        self.from_the_file = _from_the_file(args)
        _refuse_out_of_from(self.settings["train"].get("from_run"), args.out)
        self.directory = RunDirectory(args.out, args.resume, args.overwrite, writes=self.ranks.is_root)
        held.enter_context(self.directory)

    def trainer(self) -> tuple[Trainer, str]:
        """The Trainer of a new run or of the one saved in the run directory (--resume), and the line
        that says what it trains. With --overwrite the old run is cleared only now, once the
        new one is ready: a refusal or a Ctrl-C before this point keeps it."""
        from ..huggingface.exportable import export_limits
        from ..tasks import FileTask
        from ..training.trainer import Trainer

        args = self.args
        comm = self.comm
        settings = self.settings
        out = self.directory.path
        ranks = f" on {comm.size} MPI ranks" if comm else ""
        try:  # reading the corpus and learning its subwords can take minutes: Ctrl-C must end it cleanly
            if args.resume:
                may_change = {name: settings["train"].get(name) for name in resumable_fields()}
                trainer = Trainer.resume(out, comm=comm, **may_change)
            else:
                trainer = Trainer.create(TrainConfig(**settings["train"]), settings["model"], comm=comm)
        except (
            ValueError,
            TypeError,
        ) as error:  # the model's checks, the memory estimate: the file took part
            if not args.resume and "--config" not in str(error) and self.from_the_file:
                error.args = (f"{error} (with the settings of --config {args.config})",)
            raise
        except KeyboardInterrupt as interrupt:
            kept = (
                f"the run saved in {out} is unchanged"
                if args.resume or args.overwrite
                else "nothing was written"
            )
            terminated = isinstance(interrupt, _Terminated)
            raise _InterruptedBeforeTraining(
                f"{'SIGTERM' if terminated else 'interrupted'} before training started "
                f"(reading the corpus, learning its subwords): {kept}",
                code=143 if terminated else 130,
            ) from interrupt
        length = (
            f"{trainer.steps} steps"
            if trainer.budget is None
            else f"{trainer.config.time_budget:g} minutes in all, steps planned from the measured speed"
            + ("" if "time_budget" in settings["train"] else " (--steps N to fix them)")
        )
        if args.resume:
            saved = trainer.resumed_from
            resume_conflicts(settings, {"model": trainer.model_config, "train": trainer.config})
            if trainer.step >= trainer.steps:  # said, and the run is left as it was saved
                if trainer.budget is not None:  # Trainer.resume planned its end where it is
                    spent = trainer.budget.spent() >= trainer.budget.seconds
                    said = (
                        f"--resume: the run in {out} "
                        + ("has spent its" if spent else "has too little left for more steps of its")
                        + f" {trainer.config.time_budget:g} minutes ({trainer.budget.spent() / 60:g} so far) at "
                        f"step {trainer.step}: nothing is left to train; give a larger --time-budget (minutes in "
                        "all) or --steps N above the step reached"
                    )
                else:
                    said = (
                        f"--resume: the run in {out} is at step {trainer.step} and --steps {trainer.steps} asks "
                        f"for no more: nothing is left to train; give --steps above {trainer.step} to train on"
                    )
                warnings.warn(said, stacklevel=2)
                return trainer, f"{saved} stays at step {trainer.step}: nothing trained"
            return trainer, f"resuming {saved} at step {trainer.step} for {length}{ranks}"
        if args.overwrite:
            self.directory.clear()
        config = trainer.config
        task = trainer.task
        sizes = trainer.model_config
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
        # what export cannot write of the run, said before it trains rather than found once it is trained
        lacking = export_limits(trainer.model, task.tokenizer, task.src_vocab)
        note = f"note: this run cannot be exported whole: {' | '.join(lacking)}" if lacking else None
        return trainer, (
            f"training {model} ({n_params:,} parameters: d_model {sizes.d_model}, {sizes.N} layers, "
            f"{sizes.h} heads, d_ff {sizes.d_ff}, dropout {sizes.dropout:g}) on {config.data or config.task}{ranks} "
            f"for {length}; vocabularies {len(task.src_vocab):,}/{len(task.tgt_vocab):,}{units}{why}; saving to {out}"
        ) + (f"\n{task.splits()}" if isinstance(task, FileTask) else "") + (f"\n{note}" if note else "")

    def fit(self, trainer: Trainer) -> int:
        """Train, then show translations of unseen test sources (rank 0 alone)."""
        from ..training.step import TrainingDiverged

        args = self.args
        out = self.directory.path
        if args.resume and trainer.step >= trainer.steps:  # said when it resumed: nothing is rewritten
            return 0
        try:
            # a bar redraws its line with carriage returns: into a file it would make one endless line
            trainer.fit(out, progress=not args.no_progress)
        except (KeyboardInterrupt, TrainingDiverged) as error:
            if (
                trainer.comm is not None
            ):  # the ranks agree on it first (together), or end together (run_train)
                raise
            code, line = self.failure(error, out)
            self.say(line, file=sys.stderr)
            return code
        if trainer.stop == "reader gone":  # saved; nobody is left to read the translations
            return BROKEN_PIPE
        if trainer.ranks.is_root:
            self.show_translations(trainer, args.show)
        return 0

    def show_translations(self, trainer: Trainer, count: int) -> None:
        """Print the model's translations of the first ``count`` test pairs, never seen in training."""
        from ..corpora import printable
        from ..translating import translate_ids

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

    def failure(self, error: BaseException, out: Path) -> tuple[int, str]:
        """The exit status of ``train`` stopped by ``error`` and the line that says why (naming the MPI
        rank where it is not rank 0): 2 for a refusal, 1 for a failure, 130 for a second Ctrl-C."""
        from ..training.step import TrainingDiverged

        rank = self.ranks.rank
        where = f"rank {rank}: " if rank else ""
        if isinstance(error, _InterruptedBeforeTraining):
            return error.code, f"{where}{error}"
        if isinstance(
            error, KeyboardInterrupt
        ):  # the second Ctrl-C: saves are atomic, so the last one is whole
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
            return 1, f"{self.command}: error: {where}training stopped: {error}; {kept}"
        if isinstance(error, (ValueError, TypeError, RuntimeError, CheckpointError)):
            return 2, f"{self.command}: error: {where}{error}"
        if isinstance(error, (OSError, MemoryError)):  # a full disk, an allocation refused
            return 1, f"{self.command}: error: {where}{error}"
        if isinstance(error, SystemExit):
            return (error.code if isinstance(error.code, int) else 1), ""
        lines = traceback.format_exception(type(error), error, error.__traceback__)  # a bug: where it is
        return 1, f"{self.command}: error: {where}{''.join(lines).rstrip()}"


def require_evaluation_library() -> None:
    """sacrebleu, which a run's evaluation (BLEU and chrF) needs: its absence said before any work."""
    require("a training run's evaluation (BLEU and chrF)", "sacrebleu")


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


def train_settings(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """section -> field -> value of the settings given: a --config file's, then the flags' over them.
    Those of a new run are refused here, before any work (the corpus read, --out claimed), where
    they cannot make a run: settings that exclude each other, a width its heads do not divide."""
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
    if not getattr(args, "resume", False):
        took_part = {
            section: bool(set(from_file.get(section, {})) - set(given[section])) for section in given
        }
        with _naming_the_file(args.config if took_part["train"] else None):
            train = TrainConfig(**settings["train"]).resolve()
        with _naming_the_file(args.config if took_part["model"] else None):
            model = ModelConfig.from_mapping(settings["model"])
            if train.data is None:  # a generated task's sizes are known before any work: chosen now
                model.resolve()
            elif train.from_run is None:  # a corpus's width is chosen once it is read: its heads checked now
                model.refuse_heads_for_corpus(train.time_budget)
    return settings


@contextmanager
def _naming_the_file(config: str | None) -> Iterator[None]:
    """A refusal inside the block names the --config file ``config`` whose settings took part in it."""
    try:
        yield
    except (ValueError, TypeError) as error:
        if config is None:
            raise
        raise type(error)(f"{error} (with the settings of --config {config})") from None


def _from_the_file(args: argparse.Namespace) -> bool:
    """Whether settings of a --config file are in effect (not every one replaced by a flag)."""
    if not args.config:
        return False
    from_file, given = read_config_file(args.config), given_settings(args)
    return any(set(from_file.get(section, {})) - set(given[section]) for section in given)


# a --config file's settings that belong to its task or corpus: dropped when a flag names another
TASK_TIED = ("tokenizer", "vocab_size", "max_length", "bpe_dropout", "shared_vocab")


class _InterruptedBeforeTraining(Exception):
    """Ctrl-C (exit status 130) or SIGTERM (143) while the run was being built: nothing of it was
    written."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class _Terminated(KeyboardInterrupt):
    """SIGTERM while the run is being built, raised where Ctrl-C raises KeyboardInterrupt."""


@contextmanager
def _terminated_as_interrupted() -> Iterator[None]:
    """SIGTERM (a kill, a scheduler's limit) stops a run that is being built as Ctrl-C does: the run
    directory is released, its lock and the directories its claim made removed, where the signal's
    default action ended the process at once and left them. Training's own handlers take over in fit."""
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread alone
        yield
        return

    def terminate(signum: int, frame: object) -> None:
        raise _Terminated

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
