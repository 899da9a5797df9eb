"""Train English -> French number words, then translate a few numbers the model never saw.

python examples/numbers_en_fr.py
"""

from numpy_transformer.presets import SMALL
from numpy_transformer.translator.config import TrainConfig
from numpy_transformer.translator.tokenizers import encode_sentences
from numpy_transformer.translator.training import Trainer
from numpy_transformer.translator.translating import translate_ids

trainer = Trainer.create(TrainConfig(task="numbers-en-fr", steps=3000), SMALL.settings())
trainer.fit("runs/numbers-en-fr")
task = trainer.task
unseen = [source for source, _ in task.test[:5]]  # held out from training by construction
for sentence, ids in zip(
    unseen, translate_ids(trainer.model, encode_sentences(unseen, task.tokenizer, task.src_vocab))
):
    print(f"{sentence}  ->  {task.tokenizer.detokenize(task.tgt_vocab.decode(ids))}")
print(trainer.evaluate(task.test))
