"""``numpy-transformer plot``: attention heatmaps, training curves, gradient norms."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from ...machine import require
from ...presets import TINY
from .common import (
    CHECKPOINT_HELP,
    DEFAULT_OUT,
    add_decode_options,
    asked_decoding,
    positive_int,
    say_checkpoint_read,
)

if TYPE_CHECKING:
    from ..tasks import TranslationTask

GRADIENT_LAYERS, MAX_GRADIENT_LAYERS = 6, 48  # plot gradients' fresh model: two of N layers per stack


def add_plot(commands: argparse._SubParsersAction) -> None:
    plot = commands.add_parser(
        "plot", help="pictures: attention maps, training curves, gradient flow (needs matplotlib)"
    )
    kinds = plot.add_subparsers(dest="picture", required=True)
    p = kinds.add_parser(
        "attention",
        help="layer x head attention heatmaps of one sentence and its translation, the one translate "
        "prints with the same decoding flags",
    )
    p.add_argument(
        "--checkpoint",
        default=DEFAULT_OUT,
        help=CHECKPOINT_HELP,
    )
    p.add_argument(
        "--out",
        default="attention.png",
        help="writes <stem>-encoder.png, -decoder.png, -cross.png (into a directory: attention-*.png)",
    )
    p.add_argument(
        "sentence", help="the source sentence to translate and draw the attention of (one, quoted)"
    )
    add_decode_options(p)
    p = kinds.add_parser("curves", help="loss, dev BLEU and learning rate from a training log")
    p.add_argument("--run", default=DEFAULT_OUT, help="run directory or its log.jsonl")
    p.add_argument(
        "--out",
        default="curves.png",
        help="the picture (.png, .pdf, .svg, ...: a format matplotlib writes; into a directory: curves.png)",
    )
    p = kinds.add_parser(
        "gradients", help="per-layer gradient norms at initialisation, pre-norm vs post-norm"
    )
    p.add_argument(
        "--checkpoint", help="take the model configuration and task from this run (default: copy task)"
    )
    p.add_argument(
        "--layers",
        type=positive_int,
        help=f"N of the copy task's model, without --checkpoint (default {GRADIENT_LAYERS}, at most "
        f"{MAX_GRADIENT_LAYERS}); a run's own with --checkpoint",
    )
    p.add_argument(
        "--out",
        default="gradients.png",
        help="the picture (.png, .pdf, .svg, ...: a format matplotlib writes; into a directory: gradients.png)",
    )


def _gradient_model(args: argparse.Namespace) -> tuple[dict, TranslationTask]:
    """(model configuration, task) of plot gradients: the run's of --checkpoint, else the copy task's."""
    from ..run.checkpoint import load_meta, trained_task
    from ..tasks import make_task

    if args.checkpoint:
        meta = load_meta(args.checkpoint)
        recipe = meta.get("task")
        if (
            isinstance(recipe, dict)
            and "task" in recipe
            and recipe.get("task") is None
            and recipe.get("data") is None
        ):
            raise ValueError(
                f"--checkpoint {args.checkpoint} holds an imported model, which was trained on no corpus "
                "this package knows: plot gradients needs a run's task; give a run fine-tuned from it "
                "(train --from it --data FILE.tsv), or plot the copy task's model without --checkpoint"
            )
        return meta["model"], trained_task(args.checkpoint, meta)
    task = make_task("copy")
    config = {
        "src_vocab_size": len(task.src_vocab),
        "tgt_vocab_size": len(task.tgt_vocab),
        "src_seq_len": 16,
        "tgt_seq_len": 16,
        **TINY.settings(),
        "N": args.layers or GRADIENT_LAYERS,
        "dropout": 0.0,
    }
    return config, task


def run_plot(args: argparse.Namespace) -> int:
    from .. import plots

    require("plot", "matplotlib")
    if args.picture == "attention":
        if not args.sentence.strip():  # as translate refuses it
            raise ValueError("sentence 1 of the arguments is empty: give text to translate")
        out = Path(args.out).expanduser()
    else:
        out = plots.picture_path(args.out, f"{args.picture}.png")  # a format matplotlib writes
    if args.picture == "gradients" and args.layers is not None:
        if args.checkpoint:
            raise ValueError(
                f"--layers {args.layers} cannot apply with --checkpoint {args.checkpoint}: the model is the "
                "run's own, of its layers; leave out --layers, or --checkpoint to plot the copy task's model"
            )
        if args.layers > MAX_GRADIENT_LAYERS:
            raise ValueError(
                f"--layers {args.layers}: at most {MAX_GRADIENT_LAYERS} (two fresh models of that many "
                "layers per stack are built)"
            )
    folder = out.parent
    if not folder.is_dir():
        raise ValueError(
            f"--out {args.out}: the folder {folder} does not exist"
            + (" (it is a file)" if folder.exists() else "")
            + ": create it first, or name a file in an existing folder"
        )

    if args.picture == "attention":
        from ..decoding import check_model_limits
        from ..run.checkpoint import load_for_inference
        from .translate import too_long

        model, tokenizer, src_vocab, tgt_vocab = load_for_inference(args.checkpoint)
        why = too_long(model, tokenizer, "sentence 1 of the arguments", args.sentence)
        if why is not None:  # as translate refuses it, naming the sentence
            raise ValueError(why)
        decoding = asked_decoding(args, tokenizer)  # translate's: the picture shows the translation it prints
        check_model_limits(
            model, args.max_len, args.beam_width if args.strategy == "beam" else None, flags=True
        )
        say_checkpoint_read("plot", args.checkpoint)  # every refusal before the work is behind
        written = plots.plot_attention(
            model, tokenizer, src_vocab, tgt_vocab, args.sentence, out, decoding, max_len=args.max_len
        )
    elif args.picture == "curves":
        written = [plots.plot_curves(args.run, out)]
    else:
        config, task = _gradient_model(args)
        if args.checkpoint:
            say_checkpoint_read("plot", args.checkpoint)
        written = [plots.plot_gradient_flow(config, task, out)]
    for path in written:
        print(f"wrote {path}")
    return 0
