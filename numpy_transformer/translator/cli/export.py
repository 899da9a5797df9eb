"""``numpy-transformer export``: a run as a Hugging Face directory that transformers loads (Marian for
post-norm runs without final norms, Pegasus for pre-norm runs with them, one vocabulary and tied
embeddings), or (``--ctranslate2``) as a CTranslate2 model directory."""

from __future__ import annotations

import argparse


def add_export(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "export",
        help="a run as a Hugging Face directory that transformers loads: Marian (MarianMTModel, which "
        "import reads back) for post-norm runs without final norms (--post-norm --no-final-norm), Pegasus "
        "(PegasusForConditionalGeneration) for pre-norm runs with final norms of one vocabulary and tied "
        "embeddings (--shared-vocab --tie-embeddings); either position layout. Or (--ctranslate2) a "
        "CTranslate2 model directory",
    )
    p.add_argument("run", metavar="RUN", help="the run directory (or its model.npz) to export")
    p.add_argument("--to", required=True, metavar="DIR", help="the directory to write (new or empty)")
    p.add_argument("--overwrite", action="store_true", help="replace the files of an export in --to")
    p.add_argument(
        "--ctranslate2",
        action="store_true",
        help="write a CTranslate2 model directory instead (float32; ctranslate2.Translator(DIR, "
        "compute_type='int8') quantizes it as it loads); any run of multi-head attention converts",
    )


def run_export(args: argparse.Namespace) -> int:
    from ...machine import require
    from ..checkpoint import load_for_inference
    from ..export import (
        ARCHITECTURES,
        CTRANSLATE2_WRITTEN,
        check_destination,
        export_ctranslate2,
        export_pretrained,
        transformers_architecture,
    )
    from ..tokenizers import SentencePieceTokenizer

    if args.ctranslate2:
        require("export --ctranslate2", "ctranslate2")
        check_destination(args.to, args.overwrite, CTRANSLATE2_WRITTEN)  # before the run is read
        model, tokenizer, src_vocab, tgt_vocab = load_for_inference(args.run)
        written = export_ctranslate2(model, (src_vocab, tgt_vocab), args.to, args.overwrite)
        print(f"exported {args.run} into {args.to}: {', '.join(path.name for path in written)}")
        print(
            f"translate:  ctranslate2.Translator('{args.to}').translate_batch(tokens), the run's "
            f"{tokenizer.name} tokenizer splitting the sources and joining the translations"
        )
        return 0
    check_destination(args.to, args.overwrite)  # before the run is read
    model, tokenizer, src_vocab, tgt_vocab = load_for_inference(args.run)
    written = export_pretrained(model, (src_vocab, tgt_vocab), args.to, tokenizer, args.overwrite)
    architecture = transformers_architecture(model)[0] or "marian"
    name = ARCHITECTURES[architecture][0]
    print(f"exported {args.run} into {args.to} as {architecture.capitalize()} ({name}): ", end="")
    print(", ".join(path.name for path in written))
    if isinstance(tokenizer, SentencePieceTokenizer) and architecture == "marian":
        print(f"translate:  AutoTokenizer and {name}.from_pretrained('{args.to}'), then generate()")
    else:
        print(
            f"its {tokenizer.name} tokenizer is not exported (only Marian's SentencePiece is, with a "
            f"Marian export): give {name} the run's token ids"
        )
    return 0
