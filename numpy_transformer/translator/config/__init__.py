"""A training run's configuration: every setting declared once, as a dataclass field.

Each field is a setting of ``numpy_transformer.settings`` (its type, default, checks and help). From
them come the ``train`` command's flags (``command_line``), the checks every value passes whatever
its source (a flag, a ``--config`` file or Python), the file a run saves beside its checkpoint
(``toml_file``: ``config.toml``, which ``--config`` reads back), and what ``--resume`` and a
fine-tune may change (``resuming``). The rooms:

- ``run``: ModelConfig (the architecture a run may give, agreeing with the model's TransformerConfig)
  and TrainConfig (everything else), with the defaults a run chooses for what is not given;
- ``command_line``: the flags made from the fields, and the settings a command line gave;
- ``toml_file``: a ``--config`` file read, a run's ``config.toml`` written;
- ``resuming``: the rules of ``--resume`` and of a fine-tune (``--from``).
"""

from typing import NoReturn

from ...moved import MOVED, refuse_moved_name
from .command_line import add_arguments, given_settings
from .resuming import (
    fine_tune_settings,
    resumable_fields,
    resumable_flags,
    resume_conflicts,
    setting_differs,
)
from .run import (
    AVERAGE_LAST,
    DATA_LR,
    DATA_OPTIMIZER,
    DATA_PATIENCE,
    DATA_TIME_BUDGET,
    DATA_WEIGHT_DECAY,
    DEFAULT_TASK,
    EVAL_EVERY,
    EVALUATION_SHARE,
    EVALUATIONS,
    FROM_LR,
    FROM_WARMUP,
    MAX_BUCKET_PAIRS,
    MAX_BUCKET_STEPS,
    MODEL_SIZES,
    SECTIONS,
    TASK_LR,
    TASK_STEPS,
    TASK_TOKENIZERS,
    TASKS,
    WARMUP,
    ModelConfig,
    TrainConfig,
    planned_eval_every,
    sizes_for_corpus,
)
from .toml_file import MAX_CONFIG_BYTES, config_toml, read_config_file, toml_string

__all__ = [
    "AVERAGE_LAST",
    "DATA_LR",
    "DATA_OPTIMIZER",
    "DATA_PATIENCE",
    "DATA_TIME_BUDGET",
    "DATA_WEIGHT_DECAY",
    "DEFAULT_TASK",
    "EVALUATIONS",
    "EVALUATION_SHARE",
    "EVAL_EVERY",
    "FROM_LR",
    "FROM_WARMUP",
    "MAX_BUCKET_PAIRS",
    "MAX_BUCKET_STEPS",
    "MAX_CONFIG_BYTES",
    "MODEL_SIZES",
    "SECTIONS",
    "TASKS",
    "TASK_LR",
    "TASK_STEPS",
    "TASK_TOKENIZERS",
    "WARMUP",
    "ModelConfig",
    "TrainConfig",
    "add_arguments",
    "config_toml",
    "fine_tune_settings",
    "given_settings",
    "planned_eval_every",
    "read_config_file",
    "resumable_fields",
    "resumable_flags",
    "resume_conflicts",
    "setting_differs",
    "sizes_for_corpus",
    "toml_string",
]


def __getattr__(name: str) -> NoReturn:
    """A name that moved out of this module (the settings schema, the presets) answers with its new place."""
    if f"{__name__}.{name}" in MOVED:
        refuse_moved_name(__name__, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
