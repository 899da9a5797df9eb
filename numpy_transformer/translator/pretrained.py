"""Pretrained Marian (OPUS-MT) translators, and Marian and Pegasus models (this package's exports,
transformers' Pegasus), read from a local Hugging Face model directory.

``load_pretrained(DIR)`` reads ``config.json`` and ``model.safetensors`` (its JSON header first,
checked against config.json before anything is built, then each tensor the model uses from a
memory map of its bytes: nothing is unpickled, nothing unused is read) and returns an ordinary
:class:`Transformer` built with the options Marian's architecture needs (post-norm blocks without
final norms, SiLU feed-forward, biased attention projections, sines-then-cosines positions, one
embedding matrix for the source, the target and the projection, or with ``tie_word_embeddings``
false the file's own three, and ``final_logits_bias`` as the projection's bias). Its token ids
are Marian's own (``vocab.json``): ``marian_special_ids`` gives the padding, the end of sentence
and the decoder's start token (Marian starts decoding from the padding id).

A Pegasus model (``model_type`` pegasus) is read as pre-norm blocks with a final layer norm after
each stack and one embedding (``model.shared``); an export of this package's (config.json's
``numpy_transformer`` settings) is read back as the model it was: its position layout (an
interleaved model's weights, reordered for split sinusoids on export, reordered back), its
vocabularies' own sizes (the rows after them, its tokenizer's units read as ``<unk>``, are left), its
dtype, and by ``import_run`` its tokenizer (read_exported_tokenizer: ``tokenizer.json``).

Nothing here reaches the network: the user downloads a model once (docs/translating.md, "Start
from a pretrained translator").
"""

from __future__ import annotations

import json
import math
import re
import uuid
from contextlib import suppress
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy

from ..backend import get_array_module, to_numpy
from ..functional import sinusoidal_table
from ..machine import available_memory, require
from ..model import DTYPES, Transformer, TransformerConfig, build_from_config, parameter_count
from .tokenizers import SentencePieceTokenizer, Tokenizer, from_huggingface
from .vocabulary import SpecialIds, Vocab

CONFIG, WEIGHTS, VOCAB = "config.json", "model.safetensors", "vocab.json"
TARGET_VOCAB = "target_vocab.json"  # the target's vocabulary of a Marian tokenizer of separate ones
SENTENCEPIECE_FILES = ("source.spm", "target.spm")
PICKLED = ("pytorch_model.bin", "tf_model.h5", "flax_model.msgpack")
ACTIVATION_NAMES = {
    "swish": "silu",
    "silu": "silu",
    "relu": "relu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
}
CONVERT = (
    'python -c "from transformers import MarianMTModel as M; '
    "M.from_pretrained('{dir}').save_pretrained('{dir}', safe_serialization=True)\""
)


class PretrainedError(ValueError):
    """A model directory that cannot be read as a Marian translator: the message names the file
    and the problem, and what to do where there is something to do."""


MAX_CONFIG, MAX_VOCAB = 1 << 20, 64 << 20  # config.json and vocab.json are read up to these sizes


def _read_bounded(path: Path, limit: int) -> bytes:
    """The file's bytes, refused naming it when it holds more than ``limit`` (a device, a wrong file)."""
    try:
        with open(path, "rb") as file:
            data = file.read(limit + 1)
    except OSError as error:
        raise PretrainedError(f"{path}: cannot be read ({error.strerror or error})") from None
    if len(data) > limit:
        raise PretrainedError(
            f"{path}: larger than {limit >> 20} MiB (a model directory's {path.name} is far smaller): "
            "not the file of a model this package reads"
        )
    return data


def read_config(directory: str | Path) -> dict[str, Any]:
    """The directory's ``config.json``, checked to be a Marian model this package can build."""
    path = Path(directory) / CONFIG
    if not Path(directory).is_dir():
        raise PretrainedError(f"{directory}: not a directory (expected a Hugging Face model directory)")
    if path.exists() and not path.is_file():
        raise PretrainedError(
            f"{path}: not a regular file (a Hugging Face model directory holds config.json)"
        )
    if not path.is_file():
        raise PretrainedError(f"{path}: no such file (a Hugging Face model directory holds config.json)")
    try:
        config = json.loads(_read_bounded(path, MAX_CONFIG).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise PretrainedError(f"{path}: not valid JSON ({error})") from error
    if not isinstance(config, dict):
        kinds = {list: "a list", str: "a string", bool: "true or false", type(None): "null"}
        raise PretrainedError(
            f"{path}: expected a JSON object, got {kinds.get(type(config), 'a number')} "
            "(a Hugging Face model's config.json is an object of its settings)"
        )
    if config.get("model_type") not in MODEL_TYPES:
        found = config.get("model_type")
        raise PretrainedError(
            f"{path}: model_type is {found!r}, expected 'marian' (an OPUS-MT model) or 'pegasus'"
        )
    _check_values(config, path)
    pairs = (
        ("encoder_layers", "decoder_layers"),
        ("encoder_attention_heads", "decoder_attention_heads"),
        ("encoder_ffn_dim", "decoder_ffn_dim"),
    )
    for encoder_key, decoder_key in pairs:
        if config.get(encoder_key) != config.get(decoder_key):
            raise PretrainedError(
                f"{path}: {encoder_key}={config.get(encoder_key)!r} and {decoder_key}={config.get(decoder_key)!r} "
                "differ; this package builds encoders and decoders of one shape"
            )
    activation = config.get("activation_function", "swish")
    if activation not in ACTIVATION_NAMES:
        raise PretrainedError(
            f"{path}: activation_function {activation!r} is not supported (expected one of "
            f"{', '.join(sorted(ACTIVATION_NAMES))})"
        )
    if not config.get("scale_embedding", False):
        raise PretrainedError(
            f"{path}: scale_embedding is false, but this package always scales embeddings by sqrt(d_model)"
        )
    pegasus = config["model_type"] == "pegasus"
    if config.get("normalize_before", pegasus) != pegasus:
        raise PretrainedError(
            f"{path}: normalize_before is {str(not pegasus).lower()}; "
            + ("Pegasus's blocks are pre-norm" if pegasus else "Marian's blocks are post-norm")
        )
    vocab, decoder_vocab = vocab_sizes(config)
    if config.get("share_encoder_decoder_embeddings", True) and decoder_vocab != vocab:
        raise PretrainedError(
            f"{path}: decoder_vocab_size {decoder_vocab} differs from vocab_size {vocab}, but "
            "share_encoder_decoder_embeddings is true (one embedding for both)"
        )
    for key in ("pad_token_id", "eos_token_id"):  # the padding row of both embeddings; </s> an output
        if config[key] >= decoder_vocab:
            raise PretrainedError(
                f"{path}: {key} is {config[key]}, expected a token id in [0, {decoder_vocab}) (decoder_vocab_size)"
            )
    _check_settings(config, path)
    return config


SETTINGS = "numpy_transformer"  # config.json's key for the model settings Marian has no key for
SETTING_TYPES = {  # each such setting, and what its value must be
    "attention_bias": "true or false",
    "shared_vocab": "true or false",
    "padding_idx": "a token id or null",
    "src_seq_len": "a whole number in [1, max_position_embeddings]",
    "tgt_seq_len": "a whole number in [1, max_position_embeddings]",
    "positions": "'split' or 'interleaved' (the weights reordered for split sinusoids)",
    "src_vocab_size": "a whole number in [1, vocab_size] (the rows after it: its tokenizer's units read as <unk>)",
    "tgt_vocab_size": "a whole number in [1, decoder_vocab_size]",
}
MODEL_TYPES = ("marian", "pegasus")  # Marian: post-norm blocks; Pegasus: pre-norm, final norms, one embedding


def vocab_sizes(config: dict[str, Any]) -> tuple[int, int]:
    """The source and target vocabularies' sizes: ``vocab_size``, and ``decoder_vocab_size`` (itself
    when null or absent)."""
    return config["vocab_size"], config.get("decoder_vocab_size") or config["vocab_size"]


def _check_settings(config: dict[str, Any], path: Path) -> None:
    """config.json's ``numpy_transformer`` object (what export_pretrained writes: the settings of this
    package's model that Marian's configuration has no key for) holds only those, each valid."""
    settings = config.get(SETTINGS, {})
    if not isinstance(settings, dict):
        raise PretrainedError(f"{path}: {SETTINGS} is {settings!r}, expected an object of model settings")
    unknown = sorted(set(settings) - set(SETTING_TYPES))
    if unknown:
        raise PretrainedError(
            f"{path}: {SETTINGS} holds {', '.join(map(repr, unknown))}, expected only {', '.join(SETTING_TYPES)}"
        )
    length, smallest = config["max_position_embeddings"], min(vocab_sizes(config))
    for key, value in settings.items():
        if key in ("attention_bias", "shared_vocab"):
            valid = isinstance(value, bool)
        elif key == "padding_idx":
            valid = value is None or (_is_int(value) and 0 <= value < smallest)
        elif key == "positions":
            valid = value in ("split", "interleaved")
        elif key in ("src_vocab_size", "tgt_vocab_size"):
            valid = _is_int(value) and 1 <= value <= vocab_sizes(config)[key == "tgt_vocab_size"]
        else:
            valid = _is_int(value) and 1 <= value <= length
        if not valid:
            raise PretrainedError(f"{path}: {SETTINGS}.{key} is {value!r}, expected {SETTING_TYPES[key]}")
    if settings.get("shared_vocab") and len(set(vocab_sizes(config))) > 1:
        raise PretrainedError(
            f"{path}: {SETTINGS}.shared_vocab is true, but vocab_size and decoder_vocab_size differ"
        )


POSITIVE = (  # config.json's sizes: whole numbers >= 1 (a float such as 16.5 is refused, never truncated)
    "d_model",
    "encoder_layers",
    "decoder_layers",
    "encoder_attention_heads",
    "decoder_attention_heads",
    "encoder_ffn_dim",
    "decoder_ffn_dim",
    "max_position_embeddings",
    "vocab_size",
)
MAX_POSITIONS = 1 << 16  # the position tables are computed, not read: a bound before they are built
FLAGS = ("scale_embedding", "normalize_before", "tie_word_embeddings", "share_encoder_decoder_embeddings")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_values(config: dict[str, Any], path: Path) -> None:
    """Each value config.json gives a setting this package reads has the type and range it needs;
    the message names the file, the key, the value and what was expected."""
    for key in POSITIVE:
        if key not in config:
            raise PretrainedError(f"{path}: has no {key!r} (a whole number >= 1)")
        value: Any = config[key]
        if not _is_int(value) or value < 1:
            raise PretrainedError(f"{path}: {key} is {value!r}, expected a whole number >= 1")
    if config["max_position_embeddings"] > MAX_POSITIONS:
        raise PretrainedError(
            f"{path}: max_position_embeddings is {config['max_position_embeddings']}, expected at most "
            f"{MAX_POSITIONS} (its two position tables are built before any weight is read)"
        )
    for key in ("pad_token_id", "eos_token_id"):
        value = config.get(key)
        if not _is_int(value) or not 0 <= value < config["vocab_size"]:
            raise PretrainedError(
                f"{path}: {key} is {value!r}, expected a token id in [0, {config['vocab_size']}) (vocab_size)"
            )
    for key in ("decoder_start_token_id", "decoder_vocab_size"):
        value = config.get(key)
        if value is not None and (not _is_int(value) or value < 0):
            raise PretrainedError(f"{path}: {key} is {value!r}, expected a whole number >= 0 or null")
    for key in FLAGS:
        if key in config and not isinstance(config[key], bool):
            raise PretrainedError(f"{path}: {key} is {config[key]!r}, expected true or false")
    dropout = config.get("dropout", 0.1)
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise PretrainedError(f"{path}: dropout is {dropout!r}, expected a number in [0, 1)")
    activation = config.get("activation_function", "swish")
    if not isinstance(activation, str):
        raise PretrainedError(
            f"{path}: activation_function is {activation!r}, expected one of {', '.join(sorted(ACTIVATION_NAMES))}"
        )
    if config["d_model"] % config["encoder_attention_heads"]:
        raise PretrainedError(
            f"{path}: d_model {config['d_model']} is not divisible by encoder_attention_heads "
            f"{config['encoder_attention_heads']}"
        )


def marian_special_ids(config: dict[str, Any]) -> dict[str, int]:
    """pad, eos and the decoder's start token (``decoder_start_token_id``, Marian's padding id)."""
    pad = int(config["pad_token_id"])
    return {
        "pad_id": pad,
        "eos_id": int(config["eos_token_id"]),
        "bos_id": int(config.get("decoder_start_token_id", pad)),
    }


def weights_path(directory: str | Path) -> Path:
    """The directory's ``model.safetensors``; a directory with only a pickled checkpoint is refused
    with the command that converts it."""
    path = Path(directory) / WEIGHTS
    if not path.is_file():
        pickled = [name for name in PICKLED if (Path(directory) / name).is_file()]
        if pickled:
            raise PretrainedError(
                f"{Path(directory) / pickled[0]}: a pickled checkpoint, which is never loaded (unpickling can run "
                f"any code); convert it once to {WEIGHTS} with: {CONVERT.format(dir=directory)}"
            )
        what = "not a regular file" if path.exists() else "no such file"
        raise PretrainedError(f"{path}: {what} (a Hugging Face model directory holds its weights in it)")
    return path


SAFETENSORS_DTYPES: dict[
    str, numpy.dtype[Any]
] = {  # the dtypes a weight may have; BF16 is widened to float32 by hand (NumPy has none)
    "F64": numpy.dtype("<f8"),
    "F32": numpy.dtype("<f4"),
    "F16": numpy.dtype("<f2"),
    "BF16": numpy.dtype("<u2"),
}
ITEM_SIZES = {  # bytes per item of every dtype a file may hold: tensors lie end to end in the data
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "U64": 8,
    "I32": 4,
    "U32": 4,
    "I16": 2,
    "U16": 2,
    "I8": 1,
    "U8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "F8_E8M0": 1,
    "F8_E4M3FNUZ": 1,
    "F8_E5M2FNUZ": 1,
    "C64": 8,
    "BOOL": 1,
}


class TensorEntry:
    """One tensor of a safetensors file, as its header describes it: read only when asked."""

    def __init__(
        self, path: Path, name: str, dtype: str, shape: tuple[int, ...], start: int, stop: int
    ) -> None:
        self.path, self.name, self.dtype, self.shape = path, name, dtype, shape
        self.start, self.stop = start, stop

    def read(self) -> numpy.ndarray:
        """The tensor as a float array (float32 for BF16 and F16, float64 for F64), read from its bytes alone."""
        if self.dtype not in SAFETENSORS_DTYPES:
            raise PretrainedError(
                f"{self.path}: tensor {self.name!r} has dtype {self.dtype}, expected one of "
                f"{', '.join(SAFETENSORS_DTYPES)} (a weight)"
            )
        dtype = SAFETENSORS_DTYPES[self.dtype]
        if math.prod(self.shape) == 0:
            raw = numpy.empty(self.shape, dtype)
        else:  # a view of the file's bytes: the copy below is the only memory it takes
            raw = numpy.array(
                numpy.memmap(self.path, dtype=dtype, mode="r", offset=self.start, shape=self.shape)
            )
        if self.dtype == "BF16":  # bfloat16 is float32's upper half
            return (raw.astype(numpy.uint32) << 16).view(numpy.float32)
        return raw


def read_header(path: Path) -> dict[str, TensorEntry]:
    """The tensors a safetensors file holds, from its header alone, as the ``safetensors`` library
    reads it: it refuses a header that is not one, offsets that overlap, leave gaps or pass the end,
    and bytes after the data. Nothing but the header is read."""
    require("reading a safetensors file", "safetensors")
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="numpy") as file:
            layout = [
                (name, piece.get_dtype(), tuple(piece.get_shape()))
                for name in file.offset_keys()
                for piece in (file.get_slice(name),)
            ]
    except SafetensorError as error:
        raise PretrainedError(f"{path}: corrupt or not a safetensors file ({error})") from None
    unsized = next((f"{name!r} ({dtype})" for name, dtype, _ in layout if dtype not in ITEM_SIZES), None)
    if unsized is not None:  # F4, F6: under a byte an item, which no weight of Marian's is
        raise PretrainedError(f"{path}: tensor {unsized} has a dtype this package cannot read")
    sizes = [math.prod(shape) * ITEM_SIZES[dtype] for _, dtype, shape in layout]
    start = path.stat().st_size - sum(sizes)  # the library checked the data fill the file's end
    tensors = {}
    for (name, dtype, shape), size in zip(layout, sizes):
        tensors[name] = TensorEntry(path, name, dtype, shape, start, start + size)
        start += size
    return tensors


def marian_embedding_names(tied: bool, shared: bool) -> dict[str, tuple[str, ...]]:
    """The embedding matrices of a model of ``tie_embeddings`` ``tied`` and ``shared_vocab`` ``shared``
    -> the names Marian's tensor may have, the one export_pretrained writes first (each also under a
    "model." prefix, except ``lm_head``). Tied and shared: one matrix (``share_encoder_decoder_embeddings``
    and ``tie_word_embeddings``); tied alone: the source's, and the target's as the projection
    (``tie_word_embeddings`` alone); untied: three."""
    if tied and shared:
        return {"src_embed.embedding.weight": EMBEDDINGS}
    if tied:
        return {
            "src_embed.embedding.weight": ("encoder.embed_tokens.weight",),
            "tgt_embed.embedding.weight": ("decoder.embed_tokens.weight", "lm_head.weight"),
        }
    return {
        "src_embed.embedding.weight": ("encoder.embed_tokens.weight", "shared.weight"),
        "tgt_embed.embedding.weight": ("decoder.embed_tokens.weight", "shared.weight"),
        "projection_layer.proj.weight": ("lm_head.weight",),
    }


def marian_names(
    layers: int, tied: bool = True, shared: bool = True, final_norm: bool = False
) -> dict[str, tuple[str, ...]]:
    """numpy_transformer's parameter names -> the names Marian's tensor may have, transformers' own
    first (each also under a "model." prefix); the embeddings as marian_embedding_names gives them;
    with ``final_norm``, the final norms as Pegasus names them (``encoder.layer_norm``)."""

    def attention(ours: str, theirs: str) -> dict[str, tuple[str, ...]]:
        return {
            f"{ours}.{mine}.{part}": (f"{theirs}.{marian}_proj.{part}",)
            for mine, marian in (("w_q", "q"), ("w_k", "k"), ("w_v", "v"), ("w_o", "out"))
            for part in ("weight", "bias")
        }

    def norm(ours: str, theirs: str) -> dict[str, tuple[str, ...]]:
        return {f"{ours}.gamma": (f"{theirs}.weight",), f"{ours}.beta": (f"{theirs}.bias",)}

    def feed_forward(ours: str, theirs: str) -> dict[str, tuple[str, ...]]:
        return {
            f"{ours}.linear_{i}.{part}": (f"{theirs}.fc{i}.{part}",)
            for i in (1, 2)
            for part in ("weight", "bias")
        }

    names = {**marian_embedding_names(tied, shared), "projection_layer.proj.bias": ("final_logits_bias",)}
    if final_norm:
        names |= norm("encoder.norm", "encoder.layer_norm") | norm("decoder.norm", "decoder.layer_norm")
    for i in range(layers):
        side = f"encoder.layers.{i}"
        names |= attention(f"{side}.self_attention_block", f"{side}.self_attn")
        names |= norm(f"{side}.residual_connections.0.norm", f"{side}.self_attn_layer_norm")
        names |= feed_forward(f"{side}.feed_forward_block", side)
        names |= norm(f"{side}.residual_connections.1.norm", f"{side}.final_layer_norm")
        side = f"decoder.layers.{i}"
        names |= attention(f"{side}.self_attention_block", f"{side}.self_attn")
        names |= norm(f"{side}.residual_connections.0.norm", f"{side}.self_attn_layer_norm")
        names |= attention(f"{side}.cross_attention_block", f"{side}.encoder_attn")
        names |= norm(f"{side}.residual_connections.1.norm", f"{side}.encoder_attn_layer_norm")
        names |= feed_forward(f"{side}.feed_forward_block", side)
        names |= norm(f"{side}.residual_connections.2.norm", f"{side}.final_layer_norm")
    return names


def _state_dict(weights: dict[str, numpy.ndarray], layers: int, path: Path) -> dict[str, numpy.ndarray]:
    """numpy_transformer's parameter names -> Marian's tensors (marian_names)."""

    def get(names: tuple[str, ...]) -> numpy.ndarray:
        for name in names:
            for prefix in ("", "model."):
                if prefix + name in weights:
                    return weights[prefix + name]
        raise PretrainedError(f"{path}: holds no tensor {names[0]!r}")

    state = {ours: get(theirs) for ours, theirs in marian_names(layers).items()}
    state["projection_layer.proj.bias"] = state["projection_layer.proj.bias"].reshape(-1)
    return state


EMBEDDINGS = ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight")
POSITIONS = {"encoder": "encoder.embed_positions.weight", "decoder": "decoder.embed_positions.weight"}


def model_shape(config: dict[str, Any], dtype: str, path: Path) -> TransformerConfig:
    """The configuration of the model config.json describes: Marian's settings, and those its
    ``numpy_transformer`` object gives (export_pretrained's: a model of this package's, exported)."""
    settings = config.get(SETTINGS, {})
    tied = config.get("tie_word_embeddings", True)
    pegasus = config["model_type"] == "pegasus"  # pre-norm, final norms, one embedding (model.shared)
    vocab, decoder_vocab = vocab_sizes(config)
    length = config["max_position_embeddings"]
    try:
        return TransformerConfig(
            settings.get("src_vocab_size", vocab),
            settings.get("tgt_vocab_size", decoder_vocab),
            settings.get("src_seq_len", length),
            settings.get("tgt_seq_len", length),
            d_model=config["d_model"],
            N=config["encoder_layers"],
            h=config["encoder_attention_heads"],
            dropout=float(config.get("dropout", 0.1)),
            d_ff=config["encoder_ffn_dim"],
            norm_first=pegasus,
            dtype=dtype,
            tie_embeddings=tied,
            shared_vocab=settings.get(
                "shared_vocab", pegasus or config.get("share_encoder_decoder_embeddings", True)
            ),
            activation=ACTIVATION_NAMES[config.get("activation_function", "swish")],
            attention_bias=settings.get("attention_bias", True),
            positions=settings.get("positions", "split"),
            final_norm=pegasus,
            padding_idx=settings.get("padding_idx", config["pad_token_id"]),  # transformers' nn.Embedding's
        )
    except ValueError as error:
        raise PretrainedError(f"{path}: {error}") from None


def plan_weights(
    config: dict[str, Any], tensors: dict[str, TensorEntry], path: Path, shape: TransformerConfig
) -> tuple[dict[str, TensorEntry], dict[str, TensorEntry], list[TensorEntry]]:
    """Which tensor of the file each parameter of the model ``shape`` describes is read from ({our
    name: entry}), the saved position tables ({"encoder" / "decoder": entry}) and the tensors that must
    hold zeros (the attention biases of a model without them), from the header alone: every tensor
    the configuration needs must be there with the shape it gives, and every tensor of the file must
    have a place, or the file is refused naming them, before anything is built or read.

    The embeddings are read under the names marian_embedding_names gives: with ``tie_word_embeddings``
    (Marian's default) and ``share_encoder_decoder_embeddings`` one matrix is the source and target
    embedding and the projection (any copies the file holds under the other names have its shape)."""
    width, ffn, length = shape.d_model, shape.d_ff, config["max_position_embeddings"]
    vocab, decoder_vocab = vocab_sizes(config)  # the file's rows: the model's, and any of <unk> after them
    layers, tied = shape.N, shape.tie_embeddings
    used: set[str] = set()

    def find(name: str) -> str | None:
        return next((prefix + name for prefix in ("model.", "") if prefix + name in tensors), None)

    def expected_shape(ours: str) -> tuple[tuple[int, ...], ...]:
        if ours == "src_embed.embedding.weight":
            return ((vocab, width),)
        if ours.endswith("embedding.weight") or ours == "projection_layer.proj.weight":
            return ((decoder_vocab, width),)
        if ours == "projection_layer.proj.bias":
            return ((1, decoder_vocab), (decoder_vocab,))
        if ".linear_1." in ours:
            return ((ffn, width),) if ours.endswith("weight") else ((ffn,),)
        if ".linear_2." in ours:
            return ((width, ffn),) if ours.endswith("weight") else ((width,),)
        if ours.endswith(".w_q.weight") or ours.endswith(".w_k.weight") or ours.endswith(".w_v.weight"):
            return ((width, width),)
        if ours.endswith(".w_o.weight"):
            return ((width, width),)
        return ((width,),)

    def check_shape(name: str, shapes: tuple[tuple[int, ...], ...]) -> None:
        if tensors[name].shape not in shapes:
            raise PretrainedError(
                f"{path}: the weights do not fit config.json (tensor {name!r} has shape "
                f"{list(tensors[name].shape)}, config.json's d_model {width}, encoder_ffn_dim {ffn}, "
                f"vocab_size {vocab} and decoder_vocab_size {decoder_vocab} give "
                f"{' or '.join(str(list(s)) for s in shapes)})"
            )

    present = [  # the layers the file holds: a configuration of more is refused before listing its names
        int(match.group(1))
        for name in tensors
        if (match := re.search(r"(?:^|\.)(?:en|de)coder\.layers\.(\d+)\.", name))
    ]
    if layers > max(present, default=-1) + 1:
        raise PretrainedError(
            f"{path}: holds no tensor 'encoder.layers.{max(present, default=-1) + 1}.*', which config.json "
            f"(encoder_layers {layers}) needs: the file holds {max(present, default=-1) + 1} layers"
        )
    plan: dict[str, TensorEntry] = {}
    zeros: list[TensorEntry] = []
    missing: list[str] = []
    embeddings = marian_embedding_names(tied, shape.shared_vocab)
    for ours, theirs in marian_names(layers, tied, shape.shared_vocab, shape.final_norm).items():
        copies = [found for found in map(find, theirs) if found is not None]
        if not copies:
            untied = (
                " (tie_word_embeddings is false: the projection is its own)"
                if theirs[0] == "lm_head.weight"
                else ""
            )
            missing.append(theirs[0] + untied)
            continue
        for found in (
            copies if ours in embeddings else copies[:1]
        ):  # every copy the file holds is accounted for
            check_shape(found, expected_shape(ours))
            used.add(found)
        if shape.attention_bias or not re.search(r"_attn\.\w+_proj\.bias$", theirs[0]):
            plan[ours] = tensors[copies[0]]
        else:
            zeros.append(tensors[copies[0]])
    saved_positions = {}
    for side, name in POSITIONS.items():
        table = find(name)
        if table is not None:
            check_shape(table, ((length, width),))
            saved_positions[side] = tensors[table]
            used.add(table)
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise PretrainedError(
            f"{path}: holds no tensor {', '.join(map(repr, missing[:3]))}{more}, which config.json "
            f"(encoder_layers {layers}, tie_word_embeddings {str(tied).lower()}) needs"
        )
    unexpected = [name for name in tensors if name not in used]
    if unexpected:
        more = f" and {len(unexpected) - 5} more" if len(unexpected) > 5 else ""
        raise PretrainedError(
            f"{path}: holds tensors config.json has no place for: {', '.join(unexpected[:5])}{more} "
            f"(encoder_layers {layers}; this package builds Marian's post-norm blocks and Pegasus's "
            "pre-norm ones, without layernorm_embedding); refused rather than ignored"
        )
    return plan, saved_positions, zeros


def load_pretrained(directory: str | Path, dtype: str | None = None) -> Transformer:
    """The Marian or Pegasus model in ``directory`` (``config.json``, ``model.safetensors``) as a
    Transformer, in ``dtype`` (None: an export's own, float32 for any other model).

    Its ids are Marian's vocabulary's (see marian_special_ids); its configuration (``model.config``)
    is an ordinary one, so it saves, translates, evaluates and trains as any other model. The
    file's header is checked against config.json (plan_weights), and the memory the model needs
    against the memory available, before the model is built; only the tensors the model uses are
    read, one at a time.
    """
    return _load(directory, dtype, copies=1)


def _load(directory: str | Path, dtype: str | None, copies: int) -> Transformer:
    """load_pretrained, refusing a model of which ``copies`` (the model, and what is saved of it)
    and its largest tensor as read do not fit the memory available."""
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    directory = Path(directory)
    config = read_config(directory)
    dtype = dtype or own_dtype(config)
    path = weights_path(directory)
    shape = model_shape(config, dtype, directory / CONFIG)
    plan, saved_positions, zeros = plan_weights(config, read_header(path), path, shape)
    largest = max(8 * math.prod(entry.shape) for entry in [*plan.values(), *saved_positions.values()])
    needed = copies * parameter_count(shape) * numpy.dtype(dtype).itemsize + 2 * largest
    available = available_memory()
    if available is not None and needed > available:
        raise PretrainedError(
            f"{path}: the model needs about {needed / 2**20:,.1f} MiB ({parameter_count(shape):,} weights in "
            f"{dtype}, {copies} cop{'y' if copies == 1 else 'ies'}, and its largest tensor as read), but only "
            f"{available / 2**20:,.1f} MiB is available"
        )
    model = build_from_config(shape, seed=0)
    for entry in saved_positions.values():  # a saved positional table must be the one the model computes
        table = to_numpy(sinusoidal_table(entry.shape[0], entry.shape[1], numpy.float64, "split"))
        saved = entry.read().astype(numpy.float64)
        if numpy.abs(saved - table).max() > 1e-6:
            raise PretrainedError(
                f"{path}: its {entry.name} is not the sines-then-cosines table Marian computes"
            )
    for entry in zeros:  # a model without attention biases: Marian's are there, and must be zeros
        if numpy.any(entry.read()):
            raise PretrainedError(
                f"{path}: tensor {entry.name!r} is not zero, but config.json's {SETTINGS}.attention_bias is false"
            )
    own, xp = dict(model.named_parameters()), get_array_module()
    if set(own) != set(plan):  # plan_weights and build_from_config disagree: a bug here, not the user's
        raise AssertionError(f"parameters {sorted(set(own) ^ set(plan))} unplanned")
    for name, entry in plan.items():  # one tensor in memory at a time, beside the model
        value = entry.read()
        weight = own[name].data
        if name == "projection_layer.proj.bias":
            value = value.reshape(-1)
        # an export's rows after the vocabulary's: its tokenizer's units the run read as <unk>
        value = value[: weight.shape[0]]
        if not numpy.isfinite(value).all():
            raise PretrainedError(f"{path}: tensor {entry.name!r} holds NaN or infinite values")
        weight[...] = xp.asarray(value.reshape(weight.shape), dtype=weight.dtype)  # on the device, if any
    if shape.positions == "interleaved":  # an export's weights, reordered for split sinusoids: undone
        from .export import permuted_state, residual_permutation

        state = {name: to_numpy(value) for name, value in model.state_dict().items()}
        model.load_state_dict(permuted_state(state, numpy.argsort(residual_permutation(shape.d_model))))
    return model


class MarianTokenizer:
    """Marian's subwords: ``source.spm`` splits the source, ``target.spm`` the target (SentencePiece
    models, through the ``sentencepiece`` library: data.SentencePieceTokenizer), and ``vocab.json``
    maps each piece to the model's id (a piece it lacks is ``<unk>``), as transformers'
    MarianTokenizer does. A leading language code (``>>fra<<``) is one token. No punctuation
    normalisation is applied (transformers applies Moses' only where sacremoses is installed).
    """

    def __init__(self, directory: str | Path) -> None:
        directory = Path(directory)
        for name in (*SENTENCEPIECE_FILES, VOCAB):
            if not (directory / name).is_file():
                what = "not a regular file" if (directory / name).exists() else "no such file"
                raise PretrainedError(f"{directory / name}: {what} (a Marian model directory holds it)")
        paths = [directory / name for name in SENTENCEPIECE_FILES]
        try:
            source, target = (path.read_bytes() for path in paths)
            self.splitter = SentencePieceTokenizer(source, target, (str(paths[0]), str(paths[1])))
        except (ValueError, RuntimeError) as error:  # names the file; or the library is missing
            raise PretrainedError(str(error)) from None
        itos = read_vocabulary(directory)
        self.vocab: dict[str, int] = {piece: index for index, piece in enumerate(itos)}
        self.pieces = dict(enumerate(itos))
        self.eos_id: int = self.vocab["</s>"]
        self.unk_id: int = self.vocab["<unk>"]
        self.pad_id: int = self.vocab["<pad>"]
        # Marian's decoder starts from <pad> (config.json's decoder_start_token_id: read_tokenizer checks it)
        ids = SpecialIds(pad=self.pad_id, bos=self.pad_id, eos=self.eos_id, unk=self.unk_id)
        self.vocabulary = Vocab.from_list(itos, ids)

    def encode_source(self, text: str) -> list[int]:
        """The source sentence's ids, ``</s>`` last."""
        return self.vocabulary.encode(self.splitter.tokenize_source(text))[0]

    def encode_target(self, text: str) -> list[int]:
        """The target sentence's ids (what fine-tuning predicts), ``</s>`` last."""
        return [*self.vocabulary.encode(self.splitter.tokenize(text))[0], self.eos_id]

    def decode(self, ids: list[int]) -> str:
        """The target text of ``ids``, without ``</s>``, ``<pad>`` and ``<unk>`` (transformers'
        ``decode(ids, skip_special_tokens=True)``)."""
        return self.splitter.detokenize([self.pieces[i] for i in ids if i in self.pieces])


def read_vocabulary(directory: str | Path) -> list[str]:
    """``vocab.json``'s pieces in the order of their ids, which must be 0 .. N - 1, each once, with
    the special pieces ``</s>``, ``<unk>`` and ``<pad>`` among them."""
    path = Path(directory) / VOCAB
    try:
        vocab = json.loads(_read_bounded(path, MAX_VOCAB).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise PretrainedError(f"{path}: not valid JSON ({error})") from error
    if not isinstance(vocab, dict) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in vocab.values()
    ):
        raise PretrainedError(f"{path}: expected an object of piece -> integer id")
    for special in SentencePieceTokenizer.SPECIAL_PIECES:
        if special not in vocab:
            raise PretrainedError(f"{path}: has no {special!r} entry")
    itos = {index: piece for piece, index in vocab.items()}
    missing = next((index for index in range(len(vocab)) if index not in itos), None)
    if missing is not None:
        raise PretrainedError(
            f"{path}: its ids are not 0 .. {len(vocab) - 1}, each once (no piece has id {missing})"
        )
    return [itos[index] for index in range(len(vocab))]


def read_tokenizer(directory: str | Path, config: dict[str, Any]) -> tuple[SentencePieceTokenizer, Vocab]:
    """The model's tokenizer and its vocabulary (``vocab.json``) with the special ids, checked against
    ``config.json``: the padding and end of sentence it names are vocab.json's <pad> and </s>, and
    vocab.json has a piece for every row of the embedding (``vocab_size``)."""
    path = Path(directory) / CONFIG
    if len(set(vocab_sizes(config))) > 1:
        raise PretrainedError(
            f"{path}: vocab_size {config['vocab_size']} and decoder_vocab_size {config['decoder_vocab_size']} "
            f"differ: a tokenizer of separate vocabularies is not supported yet, only one {VOCAB}"
        )
    if (Path(directory) / TARGET_VOCAB).exists():  # Marian's separate_vocabs: its targets' ids differ
        raise PretrainedError(
            f"{Path(directory) / TARGET_VOCAB}: a tokenizer of separate source and target vocabularies is "
            f"not supported yet, only one {VOCAB}"
        )
    tokenizer = MarianTokenizer(directory)
    ids = marian_special_ids(config)
    for key, name, piece in (("pad_token_id", "pad_id", "<pad>"), ("eos_token_id", "eos_id", "</s>")):
        if ids[name] != tokenizer.vocab[piece]:
            raise PretrainedError(
                f"{path}: {key} is {ids[name]}, but {VOCAB} gives {piece} the id {tokenizer.vocab[piece]}"
            )
    size = len(tokenizer.pieces)
    if config.get("vocab_size") != size:
        raise PretrainedError(
            f"{path}: vocab_size is {config.get('vocab_size')!r}, but {VOCAB} holds {size} pieces"
        )
    if not 0 <= ids["bos_id"] < size:
        raise PretrainedError(
            f"{path}: decoder_start_token_id {ids['bos_id']} is not an id of the {size} pieces"
        )
    special = SpecialIds(pad=ids["pad_id"], bos=ids["bos_id"], eos=ids["eos_id"], unk=tokenizer.unk_id)
    return tokenizer.splitter, Vocab.from_list(tokenizer.vocabulary.itos, special)


def own_dtype(config: dict[str, Any]) -> str:
    """The weights' type an export of this package's records (config.json's ``dtype``), float32 for
    any other model (OPUS-MT's are float32)."""
    return config["dtype"] if SETTINGS in config and config.get("dtype") in DTYPES else "float32"


TOKENIZER_JSON, TARGET_TOKENIZER = "tokenizer.json", "target"  # the target's, of separate vocabularies


def read_exported_tokenizer(directory: Path, config: dict[str, Any]) -> tuple[Tokenizer, tuple[Vocab, Vocab]]:
    """The tokenizer and the source and target vocabularies of an export's ``tokenizer.json`` (a byte-level
    BPE or character run's; of separate vocabularies, the target's in ``target/``), with config.json's
    special ids: the ids each vocabulary's rows give (the units after them, read as <unk>, are left)."""
    settings = config.get(SETTINGS, {})
    sizes = vocab_sizes(config)
    own = (settings.get("src_vocab_size", sizes[0]), settings.get("tgt_vocab_size", sizes[1]))
    target_folder = directory / TARGET_TOKENIZER
    found: list[tuple[Tokenizer, Vocab]] = []
    for folder, size in (
        (directory, own[0]),
        (target_folder if target_folder.is_dir() else directory, own[1]),
    ):
        path = folder / TOKENIZER_JSON
        try:
            content = json.loads(_read_bounded(path, MAX_VOCAB).decode("utf-8"))
            tokenizer, itos = from_huggingface(content, size)
            if "<unk>" not in itos:
                raise ValueError("its vocabulary has no '<unk>'")
            pad, eos = config["pad_token_id"], config["eos_token_id"]
            ids = SpecialIds(pad, config.get("decoder_start_token_id", pad), eos, itos.index("<unk>"))
            found.append((tokenizer, Vocab.from_list(itos, ids)))
        except (UnicodeDecodeError, json.JSONDecodeError, ValueError) as error:
            if isinstance(error, PretrainedError):
                raise
            raise PretrainedError(f"{path}: not an exported tokenizer ({error})") from None
    (tokenizer, source), (other, target) = found
    if type(tokenizer) is not type(other) or getattr(tokenizer, "serialized", None) != getattr(
        other, "serialized", None
    ):
        raise PretrainedError(
            f"{target_folder / TOKENIZER_JSON}: splits text otherwise than {TOKENIZER_JSON}"
        )
    return tokenizer, (source, target)


def import_run(
    directory: str | Path, out: str | Path, overwrite: bool = False, dtype: str | None = None
) -> tuple[Path, Transformer]:
    """Write the Marian or Pegasus model in ``directory`` as an ordinary run directory ``out``:
    ``model.npz`` (its weights, its tokenizer, its vocabularies and special ids, a run id of its own)
    and ``config.toml`` (its [model] settings). translate, evaluate --data, plot attention and
    train --from read it. Returns (the checkpoint's path, the model). The tokenizer is an export's
    ``tokenizer.json`` (byte-level BPE or characters: read_exported_tokenizer) where there is one,
    else Marian's SentencePiece models (``source.spm``, ``target.spm``, ``vocab.json``).

    Every file is checked before the weights are read, and ``out`` as ``train --out`` is: a run there
    is replaced only with ``overwrite``, and only once the new one is written (atomically).
    """
    from .config import ModelConfig, TrainConfig, config_toml
    from .run.checkpoint import FILENAME, file_sha256, save_checkpoint, task_recipe
    from .run.directory import CONFIG_NAME, RunLock, check_run_directory, run_files, write_text_atomically
    from .tasks import TranslationTask

    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"--dtype must be {' or '.join(DTYPES)}, got {dtype!r}")
    directory = Path(directory)
    config = read_config(directory)
    weights = weights_path(directory)
    splitter: Tokenizer
    if (directory / TOKENIZER_JSON).is_file():
        splitter, (vocab, target_vocab) = read_exported_tokenizer(directory, config)
    elif config["model_type"] == "pegasus":
        raise PretrainedError(
            f"{directory / TOKENIZER_JSON}: no such file: a Pegasus model's tokenizer is read only from the "
            "tokenizer.json of this package's export (a byte-level BPE or character run's); another Pegasus "
            "tokenizer (spiece.model) is not one this package has"
        )
    else:
        splitter, vocab = read_tokenizer(directory, config)
        target_vocab = vocab
    target = Path(out).expanduser()
    if target.resolve() == directory.resolve():
        raise ValueError(f"--out {out} is the model directory itself: choose a run directory of its own")
    target = check_run_directory(target, resume=False, overwrite=overwrite, command="import")
    model = _load(directory, dtype, copies=2)  # the model, and the host copy of its weights saved
    task = TranslationTask(splitter, [], [], [], vocabularies=(vocab, target_vocab))
    meta = {
        "model": asdict(model.config),
        "run_id": uuid.uuid4().hex,
        "step": 0,
        "train": {},  # no training run: train --from starts one
        "optimizer": {},
        "task": task_recipe(task, TrainConfig()),
        "src_vocab": vocab.itos,
        "tgt_vocab": target_vocab.itos,
        "imported_from": {"directory": str(directory.resolve()), "weights_sha256": file_sha256(weights)},
    }
    arrays = {f"param/{name}": value for name, value in model.state_dict().items()}
    created = not target.exists()
    written = [target / FILENAME, target / CONFIG_NAME]
    try:
        with RunLock(target):
            save_checkpoint(written[0], arrays, meta)
            write_text_atomically(written[1], config_toml(ModelConfig.from_model(model.config)))
            for old in run_files(target):  # --overwrite: the replaced run's other files, once ours are in
                if old not in written:
                    old.unlink()
    except BaseException:
        if created:  # nothing of the user's is there: leave no half-made run
            for path in written:
                path.unlink(missing_ok=True)
            with suppress(OSError):
                target.rmdir()
        raise
    return written[0], model
