"""Pictures: attention maps, training curves and gradient flow (matplotlib, an optional extra)."""

from __future__ import annotations

import json
import math
import textwrap
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..backend import to_numpy
from ..files import SaveError, write_atomically
from ..kernels import ops
from ..machine import require
from ..model import Transformer, build_transformer, make_src_mask
from ..presets import LABEL_SMOOTHING
from .batches import Batch, pad, target_mask
from .corpora import printable
from .tasks import TranslationTask
from .translating import Decoding, translate_ids
from .vocabulary import DEFAULT_IDS, PAD_ID, SpecialIds

GREEDY = Decoding()  # the search a picture's translation is found by unless told
SKIPPED_NAMED = 3  # foreign lines of a log named one by one; beyond them, counted


def _pyplot() -> Any:
    require("plots", "matplotlib")
    import matplotlib

    matplotlib.use("Agg")  # files only, no screen needed
    import matplotlib.pyplot as plt

    return plt


def picture_path(out: str | Path, default_name: str) -> Path:
    """The file a picture asked for as ``out`` is written to: ``out`` itself, ``out/default_name``
    where ``out`` is an existing directory, ``out`` with ``.png`` where it has no extension (as
    matplotlib names it). Refused (ValueError naming --out) where the extension is not a format
    matplotlib writes, before any work."""
    from matplotlib.backend_bases import FigureCanvasBase

    path = Path(out).expanduser()
    if path.is_dir():
        path = path / default_name
    if not path.suffix:
        return path.with_name(path.name + ".png")
    formats = FigureCanvasBase.get_supported_filetypes()
    if path.suffix[1:].lower() not in formats:
        raise ValueError(
            f"--out {out}: {path.suffix} is not a picture format matplotlib writes (expected "
            f"{', '.join('.' + name for name in sorted(formats))}; .png without one)"
        )
    return path


def attention_maps(
    model: Transformer,
    src_ids: Sequence[int],
    max_len: int | None = None,
    ids: SpecialIds = DEFAULT_IDS,
    decoding: Decoding = GREEDY,
) -> tuple[list[int], dict]:
    """Translate one source by ``decoding`` (greedily unless told), then re-run it with the
    translation as the decoder input.

    Returns (target ids, <bos> first and <eos> last where it was reached (a translation that fills the
    target positional table loses its last token), {"encoder self-attention":
    [(H, S, S) per layer], "decoder self-attention": [(H, T, T)], "cross-attention": [(H, T, S)]}).
    """
    (generated,) = translate_ids(
        model, [list(src_ids)], max_len, ids, strategy=decoding.search, **decoding.settings
    )
    ended = generated.index(ids.eos) + 1 if ids.eos in generated else len(generated)
    target = [ids.bos, *generated[:ended]][: model.tgt_pos.seq_len]  # the table holds <bos> and L - 1
    xp_src, tgt = pad([list(src_ids)], ids.pad), pad([target], ids.pad)
    model.eval().forward(xp_src, tgt, make_src_mask(xp_src, ids.pad), target_mask(tgt, ids))
    maps = {
        "encoder self-attention": [
            to_numpy(l.self_attention_block.attention_probs[0]) for l in model.encoder.layers
        ],
        "decoder self-attention": [
            to_numpy(l.self_attention_block.attention_probs[0]) for l in model.decoder.layers
        ],
        "cross-attention": [
            to_numpy(l.cross_attention_block.attention_probs[0]) for l in model.decoder.layers
        ],
    }
    return target, maps


# what each map's rows and columns are: (the query tokens, the key tokens), source or target
_MAP_AXES = {
    "encoder self-attention": ("source", "source"),
    "decoder self-attention": ("target", "target"),
    "cross-attention": ("target", "source"),
}


def plot_attention(
    model: Transformer,
    tokenizer: Any,
    src_vocab: Any,
    tgt_vocab: Any,
    sentence: str,
    out: str | Path,
    decoding: Decoding = GREEDY,
    max_len: int | None = None,
) -> list[Path]:
    """Three pictures, ``<out stem>-encoder.png``, ``-decoder.png``, ``-cross.png`` (in ``out`` itself,
    ``attention-*.png``, where it is a directory): a layer x head grid each, of the translation
    ``decoding`` finds (greedy unless told; the command line's default is translate's) in at most
    ``max_len`` tokens (default: the target positional table's), its title naming that search.

    The axes are the tokens as text (Tokenizer.shown: a byte-level unit's bytes decoded, a space as
    ▁, a control character escaped), with one colour scale: the attention weights, 0 to 1. Each
    file is written whole or not at all: a failed write (a full disk) raises a SaveError naming
    it, what is left of it, and the pictures written before it."""
    plt = _pyplot()
    if not sentence.strip():
        raise ValueError("sentence is empty: give text to draw the attention of")
    src_tokens = tokenizer.tokenize_source(sentence)
    src_ids, _ = src_vocab.encode(src_tokens)
    target, maps = attention_maps(model, src_ids, max_len, tgt_vocab.ids, decoding)
    labels = {
        "source": [printable(token) for token in tokenizer.shown(src_tokens)],
        "target": [printable(token) for token in tokenizer.shown([tgt_vocab.itos[i] for i in target])],
    }
    translation = tokenizer.detokenize(tgt_vocab.decode(target[1:]))
    out = Path(out).expanduser()
    out = out / "attention.png" if out.is_dir() else out
    written: list[Path] = []
    for (title, layers), suffix in zip(maps.items(), ("encoder", "decoder", "cross")):
        rows, cols = len(layers), layers[0].shape[0]
        figure, grid = plt.subplots(
            rows, cols, figsize=(2.8 * cols + 1.5, 2.8 * rows + 1.6), squeeze=False, layout="constrained"
        )
        queries, keys = _MAP_AXES[title]
        for layer, heads in enumerate(layers):
            for head, weights in enumerate(heads):
                axis = grid[layer][head]
                image = axis.imshow(weights, cmap="viridis", vmin=0.0, vmax=1.0)
                axis.set_title(f"layer {layer + 1}, head {head + 1}", fontsize=8)
                axis.set_xticks(range(len(labels[keys])), labels[keys], rotation=90, fontsize=6)
                axis.set_yticks(range(len(labels[queries])), labels[queries], fontsize=6)
        figure.colorbar(image, ax=grid, shrink=0.8, label="attention weight (each row sums to 1)")
        figure.supxlabel(f"{keys} token attended to (key)", fontsize=9)
        figure.supylabel(f"{queries} token attending (query)", fontsize=9)
        heading = (
            f"{title}; decoding: {decoding.describe()}",
            f"{printable(sentence)}  \u2192  {printable(translation)}",
        )
        width = 45 * cols + 20  # characters of the title's lines, about the figure's width
        figure.suptitle(
            "\n".join(part for line in heading for part in textwrap.wrap(line, width, max_lines=3)),
            fontsize=9,
        )
        path = out.with_name(f"{out.stem}-{suffix}.png")
        try:
            save_figure(figure, path)
        except SaveError as error:
            if not written:
                raise
            before = SaveError(f"{error} ({', '.join(str(done) for done in written)} written before it)")
            before.errno = error.errno
            raise before from error
        finally:
            plt.close(figure)
        written.append(path)
    return written


def save_figure(figure: Any, path: Path) -> None:
    """Write ``figure`` to ``path`` in the format its extension names, atomically (files.write_atomically):
    a failed write (a full disk) raises a SaveError naming the file and what is left of it."""
    write_atomically(path, lambda file: figure.savefig(file, format=path.suffix[1:].lower(), dpi=90))


def read_log(log_path: Path) -> list[dict[str, Any]]:
    """The records of a log.jsonl; a torn or foreign line (a crash mid-write) is skipped with a warning
    naming it, the first SKIPPED_NAMED of them (then how many more). A file without one record (not
    a log) gives none and no warning: the caller says what it expected."""
    records, skipped = [], []
    with log_path.open(encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, start=1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                record = None
            if not isinstance(record, dict) or not isinstance(record.get("step"), int):
                skipped.append(f"{log_path}:{number}: not a log record, skipped: {line[:60]!r}")
                continue
            records.append(record)
    if records:
        for warning in skipped[:SKIPPED_NAMED]:
            warnings.warn(warning, stacklevel=2)
        if len(skipped) > SKIPPED_NAMED:
            warnings.warn(
                f"{log_path}: {len(skipped) - SKIPPED_NAMED} more lines are not log records, skipped",
                stacklevel=2,
            )
    return records


def plot_curves(log_path: str | Path, out: str | Path) -> Path:
    """Training loss, dev loss, dev BLEU, chrF and exact match, and the learning rate against the
    step, from a log.jsonl. Returns the file written (picture_path: ``out/curves.png`` where
    ``out`` is a directory)."""
    plt = _pyplot()
    out = picture_path(out, "curves.png")
    log_path = Path(log_path)
    log_path = log_path / "log.jsonl" if log_path.is_dir() else log_path
    if not log_path.is_file():
        raise ValueError(f"{log_path}: no such training log")
    records = read_log(log_path)
    train = [r for r in records if "split" not in r]
    dev = [r for r in records if r.get("split") == "dev"]
    if not train:
        raise ValueError(
            f"{log_path}: holds no training records"
            + ("" if records else " (no line of it is one: expected a run's log.jsonl)")
        )
    for kind, rows, keys in (
        ("training", train, ("step", "loss", "lr")),
        ("dev", dev, ("step", "loss", "bleu", "exact_match")),
    ):
        for record in rows:
            missing = [key for key in keys if not isinstance(record.get(key), (int, float))]
            if missing:
                raise ValueError(
                    f"{log_path}: a {kind} record without a number for {', '.join(missing)} ({record}); "
                    f"train writes {', '.join(keys)} in each"
                )
    figure, (loss_axis, bleu_axis, lr_axis) = plt.subplots(1, 3, figsize=(15, 4))
    loss_axis.plot([r["step"] for r in train], [r["loss"] for r in train], label="train")
    if dev:
        loss_axis.plot([r["step"] for r in dev], [r["loss"] for r in dev], "o-", label="dev")
        bleu_axis.plot([r["step"] for r in dev], [r["bleu"] for r in dev], "o-", label="BLEU")
        if all("chrf" in r for r in dev):  # logs written before chrF was logged have none
            bleu_axis.plot([r["step"] for r in dev], [r["chrf"] for r in dev], "^-", label="chrF")
        bleu_axis.plot(
            [r["step"] for r in dev], [100 * r["exact_match"] for r in dev], "s--", label="exact match %"
        )
        bleu_axis.legend()
    else:
        bleu_axis.text(0.5, 0.5, "no dev evaluation in this log", ha="center", transform=bleu_axis.transAxes)
    loss_axis.set(xlabel="step", ylabel="label-smoothed cross-entropy (nats per token)", title="loss")
    loss_axis.legend()
    bleu_axis.set(
        xlabel="step", ylabel="score (0 to 100)", title="dev BLEU / chrF / exact match", ylim=(0, 101)
    )
    lr_axis.plot([r["step"] for r in train], [r["lr"] for r in train])
    lr_axis.set(xlabel="step", ylabel="learning rate", title="learning rate")
    figure.suptitle(f"training curves of {printable(str(log_path))}", fontsize=10)
    figure.tight_layout()
    try:
        save_figure(figure, out)
    finally:
        plt.close(figure)
    return out


GRADIENT_BATCH = 32  # training pairs plot_gradient_flow's gradients are of


def _stage_name(group: str) -> str:
    """A stage of gradient_norms (``encoder.layers.0``) in words (``encoder layer 1``)."""
    names = {
        "src_embed": "source embedding",
        "tgt_embed": "target embedding",
        "encoder.norm": "encoder final norm",
        "decoder.norm": "decoder final norm",
        "projection_layer": "output projection",
    }
    stack, _, layer = group.partition(".layers.")
    return names.get(group, f"{stack} layer {int(layer) + 1}" if layer else group)


def gradient_norms(
    model: Transformer, batch: Batch, label_smoothing: float = LABEL_SMOOTHING, pad_id: int = PAD_ID
) -> dict[str, float]:
    """Gradient norm of each stage, in forward order: embeddings, each encoder/decoder layer, norms, projection."""
    model.eval().zero_grad()
    logits = model.forward(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
    _, cache = ops.cross_entropy_forward(logits, batch.tgt_out, pad_id, label_smoothing)
    model.backward(ops.cross_entropy_backward(1.0, cache))
    groups: dict[str, float] = {}
    for name, parameter in model.named_parameters():
        parts = name.split(".")
        group = (
            ".".join(parts[:3])
            if parts[1] == "layers"
            else parts[0] + ("." + parts[1] if parts[1] == "norm" else "")
        )
        groups[group] = groups.get(group, 0.0) + float((parameter.grad * parameter.grad).sum())
    order = [
        "src_embed",
        *[g for g in groups if g.startswith("encoder.layers")],
        "encoder.norm",
        "tgt_embed",
        *[g for g in groups if g.startswith("decoder.layers")],
        "decoder.norm",
        "projection_layer",
    ]
    return {group: math.sqrt(groups[group]) for group in order if group in groups}


def plot_gradient_flow(config: dict, task: TranslationTask, out: str | Path, seed: int = 0) -> Path:
    """Per-stage gradient norms of the same fresh model with pre-norm and with post-norm, one batch.
    Returns the file written (picture_path: ``out/gradients.png`` where ``out`` is a directory)."""
    plt = _pyplot()
    out = picture_path(out, "gradients.png")
    from matplotlib.ticker import LogLocator, StrMethodFormatter

    batch = task.train_batch(0, GRADIENT_BATCH)
    figure, axis = plt.subplots(figsize=(12, 4.5))
    for offset, norm_first in ((-0.2, True), (0.2, False)):
        model = build_transformer(**{**config, "norm_first": norm_first}, seed=seed)
        norms = gradient_norms(model, batch, pad_id=task.ids.pad)
        positions = [i + offset for i in range(len(norms))]
        axis.bar(
            positions,
            list(norms.values()),
            width=0.4,
            label="pre-norm (from-scratch design)" if norm_first else "post-norm (paper)",
        )
    axis.set_xticks(range(len(norms)), [_stage_name(group) for group in norms], rotation=30, ha="right")
    axis.set_yscale("log")
    axis.yaxis.set_minor_locator(LogLocator(subs=(2, 3, 5)))
    for ticks in (axis.yaxis.set_major_formatter, axis.yaxis.set_minor_formatter):
        ticks(StrMethodFormatter("{x:g}"))  # 0.3, not 3 x 10^-1
    axis.set(
        ylabel="gradient norm (L2, log scale)",
        title=f"gradient of each stage at initialisation, one batch of {GRADIENT_BATCH} {task.name} pairs: "
        f"{config['N']} layers a stack, d_model={config['d_model']}",
    )
    axis.legend()
    figure.tight_layout()
    try:
        save_figure(figure, out)
    finally:
        plt.close(figure)
    return out
