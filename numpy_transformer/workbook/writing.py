"""learn start: the workbook's text (my_backprop.py or a notebook) and its README."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from .. import functional
from ..files import write_text_atomically
from ..machine import require
from . import blocks
from .exercises.curriculum import BLOCKS, EXERCISES, LADDER, TRAINING_BY_NAME, textbook_function
from .exercises.exercise import Exercise
from .loading import SCRATCH, TIME_LIMIT
from .proof import MESSAGES

WORKBOOK = "my_backprop.py"


GUIDE = "README.md"

FORWARD_MARK = ": the forward is "  # the header of a backward's exercise (a notebook's cell starts at it)


TRAINING_MARK = ": a training rung"  # the header of a training rung's


def _cache_types(function: Callable) -> list[type]:
    """The NamedTuple caches a forward returns, and those they hold, from its annotations."""
    found: list[type] = []
    kinds = {n: getattr(home, n) for home in (functional, blocks) for n in dir(home) if n.endswith("Cache")}
    source = inspect.getsource(function)
    for name, kind in kinds.items():
        if isinstance(kind, type) and f"{name}(" in source and kind not in found:
            found.append(kind)
    for kind in found:  # grows while it is read: the caches the caches hold
        for annotation in getattr(kind, "__annotations__", {}).values():
            for word in str(annotation).replace("[", " ").replace("]", " ").split():
                inner = kinds.get(word)
                if isinstance(inner, type) and inner not in found:
                    found.append(inner)
    return found


def _block_helpers(forward: Callable) -> list[Callable]:
    """The functions of blocks.py a block's forward calls that are no exercise's forward (the
    attention sublayers, the masks): the workbook shows them with the forward."""
    forwards = {e.forward for e in EXERCISES}
    found: list[Callable] = []
    for name in forward.__code__.co_names:
        helper = getattr(blocks, name, None)
        if inspect.isfunction(helper) and helper.__module__ == blocks.__name__ and name not in forwards:
            found.append(helper)
    return found


def forward_source(exercise: Exercise, shown: set[str] | None = None) -> str:
    """The textbook's code of the exercise's forward, of the forwards it calls from the heads'
    plumbing, and of the cache NamedTuples it keeps: read from functional.py itself, so that the
    workbook shows what the learner inverts and the real field order, never the backward."""
    shown = set() if shown is None else shown
    forward = textbook_function(exercise.forward)
    parts = []
    helpers = [functional.multi_head_forward] if "multi_head" in exercise.forward else []
    helpers += _block_helpers(forward)
    for kind in _cache_types(forward) + _cache_types(functional.multi_head_forward) * bool(helpers):
        if kind.__name__ not in shown:
            shown.add(kind.__name__)
            parts.append(inspect.getsource(kind))
    for function in [*helpers, forward]:
        if function.__name__ not in shown:
            shown.add(function.__name__)
            parts.append(inspect.getsource(function))
    if not parts:
        return f"{exercise.forward}: shown above"
    return "\n".join(part.rstrip() + "\n" for part in parts).rstrip()


def workbook_text(name: str = WORKBOOK) -> str:
    """The source of a fresh workbook, ``name`` the file it is written to (my_backprop.py or the
    notebook): every exercise a stub raising NotImplementedError."""
    imports = sorted(
        {e.forward for e in EXERCISES if e.forward not in BLOCKS}
        | {"merge_heads", "split_heads", "LatentAttentionCache", "MultiHeadAttentionCache"}
    )
    block_imports = sorted(e.forward for e in EXERCISES if e.forward in BLOCKS)
    lines = [
        '"""My backward passes: one exercise for each backward of the Transformer, easiest first.',
        "",
        "Each backward receives dout, the gradient of the loss with respect to its forward's output,",
        "and the cache that forward saved, and returns the gradients of the forward's differentiable",
        "arguments in the order the forward takes them. The forwards are the textbook's, imported",
        "below; above each exercise is the code of its forward and of the cache it keeps (no need to",
        "open functional.py: the backwards, the answers, are there). Replace each",
        "`raise NotImplementedError` with your code, then check it:",
        "",
        f"    numpy-transformer learn check {name} relu_backward",
        f"    numpy-transformer learn check {name}              # the whole ladder",
        f"    numpy-transformer learn status {name}             # done, ready, locked behind what",
        f"    numpy-transformer learn hint {name} relu_backward # a hint, one step further each time",
        f"    numpy-transformer learn train {name}              # a translator on your backward passes",
        f"    numpy-transformer learn prove {name}              # the last milestone: a real translator",
        "",
        "Each docstring gives the contract (what comes in, the cache, every shape, what to return);",
        "what to notice is yours to find, or learn hint's to give.",
        *(
            [
                "",
                f"A cell whose first line is `{SCRATCH}` is yours to try things in: learn check, status and",
                "train skip it.",
            ]
            if name.endswith(".ipynb")
            else []
        ),
        "Array operations go through xp = get_array_module() (NumPy here, CuPy on a GPU). Your later",
        "exercises may call your earlier ones (multi-head attention calls your linear_backward and",
        "attention_backward). You may also write a forward of your own under the textbook's name:",
        "it is checked with your backward.",
        "",
        "After the backwards, the training rungs: the schedules of the learning rate, clipping by the",
        "global norm, and the Adam and AdamW step that your gradients feed. learn train and learn prove",
        "update the weights with yours wherever you wrote them. They too get their array module from",
        "xp = get_array_module() (this file imports no NumPy): xp.sqrt(v_hat), xp.zeros_like(g).",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "import math",
        "",
        "from numpy_transformer.backend import get_array_module",
        "from numpy_transformer.workbook.blocks import (",
        *[f"    {name}," for name in block_imports],
        ")",
        "from numpy_transformer.functional import (",
        *[f"    {name}," for name in imports],
        ")",
        "",
    ]
    shown: set[str] = set()
    for exercise in EXERCISES:
        lines += [
            "",
            f"# {exercise.title}{FORWARD_MARK}{exercise.forward} (imported above), the textbook's code:",
            "#",
            *[f"#   {line}" if line else "#" for line in forward_source(exercise, shown).splitlines()],
            "",
            f"def {exercise.backward}{exercise.signature}:",
            '    """' + exercise.doc.replace("\n        ", "\n    "),
            '    """',
            "    raise NotImplementedError",
            "",
        ]
    for training in TRAINING_BY_NAME.values():
        lines += [
            "",
            f"# {training.title}{TRAINING_MARK}: graded against the textbook's (numpy_transformer.optim)",
            "# over several calls, each from a state it did not make (arrays: xp = get_array_module()).",
            "",
            f"def {training.name}{training.signature}:",
            '    """' + training.doc.replace("\n        ", "\n    "),
            '    """',
            "    raise NotImplementedError",
            "",
        ]
    return "\n".join(lines)


def guide_text() -> str:
    """The workbook's README.md: the order to work in and how to check."""
    ladder = "\n".join(
        f"{number}. `{exercise.backward}` ({exercise.title}): returns {', '.join(exercise.grads)}"
        for number, exercise in enumerate(EXERCISES, 1)
    )
    training = "\n".join(
        f"{number}. `{rung.name}` ({rung.title}): returns {', '.join(rung.returns)}"
        for number, rung in enumerate(TRAINING_BY_NAME.values(), len(EXERCISES) + 1)
    )
    layers = sum(not e.params for e in EXERCISES)
    return f"""# Learn backprop by writing it

`{WORKBOOK}` holds one exercise for each backward pass of the Transformer, from one layer to the
whole translator: above each is the textbook's code of its forward and of the cache it keeps (no
need to open `numpy_transformer/functional.py` or `blocks.py`, where the answers are), its
docstring says what the backward receives, what it returns, every shape, and gives a hint; its
body raises `NotImplementedError` until you write it. Work in this order, easy to hard: the
layers (1 to {layers}), then the blocks built from them ({layers + 1} to {len(EXERCISES)}), the last the
whole encoder-decoder with its loss:

{ladder}

Then the training rungs ({len(EXERCISES) + 1} to {len(LADDER)}), what your gradients feed: the learning
rate's schedules, clipping by the global norm, and the optimiser, the ladder's last rung:

{training}

Each is graded over several calls, each from a state it did not make (moments of earlier updates,
a step count past 1), against the textbook's (`numpy_transformer.optim`); a wrong one is named as
the known mistake whose results it reproduces. Return new arrays: a function that writes into an
array it was handed is refused.

Check one function as soon as you have written it, or the whole ladder (done / to do / wrong):

```bash
numpy-transformer learn check {WORKBOOK} layer_norm_backward
numpy-transformer learn check {WORKBOOK}
numpy-transformer learn status {WORKBOOK}                     # the ladder: done, ready, locked behind what
numpy-transformer learn hint {WORKBOOK} layer_norm_backward   # one step further each time
```

Each function is run on several drawn cases, the traps included (fully and partly masked
attention rows, repeated token ids, padding targets, dropout on and off, 2-D, 3-D and 4-D
inputs, batch and length 1, pre- and post-norm), and each gradient it returns is compared with
float64 central differences of the forward: ✔ exact (equal to the textbook's to rounding),
≈ close (the largest absolute and relative error), ✖ wrong (the worst entry, yours and the
expected value, and the mistake it looks like where it is a known one, without the formula:
`learn hint` gives that when you ask). A function that raises, exits or runs past
{TIME_LIMIT:g} seconds is reported as yours, as is a file whose import does. The exit status is 0
only when every function checked passes.

Inside your own backward, `from numpy_transformer.workbook import cmp, textbook` compares an
intermediate with the textbook's: `cmp("dscores", dscores, textbook(cache, dout)["dscores"])`
prints exact / approximately equal / wrong and the largest difference.

When the layers are done, train a small translator on them:

```bash
numpy-transformer learn train {WORKBOOK}
```

Without options it trains the copy task (400 steps of a one-layer model of width 32: a few
seconds on two idle cores), then the textbook's own code on the same seed (as long again;
`--no-compare` skips it), and prints both dev results side by side. It takes every option of
`numpy-transformer train` (`--task numbers-en-fr`, `--steps`, `--attention mla`, ...) and saves
into `runs/{Path(WORKBOOK).stem}-N` beside this file, a new N each run.

The model runs your layer functions wherever you wrote them (your forward too, if you wrote one)
and says which of them it ran: the latent-attention exercises only with `--attention mla`. Its
blocks are the textbook's modules composing your layer functions. When you have written block
exercises too (any of {layers + 2} to {len(EXERCISES)}), learn train then trains the encoder-decoder of
`blocks.py` itself on the same task, steps and sizes (float64, the package's Adam), its gradients from your
`encoder_decoder_backward` or else from the textbook's calling your blocks and layer functions,
then the textbook's own blocks on the same seed, and prints both teacher-forced dev losses and
token accuracies on one line (`residual_backward` is checked by `learn check` only: that model has
no such block). A wrong backward shows: the model learns less, or not at all.

Where your file defines the training rungs, that run updates the weights with your `adam_step` (your
`adamw_step` for the matrices, with a weight decay), its gradients first clipped by your
`clip_by_global_norm`, the rate from your schedule, as the run's settings say (`--schedule`, `--clip`,
`--optimizer`, `--weight-decay`); the textbook's run beside it the same with the textbook's.

When every exercise is done, the proof:

```bash
numpy-transformer learn prove {WORKBOOK}
```

trains the whole encoder-decoder of `blocks.py` on your backwards, its weights updated by your
`adam_step` where you wrote it, to translate English number words into French (300 steps),
translates 1,000 numbers it never saw, and does the same on the
textbook's code on the same seed. It says `proven` when `learn check` finds nothing of yours
wrong, 90% or more of those numbers come out exactly, and the two runs' weights are identical.

Then the proof on real text:

```bash
python examples/debian_messages.py --out data/messages-en-fr.tsv   # in the project's repository
numpy-transformer learn prove {WORKBOOK} --corpus data/messages-en-fr.tsv
```

learns the short messages of real programs ("File not found", "invalid option"), written in
French by their translators, from the message catalogs installed on your machine ({MESSAGES.steps:,}
steps), prints its translations of {MESSAGES.test_size} messages it never saw with their BLEU and chrF, and does
the same on the textbook's code. It says `proven` when nothing of yours is wrong, BLEU reaches
{MESSAGES.target_bleu:g} and the two runs' weights are identical.
"""


NOTEBOOK = "my_backprop.ipynb"


def notebook_text() -> str:
    """The workbook as a Jupyter notebook (JSON): one cell for the imports, one per exercise (jupytext's
    percent format, read back as a notebook)."""
    require("a notebook workbook", "jupytext")
    import jupytext  # type: ignore[import-untyped]

    text = workbook_text(NOTEBOOK)
    marked = ["# %%"]
    for line in text.split("\n"):
        if line.startswith("# ") and (FORWARD_MARK in line or TRAINING_MARK in line):
            marked.append("# %%")
        marked.append(line)
    notebook = jupytext.reads("\n".join(marked), fmt="py:percent")
    return str(jupytext.writes(notebook, fmt="ipynb"))


def start(directory: str | Path, overwrite: bool = False, notebook: bool = False) -> list[Path]:
    """Write a fresh workbook (``my_backprop.py``, or ``my_backprop.ipynb`` with ``notebook``, and
    ``README.md``) into ``directory``.

    Refuses (FileExistsError) where either file exists, unless ``overwrite``: the learner's work
    is never lost by accident. Each file is written atomically; where one cannot be (a full disk),
    the files and folders this call made are removed before the error is raised. Returns the paths
    written.
    """
    if not isinstance(directory, (str, Path)):
        raise TypeError(f"directory must be a path, got {type(directory).__name__}")
    folder = Path(directory).expanduser()
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"{folder} exists and is not a directory")
    workbook = NOTEBOOK if notebook else WORKBOOK
    paths = [folder / workbook, folder / GUIDE]
    present = [path for path in paths if path.exists()]
    if present and not overwrite:
        raise FileExistsError(
            f"{present[0]} exists: a workbook is never overwritten (--overwrite replaces it, your work included)"
        )
    texts = (notebook_text() if notebook else workbook_text(), guide_text().replace(WORKBOOK, workbook))
    made = [parent for parent in (folder, *folder.parents) if not parent.exists()]  # deepest first
    folder.mkdir(parents=True, exist_ok=True)
    try:
        for path, text in zip(paths, texts):
            write_text_atomically(path, text)
    except BaseException:  # a full disk, Ctrl-C: what this call made is removed, what was there kept
        for path in paths:
            if path not in present:
                path.unlink(missing_ok=True)
        for parent in made:
            with suppress(OSError):  # not empty: something else wrote there meanwhile, kept
                parent.rmdir()
        raise
    return paths
