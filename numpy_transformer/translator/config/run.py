"""The run's configuration: ModelConfig (the architecture a run may give) and TrainConfig (everything
else that decides a run), every setting a field declared with ``numpy_transformer.settings.setting``,
and the defaults a run chooses for the settings not given (``resolve``).

A field whose default is None is chosen by the run: the saved configuration holds the value that
was chosen. ModelConfig's fields are TransformerConfig's settings that the task does not decide
(the vocabularies' sizes and their sharing, the positional tables' lengths), with their flags' help;
a test holds the two in agreement (types, defaults, checks). The sizes are the presets'
(``numpy_transformer.presets``)::

    model = ModelConfig(d_model=256, N=3)
    train = TrainConfig(data="corpus.tsv", batch_size=32)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from ...files import refuse_empty
from ...functional import ACTIVATIONS, POSITION_LAYOUTS
from ...model import ATTENTION_KINDS, DTYPES, TransformerConfig, check_attention_shape
from ...presets import CORPUS_SIZES, LABEL_SMOOTHING, SMALL
from ...settings import Checked, flag_of, setting
from ..corpora import MAX_LENGTH
from ..tasks import HELD_OUT
from ..tokenizers import BPE_VOCAB_RANGE

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
# a run not given --eval-every is evaluated this many times at least, so that its curves and its
# --patience have points to go by; never at longer intervals than EVAL_EVERY steps, the interval of
# every run before the interval was planned (a long run keeps it)
EVALUATIONS = 10
# the planned evaluations take at most this part of a time budget's time left: dear ones (a large dev
# set, a slow machine, an untrained model's long outputs) are fewer, not paid for by the steps
EVALUATION_SHARE = 0.25
EVAL_EVERY = 500


def planned_eval_every(steps: int, evaluations: int = EVALUATIONS) -> int:
    """The steps between the dev evaluations of a run of ``steps`` steps not given --eval-every: a
    tenth of them (EVALUATIONS), at most EVAL_EVERY, at least 1; further apart when a time budget has
    room for fewer ``evaluations`` (none: the run is evaluated at its end alone)."""
    interval = max(1, min(EVAL_EVERY, steps // EVALUATIONS))
    if evaluations < EVALUATIONS:  # a budget with room for fewer: they are further apart
        interval = max(interval, steps // evaluations if evaluations else steps)
    return interval


PATHS = ("data", "dev", "test", "from_run")  # the settings that name a file or a run: absolute once given
MODEL_SIZES = ("d_model", "N", "h", "d_ff", "dropout")  # chosen by the run when not given
_CHOSEN = "default with --data: chosen from the corpus's training pairs and the time budget, else"


@dataclass(frozen=True)
class ModelConfig(Checked):
    """The model's settings a run may give, in the order the train command lists them: TransformerConfig's
    fields that its task does not decide, with their types, defaults and checks, the sizes
    (MODEL_SIZES) left to the run unless given."""

    d_model: int | None = setting(None, f"model width ({_CHOSEN} {SMALL.d_model})", minimum=1)
    N: int | None = setting(
        None, f"encoder and decoder blocks ({_CHOSEN} {SMALL.N})", flag="--layers", minimum=1
    )
    h: int | None = setting(None, f"attention heads ({_CHOSEN} {SMALL.h})", flag="--heads", minimum=1)
    d_ff: int | None = setting(None, f"feed-forward hidden width ({_CHOSEN} {SMALL.d_ff})", minimum=1)
    dropout: float | None = setting(
        None, f"dropout probability ({_CHOSEN} {SMALL.dropout:g})", minimum=0.0, below=1.0
    )
    attention: str = setting(
        "mha", "multi-head (mha) or multi-head latent attention (mla)", choices=tuple(ATTENTION_KINDS)
    )
    norm_first: bool = setting(
        True,
        "the paper's post-norm instead of the default pre-norm (the from-scratch design's choice): as the "
        "paper's (and Marian's), its stacks end without a final layer norm (final_norm = true in a --config "
        "file's [model] table keeps them, and no export takes that model)",
        flag="--post-norm",
    )
    tie_embeddings: bool = setting(
        False,
        "one matrix for the target embedding and the pre-softmax projection (and the source embedding "
        "with --shared-vocab), as the paper does",
    )
    dtype: str = setting("float32", "floating-point type of weights and activations", choices=DTYPES)
    # the options a pretrained Marian (OPUS-MT) translator needs; an imported run sets them
    activation: str = setting(
        "relu", "the feed-forward blocks' activation (silu: Marian's swish)", choices=ACTIVATIONS
    )
    attention_bias: bool = setting(False, "biases on the attention projections W_q, W_k, W_v, W_o (mha)")
    positions: str = setting(
        "interleaved",
        "the sinusoids' layout: the paper's interleaved sines and cosines, or Marian's sines then cosines "
        "(split)",
        choices=POSITION_LAYOUTS,
    )
    final_norm: bool = setting(
        True,
        "no layer normalisation after the last encoder and decoder blocks of a pre-norm model (a --post-norm "
        "one has none; a pre-norm one without them exports to CTranslate2 only)",
        flag="--no-final-norm",
    )
    padding_idx: int | None = setting(
        None,
        "a token id whose embedding lookups pass no gradient, as PyTorch's nn.Embedding(padding_idx=...) "
        "(an imported Marian model's <pad>)",
        minimum=0,
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_attention_shape(self.d_model, self.h, self.attention, self.attention_bias)

    def resolve(self, train_pairs: int | None = None, minutes: float | None = None) -> ModelConfig:
        """Every size not given filled in: for a corpus of ``train_pairs`` training pairs and a
        budget of ``minutes``, by ``sizes_for_corpus``; for a generated task (None), presets.SMALL."""
        chosen = SMALL.settings() if train_pairs is None else sizes_for_corpus(train_pairs, minutes)
        sizes = {
            name: chosen[name] if getattr(self, name) is None else getattr(self, name) for name in MODEL_SIZES
        }
        if self.h is None:  # with a width given alone, the most heads up to the chosen number that divide it
            sizes["h"] = max(h for h in range(1, sizes["h"] + 1) if sizes["d_model"] % h == 0)
        return replace(self, **sizes)

    def refuse_heads_for_corpus(self, minutes: float | None) -> None:
        """Heads given without a width on a corpus (whose width sizes_for_corpus chooses once it is read,
        from the budget of ``minutes`` and its size): refused now, before the corpus is read, where they
        fit none of the widths that budget can choose."""
        if self.h is None or self.d_model is not None:
            return
        minutes = DATA_TIME_BUDGET if minutes is None else minutes
        widths = sorted({size.d_model for least, _, size in CORPUS_SIZES if minutes >= least})
        refusals = []
        for width in widths:
            try:
                check_attention_shape(width, self.h, self.attention, self.attention_bias)
            except ValueError as error:
                refusals.append(error)
        if len(refusals) == len(widths):
            chosen = " or ".join(str(width) for width in widths)
            raise ValueError(
                f"{refusals[0]}: d_model {chosen} is the width a {minutes:g}-minute run on a corpus gets, "
                f"chosen with its size: give --d-model too (--heads {self.h} fits a multiple of {self.h})"
            )

    @classmethod
    def from_model(cls, config: TransformerConfig | Mapping[str, Any]) -> ModelConfig:
        """The fields of a built model's configuration (Transformer.config, or a checkpoint's
        ``"model"``: it holds the sizes too)."""
        values = asdict(config) if isinstance(config, TransformerConfig) else config
        return cls(**{item.name: values[item.name] for item in fields(cls) if item.name in values})


def sizes_for_corpus(train_pairs: int, minutes: float | None) -> dict[str, Any]:
    """The model a corpus of ``train_pairs`` pairs gets for a budget of ``minutes`` (None: a run
    of fixed steps, sized as for the default budget).

    The sizes are the first of presets.CORPUS_SIZES that the budget and the corpus reach. Dropout
    grows with the passes the budget makes over the corpus (pairs per minute few: many passes, more
    to overfit). At 2,000 pairs a minute and more (10 to 15 passes in 15 minutes) none: there, on
    the German and French message corpora, dropout 0 scored higher than 0.1, and 0.3 far lower; a
    third layer (fewer steps in the budget) scored lower, a 192-wide model no higher (docs/results.md).
    The subword vocabulary grows with the corpus: tokenizers.subword_vocab_size.
    """
    minutes = DATA_TIME_BUDGET if minutes is None else minutes
    size = next(size for least, pairs, size in CORPUS_SIZES if minutes >= least and train_pairs >= pairs)
    pairs_per_minute = train_pairs / minutes
    dropout = 0.0 if pairs_per_minute >= 2000 else 0.2 if pairs_per_minute >= 500 else 0.3
    return size.settings() | {"dropout": dropout}


# a bucket's pairs are drawn, tokenised and sorted before its first step: about 10 s a million
MAX_BUCKET_STEPS, MAX_BUCKET_PAIRS = 10_000, 1_000_000


@dataclass(frozen=True)
class TrainConfig(Checked):
    """Everything that decides a run besides the model's shape: data, optimisation, the run itself."""

    # -- data
    task: str | None = setting(None, f"generated task (default {DEFAULT_TASK} unless --data)", choices=TASKS)
    data: str | None = setting(
        None,
        "parallel text, one 'source<TAB>target' pair per line: its dev and test splits hold out "
        f"{HELD_OUT * 100:g} percent of its pairs each (drawn by --seed), unless --dev or --test gives them",
    )
    dev: str | None = setting(
        None,
        "dev pairs of your own, 'source<TAB>target' as --data, instead of the dev split held out of --data "
        "(pairs of --data that are also in it are left out of training)",
    )
    test: str | None = setting(
        None,
        "test pairs of your own, 'source<TAB>target' as --data, instead of the test split held out of "
        "--data (pairs of --data that are also in it are left out of training)",
    )
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
        "corpus's size: the more training pairs, the more units)",
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
    label_smoothing: float = setting(LABEL_SMOOTHING, "label smoothing of the loss", minimum=0.0, below=1.0)
    bucket_steps: int = setting(
        100, "batches drawn together and sorted by length, to pad less", minimum=1, maximum=MAX_BUCKET_STEPS
    )
    # -- the run
    eval_every: int | None = setting(
        None,
        f"steps between dev evaluations (and checkpoints) (default: planned so that the run is evaluated "
        f"{EVALUATIONS} times at least: a tenth of --steps, or of the steps a --time-budget plans when it "
        f"has timed its first ones, fewer if {EVALUATIONS} would take more than {EVALUATION_SHARE:g} of "
        f"its time; at most {EVAL_EVERY} apart)",
        minimum=1,
    )
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
        for name in PATHS:
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

    @property
    def averages(self) -> bool:
        """Whether the run averages its last evaluation checkpoints at its end (average_last 2 or more)."""
        return self.average_last >= 2

    @property
    def checkpoints_kept(self) -> int:
        """The evaluation checkpoints (step-*.npz) kept while the run goes: keep_checkpoints, or the
        average_last it averages at its end where that is more. None (0): the run writes none."""
        return max(self.keep_checkpoints, self.average_last if self.averages else 0)

    def resolve(self, *, saved: bool = False) -> TrainConfig:
        """The configuration with every setting the run chooses filled in (RunChoices); refuses settings
        that cannot apply to the chosen task instead of dropping them. Without --steps, a --data run
        has a time budget, and the Trainer plans its steps to fit it (training.TimeBudget).

        ``saved``: the settings of a saved run read back (Trainer.resume), which the rates a new run
        is refused (a --min-lr above --lr, a --lr-floor not below it) never refuse: the run was
        saved before those refusals, or with them.
        """
        resolved = RunChoices(self).settings()
        if not saved:
            resolved._check_rates()
        return resolved


class RunChoices:
    """What a run chooses where its settings were left unset (TrainConfig.resolve): a generated
    task's defaults, or a corpus's (its tokenizer, time budget, learning rate, patience), and the
    optimiser; a setting that cannot apply to what is chosen is refused, not dropped."""

    def __init__(self, given: TrainConfig) -> None:
        self.given = given

    def settings(self) -> TrainConfig:
        """The given settings with what the run chooses filled in, its rates unchecked."""
        given = self.given
        if given.steps is not None and given.time_budget is not None:
            raise ValueError(
                f"give --steps or --time-budget, not both (steps {given.steps}, "
                f"time-budget {given.time_budget:g})"
            )
        if given.from_run is not None and given.data is None:
            raise ValueError(f"--from {given.from_run} fine-tunes on a corpus of yours: give --data FILE.tsv")
        if given.tokenizer == "marian" and given.from_run is None:
            raise ValueError(
                "--tokenizer marian is an imported Marian model's own: fine-tune that model with "
                "--from RUN (numpy-transformer import DIR --out RUN writes the run)"
            )
        optimizer, weight_decay = self.optimizer()
        if given.data is None:
            task = given.task or DEFAULT_TASK
            not_applicable = [
                name
                for name, value in (
                    ("vocab-size", given.vocab_size),
                    ("max-length", given.max_length),
                    ("bpe-dropout", given.bpe_dropout or None),
                    ("dev", given.dev),
                    ("test", given.test),
                )
                if value is not None
            ] + (["shared-vocab"] if given.shared_vocab else [])
            if not_applicable:
                raise ValueError(
                    f"--{not_applicable[0]} applies to --data corpora only, not to the task {task}"
                )
            tokenizer = given.tokenizer or TASK_TOKENIZERS[task]
            if task != "numbers-en-fr" and tokenizer != "char":
                raise ValueError(
                    f"the task {task} is written in characters: --tokenizer {tokenizer} does not apply"
                )
            if tokenizer == "bpe":
                raise ValueError("--tokenizer bpe learns from a corpus: give --data FILE.tsv")
            steps = given.steps or (None if given.time_budget else TASK_STEPS)
            return replace(
                given,
                task=task,
                tokenizer=tokenizer,
                steps=steps,
                eval_every=self.eval_every(steps),
                lr=given.lr or TASK_LR,
                warmup=given.warmup or WARMUP,
                optimizer=optimizer,
                weight_decay=weight_decay,
                patience=0 if given.patience is None else given.patience,
            )
        # --from: the run's own tokenizer and vocabularies (Trainer.create fills them in)
        chosen = given.tokenizer or (None if given.from_run else "bpe")
        if chosen not in ("bpe", None) and given.vocab_size is not None:
            raise ValueError(f"--vocab-size applies to --tokenizer bpe only, not {chosen}")
        return replace(
            given,
            tokenizer=chosen,
            # None: the corpus chooses (a --from run: the run's own)
            vocab_size=given.vocab_size if chosen in ("bpe", None) else None,
            max_length=given.max_length or MAX_LENGTH,
            lr=given.lr or (FROM_LR if given.from_run else DATA_LR),
            warmup=given.warmup or (FROM_WARMUP if given.from_run else WARMUP),
            optimizer=optimizer,
            weight_decay=weight_decay,
            eval_every=self.eval_every(given.steps),
            time_budget=DATA_TIME_BUDGET
            if given.steps is None and given.time_budget is None
            else given.time_budget,
            patience=DATA_PATIENCE if given.patience is None else given.patience,
        )

    def eval_every(self, steps: int | None) -> int | None:
        """The interval of evaluations: given, or planned from the run's ``steps`` (None: a time
        budget's, which the run plans with its steps, training.Loop.plan)."""
        if self.given.eval_every is not None or steps is None:
            return self.given.eval_every
        return planned_eval_every(steps)

    def optimizer(self) -> tuple[str, float]:
        """The optimiser and weight decay the run uses: AdamW with DATA_WEIGHT_DECAY for a new model
        on --data, Adam (no decay) otherwise, unless given; a decay given to Adam is refused."""
        given = self.given
        new_model_on_data = given.data is not None and given.from_run is None
        optimizer = given.optimizer or (DATA_OPTIMIZER if new_model_on_data else "adam")
        if optimizer == "adam" and given.weight_decay:
            chosen = "--optimizer adam" if given.optimizer else "Adam, this run's default optimiser"
            raise ValueError(
                f"--weight-decay {given.weight_decay:g} applies to --optimizer adamw only, not to {chosen}"
            )
        if given.weight_decay is not None:
            return optimizer, given.weight_decay
        return optimizer, DATA_WEIGHT_DECAY if new_model_on_data and optimizer == "adamw" else 0.0


_FIELDS = {item.name: item for item in fields(TrainConfig)}
SECTIONS: dict[str, Any] = {"model": ModelConfig, "train": TrainConfig}  # a run's configuration's tables
