"""The Hugging Face formats, both ways: a Marian (OPUS-MT) or Pegasus model directory read as a
Transformer (written as a run by the run package: run.importing), and a run written as one that
transformers loads, or as a CTranslate2 model.

The rooms, one concept each: a model directory's file names, bounded reads and atomic export writes
(``directory``); the safetensors header reader (``safetensors_reader``); config.json read and checked,
and written (``config_json``); the weights under transformers' names and the reordering of
interleaved positions, both ways (``weights``); loading a model (``loading``: load_pretrained,
plan_weights); the tokenizer files, both ways (``tokenizer_files``: MarianTokenizer, tokenizer.json), of
which a run's own tokenizer as tokenizer.json and back (``tokenizer_json``);
the transformers export (``export``: export_pretrained) and the CTranslate2 one
(``ctranslate2_export``: export_ctranslate2); what of a run neither can write, asked before it
trains (``exportable``: export_limits).
Nothing here reaches the network, and nothing is unpickled.
"""

from .config_json import marian_special_ids, read_config
from .ctranslate2_export import export_ctranslate2
from .directory import ExportError, PretrainedError
from .export import export_pretrained
from .loading import load_pretrained
from .tokenizer_files import MarianTokenizer

__all__ = [
    "ExportError",
    "MarianTokenizer",
    "PretrainedError",
    "export_ctranslate2",
    "export_pretrained",
    "load_pretrained",
    "marian_special_ids",
    "read_config",
]
