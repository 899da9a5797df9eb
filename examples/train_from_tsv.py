"""Train from a parallel text file with one 'source<TAB>target' pair per line.

    python examples/train_from_tsv.py [FILE.tsv]

Without an argument it writes a small demonstration file first (the adjective moves after the noun). Sentence
pair downloads such as Tatoeba's have this format, often with more columns (ids, attribution): a line of more
than two columns is refused by file and line, so keep the first two first (``cut -f 1,2 in.tsv > pairs.tsv``).
"""

import sys
from pathlib import Path

from numpy_transformer.presets import TINY
from numpy_transformer.translator.config import TrainConfig
from numpy_transformer.translator.training import Trainer

if len(sys.argv) > 1:
    path = Path(sys.argv[1])
else:
    path = Path("runs/demo-pairs.tsv")
    path.parent.mkdir(parents=True, exist_ok=True)
    colours, things = (
        ["red", "green", "blue", "black", "white", "yellow"],
        ["car", "house", "cat", "dog", "book", "tree"],
    )
    french = {
        "red": "rouge",
        "green": "verte",
        "blue": "bleue",
        "black": "noire",
        "white": "blanche",
        "yellow": "jaune",
        "car": "voiture",
        "house": "maison",
        "cat": "chatte",
        "dog": "chienne",
        "book": "revue",
        "tree": "plante",
    }
    # five words a sentence: corpus BLEU counts up to 4-grams, so shorter sentences always score 0
    path.write_text(
        "".join(f"the {c} {t} is here\tla {french[t]} {french[c]} est ici\n" for c in colours for t in things)
    )

trainer = Trainer.create(
    TrainConfig(data=str(path), steps=600, eval_every=200, batch_size=32),
    TINY.settings() | {"dropout": None},  # dropout chosen from the corpus, as a --data run does
)
trainer.fit("runs/tsv")
print(trainer.evaluate(trainer.task.test))
