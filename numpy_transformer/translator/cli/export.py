"""``numpy-transformer export``: a run as a Hugging Face directory that transformers loads (Marian for
post-norm runs without final norms, Pegasus for pre-norm runs with them, of one vocabulary or two),
or (``--ctranslate2``) as a CTranslate2 model directory."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_export(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "export",
        help="a run as a Hugging Face directory that transformers loads, which import reads back: Marian "
        "(MarianMTModel) for post-norm runs (--post-norm), Pegasus (PegasusForConditionalGeneration) for "
        "pre-norm runs with final norms (train's default; two vocabularies or untied embeddings go in its "
        "one embedding as two ranges of ids, the source's after the target's, with a projection of its own); "
        "either position layout; with the run's tokenizer (byte-level BPE and characters as tokenizer.json, "
        "of two vocabularies the target's in target/; Marian's SentencePiece as its files). Or "
        "(--ctranslate2) a CTranslate2 model directory",
    )
    p.add_argument("run", metavar="RUN", help="the run directory (or its model.npz) to export")
    p.add_argument(
        "--to",
        required=True,
        metavar="DIR",
        help="the directory to write (new or empty; missing parents are made)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the files of an export in --to (either kind's: a Hugging Face export's or "
        "a CTranslate2 one's, so that --to holds one model; other files are left): the new export is "
        "written whole beside it, then swapped in, so that --to holds the old one or the new one, whole",
    )
    p.add_argument(
        "--no-tokenizer",
        action="store_true",
        help="write the model alone, without the run's tokenizer (a word-tokenizer run's has no exact "
        "tokenizer.json): give it the run's token ids",
    )
    p.add_argument(
        "--ctranslate2",
        action="store_true",
        help="write a CTranslate2 model directory instead (float32; ctranslate2.Translator(DIR, "
        "compute_type='int8') quantizes it as it loads); any run of multi-head attention converts",
    )


def run_export(args: argparse.Namespace) -> int:
    from ...machine import require
    from ..huggingface.ctranslate2_export import export_ctranslate2
    from ..huggingface.directory import TARGET_TOKENIZER, check_destination
    from ..huggingface.export import ARCHITECTURES, export_pretrained, transformers_architecture
    from ..run.checkpoint import load_for_inference

    refuse_other_directories(args.run, args.to)
    if args.ctranslate2:
        require("export --ctranslate2", "ctranslate2")
        check_destination(args.to, args.overwrite)  # before the run is read
        model, tokenizer, src_vocab, tgt_vocab = load_for_inference(args.run)
        given = None if args.no_tokenizer else tokenizer
        vocabularies = (src_vocab, tgt_vocab)
        written = export_ctranslate2(model, vocabularies, args.to, args.overwrite, given)
        where = Path(args.to).expanduser()
        print(f"exported {args.run} into {args.to}: ", end="")
        print(", ".join(str(path.relative_to(where)) for path in written))
        say_ctranslate2_recipe(args.to, model, tokenizer, written)
        return 0
    require("export (a Hugging Face model's weights)", "safetensors")
    check_destination(args.to, args.overwrite)  # before the run is read
    model, tokenizer, src_vocab, tgt_vocab = load_for_inference(args.run)
    given = None if args.no_tokenizer else tokenizer
    written = export_pretrained(model, (src_vocab, tgt_vocab), args.to, given, args.overwrite)
    architecture = transformers_architecture(model)[0] or "marian"
    name = ARCHITECTURES[architecture][0]
    print(f"exported {args.run} into {args.to} as {architecture.capitalize()} ({name}): ", end="")
    print(", ".join(str(path.relative_to(Path(args.to).expanduser())) for path in written))
    if given is None:
        print(f"its tokenizer is not exported (--no-tokenizer): give {name} the run's token ids")
        return 0
    print(f"translate:  AutoTokenizer and {name}.from_pretrained('{args.to}'), then generate()")
    if any(path.parent.name == TARGET_TOKENIZER for path in written):
        print(
            f"            the translations decoded by AutoTokenizer.from_pretrained('{args.to}/{TARGET_TOKENIZER}')"
        )
    return 0


def refuse_other_directories(run: str, to: str) -> None:
    """ExportError, before any work, for a ``run`` that is an export rather than a run (import reads
    a Hugging Face one back as a run), and a ``to`` that holds a run (the run itself, too): an export
    goes into a directory of its own, never beside a run's files (--overwrite or not)."""
    from ..huggingface.directory import CONFIG, WEIGHTS, ExportError
    from ..run.checkpoint import FILENAME
    from ..run.directory import run_files

    folder = Path(run).expanduser()
    if folder.is_dir() and not (folder / FILENAME).exists() and (folder / CONFIG).is_file():
        if (folder / WEIGHTS).is_file():
            raise ExportError(
                f"RUN {run}: a Hugging Face export ({CONFIG}, {WEIGHTS}), not a run: import it first "
                f"(numpy-transformer import {run} --out NEW_RUN), then export NEW_RUN"
            )
        if (folder / "model.bin").is_file():
            raise ExportError(
                f"RUN {run}: a CTranslate2 export (model.bin), not a run: export the run it was made from"
            )
    destination = Path(to).expanduser()
    held = run_files(destination) if destination.is_dir() else []
    if held:
        same = destination.resolve() == (folder if folder.is_dir() else folder.parent).resolve()
        names = ", ".join(path.name for path in held[:3]) + (", ..." if len(held) > 3 else "")
        raise ExportError(
            f"--to {to}: {'is RUN itself, a' if same else 'holds a'} training run ({names}): an export goes into "
            "a directory of its own; give a new or empty one"
        )


def say_ctranslate2_recipe(to: str, model: Any, tokenizer: Any, written: list[Path]) -> None:
    """How to translate with the CTranslate2 export in ``to`` (its files ``written``): what splits the
    sources and joins the translations, and the longest translation its position table holds."""
    from ..huggingface.directory import SENTENCEPIECE_FILES, TARGET_TOKENIZER, TOKENIZER_JSON

    names = {str(path.relative_to(Path(to).expanduser())) for path in written}
    longest = f"max_decoding_length={model.config.tgt_seq_len}"
    print(f"translate:  ctranslate2.Translator('{to}').translate_batch(tokens, {longest}), ", end="")
    if TOKENIZER_JSON in names:
        target = f"{TARGET_TOKENIZER}/{TOKENIZER_JSON}"
        print(
            f"tokens = tokenizers.Tokenizer.from_file('{to}/{TOKENIZER_JSON}').encode(text).tokens, "
            f"the translations joined by {target if target in names else TOKENIZER_JSON}"
        )
    elif SENTENCEPIECE_FILES[0] in names:
        print(
            f"sentencepiece's {' and '.join(SENTENCEPIECE_FILES)} splitting and joining (a source ends in </s>)"
        )
    else:
        print(f"the run's {tokenizer.name} tokenizer splitting the sources and joining the translations")
