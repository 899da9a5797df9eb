"""A learner's right training rungs (the schedules, clipping, the Adam and AdamW step), as a learner
writes them, and how a plausible wrong one is written from them (``changed``): the base of the
training rungs' catalogues, learn_training_mistakes.py and learn_training_cold_rounds.py."""

from __future__ import annotations

from typing import NamedTuple

TRAINING_HEADER = """
import math

import numpy as np

from numpy_transformer.backend import get_array_module
"""


class TrainingMistake(NamedTuple):
    function: str
    expected: str
    source: str
    also: tuple[str, ...] = ()  # a second mistake made beside the first, named too


# a learner's right versions, the base every mistake below changes
CORRECT = {
    "noam_learning_rate": """
def noam_learning_rate(step, d_model, warmup):
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
""",
    "warmup_cosine_learning_rate": """
def warmup_cosine_learning_rate(step, peak, warmup, total, min_lr):
    if step <= warmup:
        return peak * step / warmup
    progress = min((step - warmup) / (total - warmup), 1.0)
    return min_lr + 0.5 * (peak - min_lr) * (1 + math.cos(math.pi * progress))
""",
    "clip_by_global_norm": """
def clip_by_global_norm(grads, max_norm):
    norm = math.sqrt(sum(float((g * g).sum()) for g in grads))
    scale = max_norm / norm if norm > max_norm else 1.0
    return [g * scale for g in grads], norm
""",
    "adam_step": """
def adam_step(param, grad, m, v, t, lr, beta1, beta2, eps):
    xp = get_array_module()
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad * grad
    m_hat = m / (1 - beta1 ** t)
    v_hat = v / (1 - beta2 ** t)
    return param - lr * m_hat / (xp.sqrt(v_hat) + eps), m, v
""",
    "adamw_step": """
def adamw_step(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay):
    xp = get_array_module()
    param = param * (1 - lr * weight_decay)
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad * grad
    m_hat = m / (1 - beta1 ** t)
    v_hat = v / (1 - beta2 ** t)
    return param - lr * m_hat / (xp.sqrt(v_hat) + eps), m, v
""",
}


def changed(
    function: str, expected: str, *replacements: tuple[str, str], also: tuple[str, ...] = ()
) -> TrainingMistake:
    """The learner's right ``function`` with each (old, new) replaced once: one mistake (two where
    ``also`` names the second)."""
    source = CORRECT[function]
    for old, new in replacements:
        assert old in source, (function, old)
        source = source.replace(old, new, 1)
    return TrainingMistake(function, expected, source, also)


SOLVED_TRAINING = "".join(CORRECT.values())  # every training rung right, as a learner writes it
