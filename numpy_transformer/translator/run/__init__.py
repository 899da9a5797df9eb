"""A training run on disk, with one owner: what its files hold and how they are read back.

``checkpoint``: a checkpoint file (one ``.npz`` of plain arrays and a JSON document, written
atomically) and what comes back from it: the model, its task, tokenizer and vocabularies, averages.
``state``: what a checkpoint records of the run besides its model (RunState), and its evaluations'
part with what each evaluation decides (EvaluationState). ``directory``: the run directory of
``train --out``, checked, locked and written (RunFiles). ``continuing``: a live run written into a
checkpoint, and read back to be resumed or fine-tuned. ``importing``: a Hugging Face model directory
written as a run (``numpy-transformer import``).
"""
