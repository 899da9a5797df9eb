"""What the commands share: argument types, the parser that refuses in one line, the backend and
decoding options, and the decoding the flags ask for."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from ...files import refuse_empty
from ..distributed import launched_rank
from ..translating import Decoding

DEFAULT_OUT = "runs/numbers-en-fr"


BROKEN_PIPE = 141  # the exit code when the reader of standard output has gone: 128 + SIGPIPE, as cat's


CHECKPOINT_HELP = (
    "a run directory (its model.npz, the last checkpoint, is read: said on standard error) or a "
    "checkpoint file (best.npz, the best on dev; step-*.npz; an average); default: "
    f"{DEFAULT_OUT}, where train saves by default"
)


def say_checkpoint_read(command: str, given: str | Path) -> None:
    """Where ``--checkpoint`` named a run directory, one line on standard error naming the file read
    (its model.npz, the last checkpoint) and the run's best.npz where it has one: a directory does
    not say which of its checkpoints it stands for."""
    from ..run.checkpoint import resolve_path
    from ..run.directory import BEST_NAME

    given = Path(given)
    if not given.is_dir():
        return
    best = given / BEST_NAME
    also = f"; {best} is the best on dev" if best.is_file() else ""
    print(
        f"numpy-transformer {command}: note: read {resolve_path(given)}, the run's last checkpoint{also}",
        file=sys.stderr,
    )


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


positive_int = _int_at_least(1, "a positive integer")


non_negative_int = _int_at_least(0, "an integer >= 0")


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


class Parser(argparse.ArgumentParser):
    """An argument parser whose refusals are one line, pointing to --help instead of printing the
    usage, and that takes only whole option names (an abbreviation is refused, never guessed)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{**kwargs, "allow_abbrev": False})

    def error(self, message: str) -> NoReturn:
        # under mpiexec every rank parses the same arguments: rank 0 alone says what is wrong
        said = f"{self.prog}: error: {message} (see {self.prog} --help)\n" if launched_rank() == 0 else None
        self.exit(2, said)


def parse_arguments(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parser.parse_args(argv)``, but an argument that no option takes is refused by the command it
    was given to, which names its own --help ("numpy-transformer plot curves: error: unrecognized
    arguments: ..."), where argparse's refusal names the program and its list of commands."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        chosen_parsers(parser, args)[-1].error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def chosen_parsers(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> list[argparse.ArgumentParser]:
    """``parser`` and the parser of each (sub)command ``args`` chose under it, in that order."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = getattr(args, action.dest, None)
            if chosen in action.choices:
                return [parser, *chosen_parsers(action.choices[chosen], args)]
    return [parser]


# the arguments that are text, not paths: an empty sentence has its own refusal, by position
TEXT_ARGUMENTS = ("sentences", "sentence", "names", "name")


def refuse_empty_paths(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse, through the (sub)command's parser, a path argument given as '': ``--out ""`` would
    be the working directory, and an empty argument is most often a shell variable left unset."""
    for level in chosen_parsers(parser, args):
        for action in level._actions:
            value = getattr(args, action.dest, None)
            values = value if isinstance(value, list) else [value]
            if (
                action.dest in TEXT_ARGUMENTS
                or isinstance(action, argparse._SubParsersAction)
                or "" not in values
            ):
                continue
            name = "/".join(action.option_strings) or action.metavar or action.dest.upper()
            where = (
                f" (argument {values.index('') + 1})" if isinstance(value, list) and len(value) > 1 else ""
            )
            try:
                refuse_empty("", str(name), where)
            except ValueError as empty:
                level.error(str(empty))


def add_backend(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--backend",
        choices=["numpy", "cupy"],
        default=None,
        help="array backend (default: $NUMPY_TRANSFORMER_BACKEND, else numpy); cupy runs on a CUDA GPU",
    )


class _DefaultInt(int):
    """A flag's default value, told apart from the same value typed (which is a plain int)."""


class _DefaultFloat(float):
    """A flag's default value, told apart from the same value typed (which is a plain float)."""


STRATEGY_OPTIONS = {  # the flags that apply to one strategy only
    "beam": ("beam_width", "length_penalty", "beam_style", "early_stopping"),
    "sample": ("temperature", "top_k", "top_p", "seed"),
}


# --early-stopping's words: beam_search's early_stopping (BeamOptions)
EARLY_STOPPING: dict[str, bool | str] = {"true": True, "false": False, "never": "never"}


def _typed(args: argparse.Namespace, name: str) -> bool:
    value = getattr(args, name, None)
    if name == "beam_style":
        return value not in (None, "default")
    return value is not None and not isinstance(value, (_DefaultInt, _DefaultFloat))


def add_decode_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--strategy",
        choices=["greedy", "sample", "beam"],
        default=None,
        help="default: beam for a subword (bpe, marian) model, as the paper evaluates; greedy for the others",
    )
    p.add_argument(
        "--beam-width",
        type=positive_int,
        default=_DefaultInt(4),
        help="beam search's width: the partial translations kept at each step (default 4)",
    )
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
        "--early-stopping",
        choices=list(EARLY_STOPPING),
        default=None,
        help="when beam search ends (default: true for --beam-style default; false, generate()'s, for "
        "transformers): true: once the best translations have ended, of --beam-style "
        "transformers once --beam-width have (CTranslate2's beam search is --beam-style transformers "
        "--early-stopping true); false: once every beam has ended, of transformers once no running beam "
        "can beat the ended ones at its length; never (transformers only): as false, a running beam "
        "bounded at --max-len",
    )
    p.add_argument(
        "--temperature",
        type=_positive_float,
        default=_DefaultFloat(1.0),
        help="softmax temperature (sampling only)",
    )
    p.add_argument(
        "--top-k",
        type=positive_int,
        default=None,
        help="sample from the k most likely tokens (sampling only)",
    )
    p.add_argument("--top-p", type=_probability, default=None, help="nucleus sampling mass (sampling only)")
    p.add_argument(
        "--max-len", type=positive_int, default=None, help="default: the model's target table length"
    )
    p.add_argument(
        "--seed", type=non_negative_int, default=_DefaultInt(0), help="sampling seed (sampling only)"
    )
    p.add_argument(
        "--no-repeat-ngram",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="never repeat an n-gram of N tokens in one translation (0: off)",
    )


def asked_decoding(args: argparse.Namespace, tokenizer: Any) -> Decoding:
    """The decoding the flags ask for; without --strategy, beam search for a subword model (and for
    --n-best)."""
    from .. import decoding

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
        return Decoding(decoding.greedy_decode, common)
    if strategy == "beam":
        beam = {"beam_width": args.beam_width, "length_penalty": args.length_penalty}
        style = {"style": args.beam_style} if args.beam_style != "default" else {}
        stopping = args.early_stopping
        if stopping == "never" and args.beam_style != "transformers":
            raise ValueError(
                f"--early-stopping never applies to --beam-style transformers only, not to --beam-style "
                f"{args.beam_style} (give true or false)"
            )
        ending = {} if stopping is None else {"early_stopping": EARLY_STOPPING[stopping]}
        return Decoding(decoding.beam_search, {**beam, **style, **ending, **common})
    sampling = {"temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p, "seed": args.seed}
    return Decoding(decoding.sample_decode, {**sampling, **common})
