"""Learn backprop by writing it: a workbook of every backward pass, graded on the spot.

``start(directory)`` writes ``my_backprop.py`` (one exercise per backward of the textbook, its
forward imported from :mod:`numpy_transformer.functional` or, for the blocks, from
``numpy_transformer.workbook.blocks``, its body ``raise NotImplementedError``) and a
``README.md`` giving the order to work in. ``check(path, names)`` loads the learner's file,
matches the functions it defines to the textbook's by name and grades each on several drawn cases
(masked attention rows, repeated token ids, padding targets, dropout on and off, length 1):
float64 central differences of the learner's forward (see :mod:`numpy_transformer.gradient_checking`),
and the textbook's backward for whether the result is exact and, when it is wrong, which known
mistake it looks like. ``learner_functions(path)`` gives the functions that ``learn train`` runs
the model on (the "learner" kernel set of :mod:`numpy_transformer.kernels`).

The learner's file is their code: it is run (that is the point), and whatever it raises is
caught and shown as theirs, with their file and line, never as a traceback of this package.

The rooms, by job: the exercises (the folder ``exercises``: each declared once, with its cases,
recognised mistakes and hints, their order and the mistakes' sentences); grading them (the folder
``grading``: the grader, its verdicts, the calls recorded, the diagnosis and causes of a mistake);
writing the workbook (``writing``); loading the learner's code (``loading``); the ladder
(``progress``); the aids (``aids``); the textbook of the training rungs and the optimiser a workbook run
trains with, the learner's where they wrote it (``optimiser``: ``training_optimiser`` makes that
choice); the model and blocks.py's encoder-decoder on the learner's functions (``training``); the
proof (``proof``) and the short messages of a corpus it learns on real text (``messages``); what
learn train and learn prove run and say (``commands``); and the blocks' textbook (``blocks``). The
workbook imports the model alone.
"""

from .aids import cmp, next_hint, textbook
from .commands import LearnerTraining, proof_recipe, prove_file, run_optimiser
from .exercises.curriculum import BY_NAME, EXERCISES, LADDER, TRAINING_BY_NAME
from .exercises.mistakes import SENTENCES
from .grading import check, format_verdicts, run_check
from .loading import LearnerCodeError, load_learner
from .messages import SHORT_MESSAGES
from .optimiser import OptimiserSettings, TrainingOptimiser, training_optimiser
from .progress import format_status, status
from .training import learner_functions, train_blocks
from .writing import start

__all__ = [
    "BY_NAME",
    "EXERCISES",
    "LADDER",
    "SENTENCES",
    "SHORT_MESSAGES",
    "TRAINING_BY_NAME",
    "LearnerCodeError",
    "LearnerTraining",
    "OptimiserSettings",
    "TrainingOptimiser",
    "check",
    "cmp",
    "format_status",
    "format_verdicts",
    "learner_functions",
    "load_learner",
    "next_hint",
    "proof_recipe",
    "prove_file",
    "run_check",
    "run_optimiser",
    "start",
    "status",
    "textbook",
    "train_blocks",
    "training_optimiser",
]
