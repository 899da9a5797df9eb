"""A training run's configuration: every setting declared once, as a dataclass field.

Each field carries its type, default, range and help. From them come the ``train`` command's
flags (``add_arguments``), the checks every value passes whatever its source (a flag, a
``--config`` file or Python), the file a run saves beside its checkpoint (``config.toml``, which
``--config`` reads back), and what ``--resume`` may change (``on_resume``). The settings of the
architecture are declared by the model's TransformerConfig: ModelConfig's fields are made from its
fields, with the help of their flags (MODEL_FLAGS)::

    model = ModelConfig(d_model=256, N=3)
    train = TrainConfig(data="corpus.tsv", batch_size=32)

A field whose default is None is chosen by the run (``TrainConfig.resolve``): the saved
configuration holds the value that was chosen.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import typing
from collections.abc import Mapping
from dataclasses import Field, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ..files import refuse_empty
from ..model import TransformerConfig
from .corpora import MAX_LENGTH
from .tokenizers import BPE_VOCAB_RANGE

TASKS = ("copy", "reverse", "numbers-en-fr")
TASK_TOKENIZERS = {"copy": "char", "reverse": "char", "numbers-en-fr": "word"}  # what a --task is written in
DEFAULT_TASK = "numbers-en-fr"
TASK_STEPS = 3000  # a generated task's default length
# evaluations without a better dev BLEU before a --data run stops: BLEU on a few hundred dev pairs
# moves a point or two between evaluations, and 4 stopped a German run still improving (docs/results.md)
DATA_PATIENCE = 8
DATA_TIME_BUDGET = 15.0  # minutes a --data run trains for when --steps is not given
TASK_LR = 1e-3
DATA_LR = 2e-3  # a budget of minutes on a corpus learns most at a higher peak (docs/results.md)
# a new model trained on --data: AdamW, whose decay scored higher than plain Adam on both message
# corpora in the 15-minute budget (docs/results.md)
DATA_OPTIMIZER = "adamw"
DATA_WEIGHT_DECAY = 0.3
# train --from: fine-tuning a trained model moves it a little (OPUS-MT fine-tunes use 1e-5 to 1e-4)
FROM_LR = 5e-5
WARMUP = 200  # warm-up steps of a new model
FROM_WARMUP = 10  # train --from: a pretrained model needs little, and a large one makes few steps in minutes
AVERAGE_LAST = 5  # evaluation checkpoints averaged at the end of a run


MODEL_SIZES = ("d_model", "N", "h", "d_ff", "dropout")  # chosen by the run when not given
TASK_SIZES = {"d_model": 128, "N": 2, "h": 4, "d_ff": 512, "dropout": 0.1}  # the generated tasks' model
_SIZES = "chosen from the corpus with --data (sizes_for_corpus), else"


class Flag(NamedTuple):
    """How the train command shows a setting of the architecture: its help, and its flag where that
    is not --field-name."""

    help: str
    name: str | None = None


# The settings of the architecture a run may give, in the order the train command lists them: each
# is a field of TransformerConfig, which declares it (its type, default and checks); here is how the
# command shows it. TransformerConfig's other fields are the task's to decide (Trainer.create): the
# vocabularies' sizes and their sharing, the positional tables' lengths.
MODEL_FLAGS = {
    "d_model": Flag("model width"),
    "N": Flag("encoder and decoder blocks", "--layers"),
    "h": Flag("attention heads", "--heads"),
    "d_ff": Flag("feed-forward hidden width"),
    "dropout": Flag("dropout probability"),
    "attention": Flag("multi-head (mha) or multi-head latent attention (mla)"),
    "norm_first": Flag(
        "the paper's post-norm instead of the default pre-norm (the from-scratch design's choice)",
        "--post-norm",
    ),
    "tie_embeddings": Flag(
        "one matrix for the target embedding and the pre-softmax projection (and the source embedding "
        "with --shared-vocab), as the paper does"
    ),
    "dtype": Flag("floating-point type of weights and activations"),
    # the options a pretrained Marian (OPUS-MT) translator needs; an imported run sets them
    "activation": Flag("the feed-forward blocks' activation (silu: Marian's swish)"),
    "attention_bias": Flag("biases on the attention projections W_q, W_k, W_v, W_o (mha)"),
    "positions": Flag(
        "the sinusoids' layout: the paper's interleaved sines and cosines, or Marian's sines then cosines (split)"
    ),
    "final_norm": Flag(
        "no layer normalisation after the last encoder and decoder blocks (Marian's post-norm models end "
        "without one)",
        "--no-final-norm",
    ),
    "padding_idx": Flag(
        "a token id whose embedding lookups pass no gradient, as PyTorch's nn.Embedding(padding_idx=...) "
        "(an imported Marian model's <pad>)"
    ),
}


def sizes_for_corpus(train_pairs: int, minutes: float | None) -> dict[str, Any]:
    """The model a corpus of ``train_pairs`` pairs gets for a budget of ``minutes`` (None: a run
    of fixed steps, sized as for the default budget).

    The width is what the budget can train: on two CPU cores a 15-minute run makes a few thousand
    steps and is still short of them at its end (docs/results.md's corpus figures), so it keeps the
    128-wide two-layer model; hours on a large corpus get a wider, deeper one (a rule, not measured). Dropout grows
    with the passes the budget makes over the corpus (pairs per minute few: many passes, more to
    overfit). At 2,000 pairs a minute and more (10 to 15 passes in 15 minutes) none: there, on the
    German and French message corpora, dropout 0 scored higher than 0.1, and 0.3 far lower; a
    third layer (fewer steps in the budget) scored lower, a 192-wide model no higher (docs/results.md).
    The subword vocabulary grows with the corpus: data.subword_vocab_size.
    """
    minutes = DATA_TIME_BUDGET if minutes is None else minutes
    if minutes >= 240 and train_pairs >= 1_000_000:
        sizes = {"d_model": 512, "N": 6, "h": 8, "d_ff": 2048}  # the paper's base model
    elif minutes >= 60 and train_pairs >= 100_000:
        sizes = {"d_model": 256, "N": 3, "h": 4, "d_ff": 1024}
    else:
        sizes = {"d_model": 128, "N": 2, "h": 4, "d_ff": 512}
    pairs_per_minute = train_pairs / minutes
    dropout = 0.0 if pairs_per_minute >= 2000 else 0.2 if pairs_per_minute >= 500 else 0.3
    return sizes | {"dropout": dropout}


class SettingTypeError(TypeError, ValueError):
    """A setting of the wrong type: a TypeError, and a ValueError like every other bad setting."""


def setting(
    default: Any,
    help: str,
    *,
    flag: str | None = None,
    choices: tuple[str, ...] | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
    below: float | None = None,
    on_resume: bool = False,
) -> Any:
    """A dataclass field with what the command line and the checks need to know of it.

    ``minimum`` and ``maximum`` are inclusive bounds, ``above`` and ``below`` exclusive ones; ``flag``
    overrides ``--field-name``; a bool field whose flag is ``--post-norm`` style (``negated``) stores
    False; ``on_resume`` True lets ``--resume`` change the value (the others must stay as saved).
    """
    meta = {
        "help": help,
        "flag": flag,
        "choices": choices,
        "minimum": minimum,
        "maximum": maximum,
        "above": above,
        "below": below,
    }
    return field(default=default, metadata={**meta, "on_resume": on_resume})


def flag_of(item: Any) -> str:
    """The command-line flag of a field: ``--batch-size`` for batch_size unless it names another."""
    return item.metadata.get("flag") or "--" + item.name.replace("_", "-")


def _value_type(cls: type, name: str) -> tuple[type, bool]:
    """(the field's value type, whether None is allowed), from its annotation."""
    hint = typing.get_type_hints(cls)[name]
    args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    return (args[0] if args else hint), type(None) in typing.get_args(hint)


def expected(cls: type, item: Any) -> str:
    """What a field accepts, in words: "a positive integer", "a number in [0, 1)", "one of a, b"."""
    kind, _ = _value_type(cls, item.name)
    meta = item.metadata
    low, high, above, below = meta.get("minimum"), meta.get("maximum"), meta.get("above"), meta.get("below")
    if meta.get("choices"):
        return "one of " + ", ".join(meta["choices"])
    if kind is bool:
        return "true or false"
    if kind is str:
        return "a string"
    if kind is int and low is not None and high is not None:
        return f"an integer in [{low}, {high}]"
    if kind is int:
        return (
            "a positive integer" if low == 1 else f"an integer >= {low}" if low is not None else "an integer"
        )
    if above is not None and high is not None:
        return f"a number in ({above:g}, {high:g}]"
    if low is not None and below is not None:
        return f"a number in [{low:g}, {below:g})"
    if above == 0:
        return "a positive finite number"
    return f"a finite number >= {low:g}" if low is not None else "a finite number"


def check_value(cls: type, item: Any, value: Any, where: str = "") -> Any:
    """``value`` for the field ``item`` of ``cls``, checked; a ValueError/TypeError names the setting
    (``where`` says where it came from), the value and what was expected. Ints are accepted as floats."""
    kind, optional = _value_type(cls, item.name)
    # the name Python and a --config file use (argparse's messages name the flag)
    name = f"{where}{item.name}"
    if value is None:
        if optional:
            return None
        raise SettingTypeError(f"{name} must be {expected(cls, item)}, got None")
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if kind is int and hasattr(value, "__index__") and not isinstance(value, bool):
        value = int(value)  # a NumPy integer
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise SettingTypeError(
            f"{name} must be {expected(cls, item)}, got {value!r} ({type(value).__name__})"
        )
    meta = item.metadata
    if (
        (isinstance(value, float) and not math.isfinite(value))
        or (meta.get("choices") and value not in meta["choices"])
        or (meta.get("minimum") is not None and value < meta["minimum"])
        or (meta.get("maximum") is not None and value > meta["maximum"])
        or (meta.get("above") is not None and value <= meta["above"])
        or (meta.get("below") is not None and value >= meta["below"])
    ):
        raise ValueError(f"{name} must be {expected(cls, item)}, got {value!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup, cls: type, section: str) -> None:
    """One flag per field of ``cls``; a flag not given leaves no attribute (given_settings reads them)."""
    for item in fields(cls):
        kind, _ = _value_type(cls, item.name)
        shown = "" if item.default is None or kind is bool else f" (default: {item.default})"
        options: dict[str, Any] = {"dest": f"{section}.{item.name}", "default": argparse.SUPPRESS}
        if kind is bool:
            options["action"] = "store_false" if item.default else "store_true"
        else:
            options.update(type=_argument_type(cls, item, kind), metavar=item.name.upper())
            if item.metadata.get("choices"):
                options.update(metavar="{" + ",".join(item.metadata["choices"]) + "}")
        parser.add_argument(flag_of(item), help=item.metadata["help"] + shown, **options)


def _argument_type(cls: type, item: Any, kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected(cls, item)}, got {text!r}") from None
        try:
            return check_value(cls, item, value)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"expected {expected(cls, item)}, got {value}") from None

    return parse


def given_settings(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """section -> field -> value, of the settings given on the command line (add_arguments' flags)."""
    given: dict[str, dict[str, Any]] = {section: {} for section in SECTIONS}
    for dest, value in vars(args).items():
        section, _, name = dest.partition(".")
        if section in SECTIONS and name:
            given[section][name] = value
    return given


class _Checked:
    """Every field checked, whoever made the dataclass (a flag, a file, a checkpoint, Python)."""

    def __post_init__(self) -> None:
        for item in fields(self):  # type: ignore[arg-type]
            object.__setattr__(self, item.name, check_value(type(self), item, getattr(self, item.name)))

    @classmethod
    def from_mapping(cls, values: dict[str, Any], where: str = "") -> Any:
        """The dataclass from a mapping of field names, refusing an unknown name by name."""
        known = {item.name for item in fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"{where}unknown setting {unknown[0]!r}; the settings are: {', '.join(sorted(known))}"
            )
        return cls(**values)


def _settings_of_the_architecture(cls: type) -> type:
    """Give ``cls`` a field for each setting of MODEL_FLAGS, made from TransformerConfig's field: its
    type, default and checks (None the default of the MODEL_SIZES, which the run chooses), and the
    flag MODEL_FLAGS gives it."""
    architecture = {item.name: item for item in fields(TransformerConfig)}
    cls.__annotations__ = {}
    for name, flag in MODEL_FLAGS.items():
        item, chosen = architecture[name], name in MODEL_SIZES
        shown = f"{flag.help} (default {_SIZES} {TASK_SIZES[name]:g})" if chosen else flag.help
        cls.__annotations__[name] = f"{item.type} | None" if chosen else item.type
        setattr(cls, name, setting(None if chosen else item.default, shown, flag=flag.name, **item.metadata))
    return cls


@dataclass(frozen=True)
@_settings_of_the_architecture
class ModelConfig(_Checked):
    """The model's settings a run may give: TransformerConfig's fields that its task does not decide,
    with their types, defaults and checks, the sizes (MODEL_SIZES) left to the run unless given."""

    if TYPE_CHECKING:  # the fields are made from TransformerConfig's when the module loads

        def __init__(self, **settings: Any) -> None: ...
        def __getattr__(self, name: str) -> Any: ...

    def resolve(self, train_pairs: int | None = None, minutes: float | None = None) -> ModelConfig:
        """Every size not given filled in: for a corpus of ``train_pairs`` training pairs and a
        budget of ``minutes``, by ``sizes_for_corpus``; for a generated task (None), TASK_SIZES."""
        chosen: dict[str, Any] = TASK_SIZES if train_pairs is None else sizes_for_corpus(train_pairs, minutes)
        sizes = {
            name: chosen[name] if getattr(self, name) is None else getattr(self, name) for name in MODEL_SIZES
        }
        if self.h is None:  # with a width given alone, the most heads up to the chosen number that divide it
            sizes["h"] = max(h for h in range(1, sizes["h"] + 1) if sizes["d_model"] % h == 0)
        return replace(self, **sizes)

    @classmethod
    def from_model(cls, config: TransformerConfig | Mapping[str, Any]) -> ModelConfig:
        """The fields of a built model's configuration (Transformer.config, or a checkpoint's
        ``"model"``: it holds the sizes too)."""
        values = asdict(config) if isinstance(config, TransformerConfig) else config
        return cls(**{item.name: values[item.name] for item in fields(cls) if item.name in values})


# a bucket's pairs are drawn, tokenised and sorted before its first step: about 10 s a million
MAX_BUCKET_STEPS, MAX_BUCKET_PAIRS = 10_000, 1_000_000


@dataclass(frozen=True)
class TrainConfig(_Checked):
    """Everything that decides a run besides the model's shape: data, optimisation, the run itself."""

    # -- data
    task: str | None = setting(None, f"generated task (default {DEFAULT_TASK} unless --data)", choices=TASKS)
    data: str | None = setting(None, "parallel text, one 'source<TAB>target' pair per line")
    from_run: str | None = setting(
        None,
        "fine-tune: start from the model, tokenizer and vocabularies of this run (an imported translator's, "
        "or any run's; its directory or a .npz) on --data, a new run with an optimiser of its own",
        flag="--from",
    )
    tokenizer: str | None = setting(
        None,
        "default: bpe (subwords) for --data, char for copy/reverse, word for numbers-en-fr, the run's own "
        "with --from (marian: an imported Marian model's)",
        choices=("char", "word", "bpe", "marian"),
    )
    vocab_size: int | None = setting(
        None,
        "subword units learned by --tokenizer bpe, source and target together (default: chosen from the "
        "corpus's size, data.subword_vocab_size)",
        minimum=BPE_VOCAB_RANGE[0],
        maximum=BPE_VOCAB_RANGE[1],
    )
    shared_vocab: bool = setting(False, "one vocabulary for source and target (--data)")
    bpe_dropout: float = setting(
        0.0,
        "BPE-dropout: each merge of a training sentence's subwords is skipped with this probability, so "
        "that every step sees its sentences in other segmentations (dev, test and translate never)",
        minimum=0.0,
        below=1.0,
    )
    max_length: int | None = setting(
        None,
        f"--data pairs with more tokens than this on a side are left out, and counted (default {MAX_LENGTH})",
        minimum=1,
    )
    # -- optimisation
    steps: int | None = setting(
        None,
        f"optimizer steps in all (default: {TASK_STEPS} for a --task; a --data run trains for --time-budget)",
        minimum=1,
        on_resume=True,
    )
    time_budget: float | None = setting(
        None,
        f"minutes the run may take in all, reading the corpus and evaluations included, instead of --steps "
        f"(default {DATA_TIME_BUDGET:g} with --data): the steps are planned from the measured speed",
        above=0.0,
        on_resume=True,
    )
    batch_size: int = setting(64, "sentence pairs per batch", minimum=1)
    batch_tokens: int | None = setting(
        None,
        "batches of about this many target tokens instead of --batch-size pairs (the paper's batching)",
        minimum=1,
    )
    accumulate: int = setting(
        1, "micro-batches per optimiser step: the gradient of one K-times larger batch", minimum=1
    )
    optimizer: str | None = setting(
        None,
        f"Adam, or AdamW with decoupled weight decay (default {DATA_OPTIMIZER} for a new model on --data, "
        "else adam)",
        choices=("adam", "adamw"),
    )
    lr: float | None = setting(
        None,
        f"peak learning rate (cosine, constant; default {DATA_LR:g} with --data, {FROM_LR:g} with --from, "
        f"else {TASK_LR:g})",
        above=0.0,
    )
    schedule: str = setting("cosine", "learning-rate schedule", choices=("cosine", "noam", "constant"))
    warmup: int | None = setting(
        None, f"warm-up steps (default {WARMUP}; {FROM_WARMUP} with --from, a fine-tune)", minimum=1
    )
    factor: float = setting(1.0, "scale of the noam schedule", above=0.0)
    min_lr: float = setting(0.0, "the cosine schedule's final learning rate", minimum=0.0)
    weight_decay: float | None = setting(
        None,
        f"AdamW's decoupled weight decay of the weight matrices (default {DATA_WEIGHT_DECAY:g} for a new "
        "model on --data, else 0)",
        minimum=0.0,
    )
    clip: float = setting(1.0, "global gradient-norm clip (0: off)", minimum=0.0)
    label_smoothing: float = setting(0.1, "label smoothing of the loss", minimum=0.0, below=1.0)
    bucket_steps: int = setting(
        100, "batches drawn together and sorted by length, to pad less", minimum=1, maximum=MAX_BUCKET_STEPS
    )
    # -- the run
    eval_every: int = setting(500, "steps between dev evaluations (and checkpoints)", minimum=1)
    eval_size: int = setting(200, "dev pairs per evaluation", minimum=1)
    eval_examples: int = setting(
        2, "dev translations shown beside their references at each evaluation", minimum=0
    )
    log_every: int = setting(50, "steps between log records", minimum=1)
    keep_checkpoints: int = setting(
        0,
        "keep the last N evaluation checkpoints (step-*.npz) after the run, for `average` (while it runs, "
        "it keeps the larger of this and --average-last)",
        minimum=0,
    )
    average_last: int = setting(
        AVERAGE_LAST,
        "at the end, average the last N evaluation checkpoints of the run's second half and keep the "
        "average as best.npz when its dev BLEU is higher than the best single one's (below 2: off)",
        minimum=0,
    )
    patience: int | None = setting(
        None,
        f"stop when dev BLEU has not improved for N evaluations (0: never; default {DATA_PATIENCE} with "
        "--data, else 0)",
        minimum=0,
    )
    plateau_cut: float = setting(
        1.0,
        "multiply the learning rate by this when dev BLEU has not improved for --plateau-patience "
        "evaluations, and again after as many more, never below --lr-floor (1: never)",
        above=0.0,
        maximum=1.0,
    )
    plateau_patience: int = setting(
        2, "evaluations without a better dev BLEU before --plateau-cut cuts the learning rate", minimum=1
    )
    lr_floor: float = setting(
        1e-5,
        "the lowest learning rate --plateau-cut leads to (the schedule itself may go lower: its warm-up, "
        "the cosine's end)",
        minimum=0.0,
    )
    seed: int = setting(0, "seed of the initial weights, the batches and dropout", minimum=0)
    threads: int = setting(
        0,
        "batch shards trained at once on their own threads (0: one per core when the batch is large enough); "
        "fix it for runs that must replay exactly on another machine",
        minimum=0,
        on_resume=True,
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.task is not None and self.data is not None:
            raise ValueError(
                f"give a generated task or --data, not both (task {self.task!r}, data {self.data!r})"
            )
        # a run is resumed, evaluated and plotted from any working directory
        for name in ("data", "from_run"):
            refuse_empty(getattr(self, name), flag_of(_FIELDS[name]))  # not the working directory
            if getattr(self, name) is not None:
                object.__setattr__(self, name, str(Path(getattr(self, name)).expanduser().resolve()))
        # None: bpe or, with --from, the run's own (Trainer.create checks that one)
        if self.bpe_dropout and self.tokenizer not in (None, "bpe"):
            raise ValueError(
                f"--bpe-dropout {self.bpe_dropout:g} applies to learned BPE subwords (--tokenizer bpe) only, not "
                f"to --tokenizer {self.tokenizer}"
                + (f" (the tokenizer of --from {self.from_run})" if self.from_run else "")
            )
        # a batch too large alone is the memory estimate's to refuse, saying how much it needs
        if (
            self.batch_tokens is None
            and self.batch_size <= MAX_BUCKET_PAIRS < self.bucket_steps * self.batch_size
        ):
            raise ValueError(
                f"--bucket-steps {self.bucket_steps} with --batch-size {self.batch_size} draws "
                f"{self.bucket_steps * self.batch_size} pairs at once, expected at most {MAX_BUCKET_PAIRS}: "
                "give a smaller --bucket-steps"
            )
        pairs_a_step = self.accumulate * self.batch_size  # every micro-batch of a step is drawn before it
        if self.batch_tokens is None and self.batch_size <= MAX_BUCKET_PAIRS < pairs_a_step:
            raise ValueError(
                f"--accumulate {self.accumulate} with --batch-size {self.batch_size} draws {pairs_a_step} "
                f"pairs a step, expected at most {MAX_BUCKET_PAIRS}: give a smaller --accumulate"
            )
        patience = DATA_PATIENCE if self.patience is None and self.data else self.patience
        if self.plateau_cut < 1.0 and patience and self.plateau_patience >= patience:
            raise ValueError(
                f"--plateau-patience {self.plateau_patience} is not below --patience {patience}: the "
                "run would stop before it cuts its learning rate; give a smaller --plateau-patience or a "
                "larger --patience (0: never stop)"
            )

    def _check_rates(self) -> None:
        """Refuse a cosine that would climb to --min-lr, and a --lr-floor that leaves --plateau-cut
        nothing to cut, once the peak is known (resolve's, for a new run only: a run saved before
        these refusals resumes). The noam schedule's peak is not --lr: its rates are not compared."""
        if self.lr is None or self.schedule == "noam":
            return
        if self.schedule == "cosine" and self.min_lr > self.lr:
            raise ValueError(
                f"--min-lr {self.min_lr:g} is above --lr {self.lr:g}: the cosine schedule would climb to it "
                "instead of decaying; give a --min-lr below --lr"
            )
        if self.plateau_cut < 1.0 and self.lr_floor >= self.lr:
            raise ValueError(
                f"--lr-floor {self.lr_floor:g} is not below --lr {self.lr:g}: --plateau-cut "
                f"{self.plateau_cut:g} could never cut the learning rate; give a --lr-floor below --lr"
            )

    def resolve(self, *, saved: bool = False) -> TrainConfig:
        """The configuration with every setting the run chooses filled in; refuses settings that
        cannot apply to the chosen task instead of dropping them. Without --steps, a --data run
        has a time budget, and the Trainer plans its steps to fit it (training.TimeBudget).

        ``saved``: the settings of a saved run read back (Trainer.resume), which the rates a new run
        is refused (a --min-lr above --lr, a --lr-floor not below it) never refuse: the run was
        saved before those refusals, or with them.
        """
        resolved = self._resolved()
        if not saved:
            resolved._check_rates()
        return resolved

    def _resolved(self) -> TrainConfig:
        """resolve's settings, its rates unchecked."""
        if self.steps is not None and self.time_budget is not None:
            raise ValueError(
                f"give --steps or --time-budget, not both (steps {self.steps}, time-budget {self.time_budget:g})"
            )
        if self.from_run is not None and self.data is None:
            raise ValueError(f"--from {self.from_run} fine-tunes on a corpus of yours: give --data FILE.tsv")
        if self.tokenizer == "marian" and self.from_run is None:
            raise ValueError(
                "--tokenizer marian is an imported Marian model's own: fine-tune that model with "
                "--from RUN (numpy-transformer import DIR --out RUN writes the run)"
            )
        optimizer, weight_decay = self._optimizer()
        if self.data is None:
            task = self.task or DEFAULT_TASK
            not_applicable = [
                name
                for name, value in (
                    ("vocab-size", self.vocab_size),
                    ("max-length", self.max_length),
                    ("bpe-dropout", self.bpe_dropout or None),
                )
                if value is not None
            ] + (["shared-vocab"] if self.shared_vocab else [])
            if not_applicable:
                raise ValueError(
                    f"--{not_applicable[0]} applies to --data corpora only, not to the task {task}"
                )
            tokenizer = self.tokenizer or TASK_TOKENIZERS[task]
            if task != "numbers-en-fr" and tokenizer != "char":
                raise ValueError(
                    f"the task {task} is written in characters: --tokenizer {tokenizer} does not apply"
                )
            if tokenizer == "bpe":
                raise ValueError("--tokenizer bpe learns from a corpus: give --data FILE.tsv")
            return replace(
                self,
                task=task,
                tokenizer=tokenizer,
                steps=self.steps or (None if self.time_budget else TASK_STEPS),
                lr=self.lr or TASK_LR,
                warmup=self.warmup or WARMUP,
                optimizer=optimizer,
                weight_decay=weight_decay,
                patience=0 if self.patience is None else self.patience,
            )
        # --from: the run's own tokenizer and vocabularies (Trainer.create fills them in)
        chosen = self.tokenizer or (None if self.from_run else "bpe")
        if chosen not in ("bpe", None) and self.vocab_size is not None:
            raise ValueError(f"--vocab-size applies to --tokenizer bpe only, not {chosen}")
        return replace(
            self,
            tokenizer=chosen,
            # None: the corpus chooses (a --from run: the run's own)
            vocab_size=self.vocab_size if chosen in ("bpe", None) else None,
            max_length=self.max_length or MAX_LENGTH,
            lr=self.lr or (FROM_LR if self.from_run else DATA_LR),
            warmup=self.warmup or (FROM_WARMUP if self.from_run else WARMUP),
            optimizer=optimizer,
            weight_decay=weight_decay,
            time_budget=DATA_TIME_BUDGET
            if self.steps is None and self.time_budget is None
            else self.time_budget,
            patience=DATA_PATIENCE if self.patience is None else self.patience,
        )

    def _optimizer(self) -> tuple[str, float]:
        """The optimiser and weight decay the run uses: AdamW with DATA_WEIGHT_DECAY for a new model
        on --data, Adam (no decay) otherwise, unless given; a decay given to Adam is refused."""
        new_model_on_data = self.data is not None and self.from_run is None
        optimizer = self.optimizer or (DATA_OPTIMIZER if new_model_on_data else "adam")
        if optimizer == "adam" and self.weight_decay:
            chosen = "--optimizer adam" if self.optimizer else "Adam, this run's default optimiser"
            raise ValueError(
                f"--weight-decay {self.weight_decay:g} applies to --optimizer adamw only, not to {chosen}"
            )
        if self.weight_decay is not None:
            return optimizer, self.weight_decay
        return optimizer, DATA_WEIGHT_DECAY if new_model_on_data and optimizer == "adamw" else 0.0


_FIELDS = {item.name: item for item in fields(TrainConfig)}
SECTIONS: dict[str, Any] = {"model": ModelConfig, "train": TrainConfig}
MAX_CONFIG_BYTES = 1 << 20  # a --config file is read up to this size


def read_config_file(path: str | Path) -> dict[str, dict[str, Any]]:
    """``{"model": {...}, "train": {...}}`` from a TOML file of [model] and [train] tables (a run's
    config.toml is one), each value checked; an unknown table or key is named with the file."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib

    path = Path(path)
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_CONFIG_BYTES + 1)  # /dev/zero, or a corpus given by mistake: bounded
    except OSError as error:
        raise ValueError(f"--config {path}: cannot be read ({error.strerror or error})") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ValueError(
            f"--config {path}: larger than {MAX_CONFIG_BYTES // 1024} KiB, expected a TOML file of [model] "
            "and [train] settings"
        )
    try:
        text = data.decode("utf-8-sig")  # a byte-order mark, as Notepad writes one, is not a setting
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise ValueError(
            f"--config {path}:{line}: not UTF-8 text (byte {data[error.start]:#04x}); TOML files are UTF-8"
        ) from None
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"--config {path}: not valid TOML ({error})") from None
    sections: dict[str, dict[str, Any]] = {}
    for section, values in document.items():
        cls = SECTIONS.get(section)
        if cls is not None and isinstance(values, list):
            raise ValueError(
                f"--config {path}: [[{section}]] is an array of tables; write the table [{section}] once"
            )
        if cls is None and not isinstance(values, dict):
            where = next(
                (c.__name__ for c in SECTIONS.values() if section in {f.name for f in fields(c)}), None
            )
            table = "[model]" if where == "ModelConfig" else "[train]" if where else "[model] or [train]"
            raise ValueError(
                f"--config {path}: {section} = {values!r} is a setting outside any table; every setting "
                f"belongs under {table}"
            )
        if cls is None or not isinstance(values, dict):
            raise ValueError(
                f"--config {path}: unknown table [{section}]; the tables are [model] and [train]"
            )
        by_name = {item.name: item for item in fields(cls)}
        for key, value in values.items():
            if key not in by_name:
                raise ValueError(
                    f"--config {path}: unknown setting {key!r} in [{section}]; its settings are: "
                    f"{', '.join(by_name)}"
                )
            check_value(cls, by_name[key], value, where=f"--config {path}: [{section}] ")
        sections[section] = dict(values)
    return sections


def toml_string(value: str) -> str:
    """``value`` as a TOML basic string: UTF-8 as it is (an emoji stays one character), the quote,
    the backslash and control characters escaped (TOML has no escape for a lone surrogate)."""
    escaped = []
    for character in value:
        if character in '"\\':
            escaped.append("\\" + character)
        elif ord(character) < 0x20 or ord(character) == 0x7F:
            escaped.append(f"\\u{ord(character):04x}")
        else:
            escaped.append(character)
    return '"' + "".join(escaped) + '"'


def config_toml(model: ModelConfig, train: TrainConfig | None = None) -> str:
    """The run's resolved configuration as a TOML document that ``--config`` reads back (the model
    alone for an imported one)."""
    lines = ["# The configuration this run resolved to: train --config FILE reads it back."]
    for section, config in (("model", model), ("train", train)):
        if config is None:
            continue
        lines.append(f"\n[{section}]")
        for name, value in asdict(config).items():
            if value is None:
                lines.append(f"# {name}: not set")
            elif isinstance(value, bool):
                lines.append(f"{name} = {str(value).lower()}")
            elif isinstance(value, str):
                if any("\ud800" <= c <= "\udfff" for c in value):  # a path of non-UTF-8 bytes
                    shown = (
                        os.fsencode(value) if name in ("data", "from_run") else value.encode(errors="replace")
                    )
                    lines.append(
                        f"# {name}: {ascii(shown)[2:-1]} is not UTF-8 text, which TOML cannot hold: give it "
                        "on the command line"
                    )
                else:
                    lines.append(f"{name} = {toml_string(value)}")
            else:
                lines.append(f"{name} = {value!r}")
    return "\n".join(lines) + "\n"


def setting_differs(item: Field, value: Any, kept: Any, where: str, kept_there: str) -> str:
    """'--flag VALUE differs from KEPT_THERE', or for a flag, as typed: '--flag differs from WHERE,
    which has no --flag'."""
    flag = flag_of(item)
    if isinstance(kept, bool):
        typed, was = (flag if on != item.default else f"no {flag}" for on in (value, kept))
        return f"{typed} differs from {where}, which has {was}"
    return f"{flag} {value!r} differs from {kept_there}"


def resume_conflicts(given: dict[str, dict[str, Any]], saved: dict[str, Any]) -> None:
    """Refuse, naming the flag, a setting given to ``--resume`` whose value differs from the saved
    run's and that ``on_resume`` does not let change. ``given``: section -> field -> value;
    ``saved``: section -> the saved dataclass."""
    for section, values in given.items():
        config = saved[section]
        for item in fields(config):
            if item.name in values and not item.metadata["on_resume"]:
                value, kept = values[item.name], getattr(config, item.name)
                if item.name in ("data", "from_run") and value is not None:
                    value = str(Path(value).expanduser().resolve())
                if value != kept:
                    difference = setting_differs(
                        item, value, kept, "the saved run", f"the saved run's {kept!r}"
                    )
                    raise ValueError(
                        f"{difference}: --resume continues the run as it was saved (only "
                        f"{' and '.join(resumable_flags())} may change); start a new run (another --out, or "
                        "--overwrite) to change it"
                    )


def resumable_flags() -> list[str]:
    """The flags whose settings ``--resume`` may change."""
    return [flag_of(item) for cls in SECTIONS.values() for item in fields(cls) if item.metadata["on_resume"]]


def resumable_fields() -> list[str]:
    """The TrainConfig fields ``--resume`` may change (Trainer.resume takes them by name)."""
    return [item.name for item in fields(TrainConfig) if item.metadata["on_resume"]]


def fine_tune_settings(
    given: TrainConfig,
    config: TrainConfig,
    model: ModelConfig | Mapping[str, Any] | None,
    meta: dict[str, Any],
) -> tuple[dict[str, Any], TrainConfig]:
    """(the model's configuration, the run's settings) of a fine-tune from ``config.from_run``, whose
    checkpoint's metadata is ``meta``: refusing by name a setting given (``given``: before resolve;
    ``model``: the model settings given) that the run decides otherwise: the model (bar dropout),
    the tokenizer and vocabularies, a --max-length beyond its positional tables."""
    path = config.from_run
    saved, recipe = ModelConfig.from_model(meta["model"]), meta["task"]
    # given: a mapping's entries, or a ModelConfig's fields that differ from their defaults
    changes = (
        {
            item.name: getattr(model, item.name)
            for item in fields(ModelConfig)
            if getattr(model, item.name) != item.default
        }
        if isinstance(model, ModelConfig)
        else {name: value for name, value in dict(model or {}).items() if value is not None}
    )
    for item in fields(ModelConfig):
        if (
            item.name in changes
            and item.name != "dropout"
            and changes[item.name] != getattr(saved, item.name)
        ):
            value, kept = changes[item.name], getattr(saved, item.name)
            where = f"the model of --from {path}"
            difference = setting_differs(item, value, kept, where, f"{where} ({kept!r})")
            raise ValueError(
                f"{difference}: a fine-tune keeps the model it starts from (only --dropout may change)"
            )
    shared = bool(meta["model"].get("shared_vocab", False))
    if given.vocab_size is not None and recipe.get("vocab_size") is None:  # no subwords of its own learned
        src, tgt = len(meta["src_vocab"]), len(meta["tgt_vocab"])
        kind = "SentencePiece (Marian) " if recipe.get("tokenizer") == "marian" else ""
        units = (
            f"vocabulary of {src:,}"
            if src == tgt
            else f"source and target vocabularies of {src:,} and {tgt:,}"
        )
        raise ValueError(
            f"--vocab-size {given.vocab_size} cannot apply to a fine-tune of --from {path}: it keeps that "
            f"run's {recipe.get('tokenizer')} tokenizer and its {kind}{units} units"
        )
    for flag, value, kept in (
        ("--tokenizer", given.tokenizer, recipe.get("tokenizer")),
        ("--vocab-size", given.vocab_size, recipe.get("vocab_size")),
        ("--shared-vocab", given.shared_vocab or None, shared or None),
    ):
        if value is not None and value != kept:
            raise ValueError(
                f"{flag} {value!r} differs from the run of --from {path} ({kept!r}): a fine-tune keeps its "
                "tokenizer and vocabularies"
            )
    limit = min(meta["model"]["src_seq_len"], meta["model"]["tgt_seq_len"] - 1)  # the target gains <eos>
    if given.max_length is not None and given.max_length > limit:
        raise ValueError(
            f"--max-length {given.max_length} exceeds what the model of --from {path} holds: {limit} "
            "tokens a side (its positional tables)"
        )
    if config.bpe_dropout and recipe["tokenizer"] != "bpe":
        raise ValueError(
            f"--bpe-dropout {config.bpe_dropout:g} applies to learned BPE subwords only: the run of --from "
            f"{path} is tokenized by its {recipe['tokenizer']} tokenizer"
            + (" (an imported Marian model's SentencePiece)" if recipe["tokenizer"] == "marian" else "")
        )
    max_length = min(config.max_length or limit, limit)
    config = replace(
        config,
        tokenizer=recipe["tokenizer"],
        vocab_size=recipe.get("vocab_size"),
        shared_vocab=shared,
        max_length=max_length,
    )
    return {**meta["model"], "dropout": changes.get("dropout", saved.dropout)}, config
