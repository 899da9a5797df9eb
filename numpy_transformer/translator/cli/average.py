"""``numpy-transformer average``: the weights of checkpoints of one model, averaged."""

from __future__ import annotations

import argparse


def run_average(args: argparse.Namespace) -> int:
    from ..run.checkpoint import average_checkpoints, save_checkpoint
    from ..run.directory import check_average_out

    out = check_average_out(args.out, args.checkpoints, args.overwrite)
    arrays, meta = average_checkpoints(args.checkpoints, allow_no_run_id=args.allow_no_run_id)
    written = save_checkpoint(out, arrays, meta)  # atomic: replaces that one file and nothing else
    print(
        f"averaged {len(args.checkpoints)} checkpoint{'' if len(args.checkpoints) == 1 else 's'} into {written}"
    )
    return 0


def add_average(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "average", help="average the weights of checkpoints of one model, as the paper does"
    )
    p.add_argument(
        "checkpoints", nargs="+", metavar="RUN_OR_CHECKPOINT", help="run directories or .npz checkpoints"
    )
    p.add_argument(
        "--out",
        required=True,
        help="the averaged checkpoint: a .npz file, or a directory that gets model.npz (new, or holding "
        "only an earlier average; never a training run's directory, nor one of the checkpoints averaged)",
    )
    p.add_argument(
        "--overwrite", action="store_true", help="replace the file --out names, if it exists (nothing else)"
    )
    p.add_argument(
        "--allow-no-run-id",
        action="store_true",
        help="also average checkpoints saved before runs recorded a run id (you vouch they are of one run)",
    )
