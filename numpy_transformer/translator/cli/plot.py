"""``numpy-transformer plot``: attention heatmaps, training curves, gradient norms."""

from __future__ import annotations

import argparse
from pathlib import Path

from ...machine import require
from .common import DEFAULT_OUT, positive_int


def add_plot(commands: argparse._SubParsersAction) -> None:
    plot = commands.add_parser(
        "plot", help="pictures: attention maps, training curves, gradient flow (needs matplotlib)"
    )
    kinds = plot.add_subparsers(dest="picture", required=True)
    p = kinds.add_parser("attention", help="layer x head attention heatmaps for one sentence")
    p.add_argument("--checkpoint", default=DEFAULT_OUT, help="run directory or model.npz")
    p.add_argument(
        "--out", default="attention.png", help="writes <stem>-encoder.png, -decoder.png, -cross.png"
    )
    p.add_argument("sentence")
    p = kinds.add_parser("curves", help="loss, dev BLEU and learning rate from a training log")
    p.add_argument("--run", default=DEFAULT_OUT, help="run directory or its log.jsonl")
    p.add_argument("--out", default="curves.png")
    p = kinds.add_parser(
        "gradients", help="per-layer gradient norms at initialisation, pre-norm vs post-norm"
    )
    p.add_argument(
        "--checkpoint", help="take the model configuration and task from this run (default: copy task)"
    )
    p.add_argument("--layers", type=positive_int, default=6, help="N when no checkpoint is given")
    p.add_argument("--out", default="gradients.png")


def run_plot(args: argparse.Namespace) -> int:
    from .. import plots

    require("plot", "matplotlib")
    folder = Path(args.out).expanduser().parent
    if not folder.is_dir():
        raise ValueError(
            f"--out {args.out}: the folder {folder} does not exist"
            + (" (it is a file)" if folder.exists() else "")
            + ": create it first, or name a file in an existing folder"
        )

    if args.picture == "attention":
        from ..checkpoint import load_for_inference

        model, tokenizer, src_vocab, tgt_vocab = load_for_inference(args.checkpoint)
        written = plots.plot_attention(model, tokenizer, src_vocab, tgt_vocab, args.sentence, args.out)
    elif args.picture == "curves":
        written = [plots.plot_curves(args.run, args.out)]
    else:
        from ..checkpoint import load_meta, trained_task
        from ..tasks import make_task

        if args.checkpoint:
            meta = load_meta(args.checkpoint)
            config, task = meta["model"], trained_task(args.checkpoint, meta)
        else:
            task = make_task("copy")
            config = {
                "src_vocab_size": len(task.src_vocab),
                "tgt_vocab_size": len(task.tgt_vocab),
                "src_seq_len": 16,
                "tgt_seq_len": 16,
                "d_model": 64,
                "N": args.layers,
                "h": 4,
                "d_ff": 256,
                "dropout": 0.0,
            }
        written = [plots.plot_gradient_flow(config, task, args.out)]
    for path in written:
        print(f"wrote {path}")
    return 0
