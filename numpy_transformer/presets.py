"""The named model sizes and the loss's label smoothing: the one place the model's defaults, the
``train``, ``learn`` and ``plot`` commands, the workbook's proof, the benchmarks and the examples
read them from.

A size is the model's width ``d_model``, its ``N`` encoder and decoder blocks, its ``h`` attention
heads, its feed-forward width ``d_ff`` and its dropout. ``CORPUS_SIZES`` says which size a run on a
corpus gets for its budget and the corpus's size (its dropout is chosen from the passes the budget
makes over the corpus instead: the toolkit's ``sizes_for_corpus``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class ModelSize:
    """A model's sizes, by the names TransformerConfig gives them."""

    d_model: int
    N: int
    h: int
    d_ff: int
    dropout: float

    def settings(self) -> dict[str, Any]:
        """The sizes as TransformerConfig's (and a run's ``[model]``) settings."""
        return asdict(self)


# the paper's base model: TransformerConfig's defaults, and a corpus's given hours
BASE = ModelSize(d_model=512, N=6, h=8, d_ff=2048, dropout=0.1)
MEDIUM = ModelSize(d_model=256, N=3, h=4, d_ff=1024, dropout=0.1)
# the generated tasks' model, and a corpus's in a budget of minutes on two CPU cores
SMALL = ModelSize(d_model=128, N=2, h=4, d_ff=512, dropout=0.1)
# the examples' and the benchmarks' tiny model: the copy task in a few hundred steps
TINY = ModelSize(d_model=64, N=2, h=4, d_ff=256, dropout=0.1)
# learn train without --task, --data or --config: the copy task in under a minute on two cores
LEARN_TRAIN = ModelSize(d_model=32, N=1, h=2, d_ff=64, dropout=0.0)
# learn prove: blocks.py's encoder-decoder, which has no dropout, learning number words to French
LEARN_PROVE = ModelSize(d_model=64, N=2, h=4, d_ff=128, dropout=0.0)
# learn prove --corpus: the same encoder-decoder learning a corpus's short program messages
LEARN_PROVE_MESSAGES = ModelSize(d_model=64, N=2, h=4, d_ff=256, dropout=0.0)

# (least minutes of budget, least training pairs, the size): the first row a corpus run meets. The
# width is what the budget can train: a 15-minute run on two cores makes a few thousand steps and is
# still short of them at its end (docs/results.md), so it keeps SMALL; hours on a large corpus get a
# wider, deeper model (a rule, not measured).
CORPUS_SIZES: tuple[tuple[float, int, ModelSize], ...] = (
    (240.0, 1_000_000, BASE),
    (60.0, 100_000, MEDIUM),
    (0.0, 0, SMALL),
)

LABEL_SMOOTHING = 0.1  # the paper's epsilon_ls: a training run's, the proof's and the gradient plots'
