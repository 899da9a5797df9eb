"""What of a model and its tokenizer the exports cannot write, asked before any work: ``train`` says
it when a run starts, so that a run meant for transformers or CTranslate2 is not found unexportable
only once it is trained. Each export refuses the same things itself when asked to write them."""

from __future__ import annotations

from ...model import Transformer
from ..tokenizers import BPETokenizer, CharTokenizer, SentencePieceTokenizer, Tokenizer
from ..vocabulary import Vocab
from .ctranslate2_export import ctranslate2_unrepresentable
from .export import refusal
from .tokenizer_json import TokenizerExportError, huggingface_tokenizer


def export_limits(model: Transformer, tokenizer: Tokenizer, vocab: Vocab) -> list[str]:
    """Why ``export`` cannot write ``model`` with ``tokenizer`` (of the source vocabulary ``vocab``) whole,
    one reason a target: to transformers (export.refusal), to CTranslate2 (ctranslate2_unrepresentable),
    and a tokenizer with no tokenizer.json (a word tokenizer: the model goes alone, --no-tokenizer).
    Empty: both take it whole."""
    lacking = []
    transformers = refusal(model)
    if transformers:
        lacking.append(f"to transformers: {transformers}")
    ctranslate2 = ctranslate2_unrepresentable(model)
    if ctranslate2:
        lacking.append(f"to CTranslate2: CTranslate2 cannot represent this model's {'; '.join(ctranslate2)}")
    if not isinstance(tokenizer, (BPETokenizer, CharTokenizer, SentencePieceTokenizer)):
        try:  # refused by its kind alone, before any work
            huggingface_tokenizer(tokenizer, vocab)
        except TokenizerExportError as error:
            lacking.append(str(error).removeprefix("tokenizer: "))
    return lacking
