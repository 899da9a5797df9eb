"""``numpy-transformer import``: a pretrained Marian (OPUS-MT) translator, or a run's Marian or
Pegasus export, as a run."""

from __future__ import annotations

import argparse

from ...machine import require
from ...model import DTYPES


def add_import(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "import",
        help="a pretrained Marian (OPUS-MT) translator, downloaded in the Hugging Face format, or a run's "
        "Marian or Pegasus export, as a run directory that translate, evaluate --data, plot attention "
        "and train --from read",
    )
    p.add_argument(
        "directory",
        metavar="DIR",
        help="the model's directory: config.json, model.safetensors, and source.spm, target.spm, vocab.json "
        "(Marian's tokenizer) or an export's tokenizer.json",
    )
    p.add_argument("--out", required=True, metavar="RUN", help="the run directory to write")
    p.add_argument("--overwrite", action="store_true", help="replace the run saved in --out")
    p.add_argument(
        "--dtype",
        choices=DTYPES,
        default=None,
        help="the weights' type (default: an export's own, float32 for any other model)",
    )


def run_import(args: argparse.Namespace) -> int:
    from ...model import parameter_count
    from ..run.importing import import_run

    require("import (a model's weights)", "safetensors")  # its tokenizer's library is asked for when read
    written, model = import_run(args.directory, args.out, args.overwrite, args.dtype)
    run = written.parent
    print(
        f"imported {args.directory} ({parameter_count(model.config):,} parameters, vocabulary "
        f"{model.config.tgt_vocab_size:,}) into {written}\n"
        f"translate:  numpy-transformer translate --checkpoint {run} 'A sentence.'\n"
        f"fine-tune:  numpy-transformer train --from {run} --data FILE.tsv --out NEW_RUN"
    )
    return 0
