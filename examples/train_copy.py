"""Train the copy task (10 symbols, lengths 1-10) and test on fresh sequences.

python examples/train_copy.py
"""

from numpy_transformer.presets import TINY
from numpy_transformer.translator.config import TrainConfig
from numpy_transformer.translator.training import Trainer

config = TrainConfig(task="copy", steps=3000, lr=2e-3, eval_every=1000)
trainer = Trainer.create(config, TINY.settings() | {"dropout": 0.0})
trainer.fit("runs/copy")
print(trainer.evaluate(trainer.task.test))
