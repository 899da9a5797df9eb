"""config.json both ways: read and checked as a Marian or Pegasus model this package can build (the
values it gives, then the model they describe: model_shape), and written for a model of this
package's (marian_config, pegasus_config, and generation_config.json).

Marian (OPUS-MT) is read as post-norm blocks without final norms, SiLU feed-forward, biased attention
projections and sines-then-cosines positions; Pegasus as pre-norm blocks with a final layer norm
after each stack and one embedding. The settings of this package's model that neither has a key for
(a model without attention biases, its own padding index, shared vocabularies of untied embeddings,
source and target lengths, the position layout, the vocabularies' own sizes, and a Pegasus export's
first source id in its one table of both vocabularies: embedding_rows) travel under the key
``numpy_transformer`` (SETTINGS), with the weights' ``dtype``: an export is read back as the model
it was.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ...model import DTYPES, Transformer, TransformerConfig
from ..vocabulary import Vocab
from .directory import CONFIG, MAX_CONFIG, PretrainedError, read_bounded

ACTIVATION_NAMES = {  # config.json's activation_function -> this package's activation
    "swish": "silu",
    "silu": "silu",
    "relu": "relu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
}

MARIAN_ACTIVATIONS = {ours: theirs for theirs, ours in reversed(ACTIVATION_NAMES.items())}  # swish for silu

MODEL_TYPES = ("marian", "pegasus")  # Marian: post-norm blocks; Pegasus: pre-norm, final norms, one embedding

SETTINGS = "numpy_transformer"  # config.json's key for the model settings Marian has no key for
# under it, the fingerprint of each tokenizer file an export writes (tokenizer_files.tokenizer_fingerprint)
TOKENIZER_SHA256 = "tokenizer_sha256"

SETTING_TYPES = {  # each such setting, and what its value must be
    "attention_bias": "true or false",
    "shared_vocab": "true or false",
    "padding_idx": "a token id or null",
    "src_seq_len": "a whole number in [1, max_position_embeddings]",
    "tgt_seq_len": "a whole number in [1, max_position_embeddings]",
    "positions": "'split' or 'interleaved' (the weights reordered for split sinusoids)",
    "src_vocab_size": "a whole number in [1, vocab_size] (the rows after it: its tokenizer's units read as <unk>)",
    "tgt_vocab_size": "a whole number in [1, decoder_vocab_size]",
    "source_offset": "a whole number in [1, vocab_size) (a Pegasus export's first source id in its one embedding)",
    TOKENIZER_SHA256: "an object of each tokenizer file's path in the export -> its fingerprint (64 hex digits)",
}

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
        config = json.loads(read_bounded(path, MAX_CONFIG).decode("utf-8"))
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
        if found is None and (Path(directory) / "model.bin").is_file():
            raise PretrainedError(
                f"{directory}: a CTranslate2 model directory (model.bin), which import does not read: expected a "
                "Hugging Face directory (config.json of model_type 'marian' or 'pegasus', model.safetensors), "
                "as export writes without --ctranslate2"
            )
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
        elif key == "source_offset":
            if config["model_type"] != "pegasus":  # a value in range is still wrong: name what is
                raise PretrainedError(
                    f"{path}: {SETTINGS}.source_offset is {value!r}, but model_type is {config['model_type']!r}: "
                    "only a Pegasus export (both vocabularies in one embedding) records it"
                )
            valid = _is_int(value) and 1 <= value < config["vocab_size"]
        elif key == TOKENIZER_SHA256:
            valid = isinstance(value, dict) and all(
                isinstance(name, str) and isinstance(digest, str) and re.fullmatch("[0-9a-f]{64}", digest)
                for name, digest in value.items()
            )
        else:
            valid = _is_int(value) and 1 <= value <= length
        if not valid:
            raise PretrainedError(f"{path}: {SETTINGS}.{key} is {value!r}, expected {SETTING_TYPES[key]}")
    if "source_offset" in settings:  # the rows of each vocabulary in the one embedding hold it
        for key, rows in zip(("src_vocab_size", "tgt_vocab_size"), embedding_rows(config)):
            if not 1 <= settings.get(key, 0) <= len(rows):
                given = f"is {settings[key]!r}" if key in settings else "is missing"
                raise PretrainedError(
                    f"{path}: {SETTINGS}.{key} {given}, expected a whole number in [1, {len(rows)}] "
                    f"(its vocabulary's rows of the embedding, by {SETTINGS}.source_offset {settings['source_offset']})"
                )
    tied = config.get("tie_word_embeddings", True) and settings.get("shared_vocab", True)
    if config["model_type"] == "pegasus" and settings and not tied and "source_offset" not in settings:
        raise PretrainedError(
            f"{path}: has no {SETTINGS}.source_offset, which a Pegasus export of two vocabularies or untied "
            "embeddings records (the first source id of its one embedding table, after the target's)"
        )
    if settings.get("shared_vocab") and len(set(vocab_sizes(config))) > 1:
        raise PretrainedError(
            f"{path}: {SETTINGS}.shared_vocab is true, but vocab_size and decoder_vocab_size differ"
        )
    marian_shares = (
        config["model_type"] == "marian" and config.get("share_encoder_decoder_embeddings") is True
    )
    if marian_shares and settings.get("shared_vocab") is False:
        raise PretrainedError(  # transformers' Marian reads one matrix for both: the export writes false
            f"{path}: share_encoder_decoder_embeddings is true (transformers would make the source's and the "
            f"target's embeddings one), but {SETTINGS}.shared_vocab is false: an export of two vocabularies, "
            "each its own embedding; expected false"
        )


def embedding_rows(config: dict[str, Any]) -> tuple[range, range]:
    """The rows of the embedding tables that hold the source's and the target's tokens (each
    vocabulary's, then the units of its tokenizer that it lacks): Marian's two tables' own
    (``vocab_size``, ``decoder_vocab_size``); Pegasus's one table's, of both vocabularies where an
    export records the first source id (``source_offset``: the target's rows are those before it,
    weights.joined_embeddings), else all of it for either."""
    source, target = vocab_sizes(config)
    offset = config.get(SETTINGS, {}).get("source_offset")
    if offset is None:
        return range(source), range(target)
    return range(offset, source), range(offset)


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


def own_dtype(config: dict[str, Any]) -> str:
    """The weights' type an export of this package's records (config.json's ``dtype``), float32 for
    any other model (OPUS-MT's are float32)."""
    return config["dtype"] if SETTINGS in config and config.get("dtype") in DTYPES else "float32"


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


def bart_family_config(model: Transformer, vocab: Vocab) -> dict[str, Any]:
    """config.json's keys that Marian and Pegasus share (both are BART's family): the sizes, the
    activation, embeddings scaled by sqrt(d_model), the special ids of ``vocab`` (the decoder starts
    from its start token), and under ``numpy_transformer`` the settings transformers has no key for
    (the position layout, the vocabularies' own sizes: the rows after them are aliased_tensors')."""
    config, ids = model.config, vocab.ids
    return {
        "d_model": config.d_model,
        "encoder_layers": config.N,
        "decoder_layers": config.N,
        "encoder_attention_heads": config.h,
        "decoder_attention_heads": config.h,
        "encoder_ffn_dim": config.d_ff,
        "decoder_ffn_dim": config.d_ff,
        "max_position_embeddings": max(config.src_seq_len, config.tgt_seq_len),
        "activation_function": MARIAN_ACTIVATIONS[config.activation],
        "dropout": config.dropout,
        "attention_dropout": 0.0,
        "activation_dropout": 0.0,
        "scale_embedding": True,
        "pad_token_id": ids.pad,
        "eos_token_id": ids.eos,
        "bos_token_id": ids.bos,
        "decoder_start_token_id": ids.bos,
        "forced_eos_token_id": ids.eos,
        "is_encoder_decoder": True,
        "dtype": config.dtype,
        SETTINGS: {
            "attention_bias": config.attention_bias,
            "shared_vocab": config.shared_vocab,
            "padding_idx": config.padding_idx,
            "src_seq_len": config.src_seq_len,
            "tgt_seq_len": config.tgt_seq_len,
            "positions": config.positions,
            "src_vocab_size": config.src_vocab_size,
            "tgt_vocab_size": config.tgt_vocab_size,
        },
    }


def marian_config(model: Transformer, vocab: Vocab, aliases: tuple[int, int] = (0, 0)) -> dict[str, Any]:
    """config.json for ``model``, whose target vocabulary's special ids are ``vocab``'s, of
    ``aliases`` more rows after each vocabulary's (aliased_tensors)."""
    config = model.config
    return {
        "architectures": ["MarianMTModel"],
        "model_type": "marian",
        "vocab_size": config.src_vocab_size + aliases[0],
        "decoder_vocab_size": config.tgt_vocab_size + aliases[1],
        "normalize_before": False,
        # one matrix: Marian's shared embedding
        "share_encoder_decoder_embeddings": config.tie_embeddings and config.shared_vocab,
        "tie_word_embeddings": config.tie_embeddings,
        **bart_family_config(model, vocab),
    }


def pegasus_config(model: Transformer, vocab: Vocab, aliases: tuple[int, int] = (0, 0)) -> dict[str, Any]:
    """config.json of ``model`` as a Pegasus model (pre-norm blocks, final norms, one embedding),
    whose target vocabulary's special ids are ``vocab``'s: the decoder starts from its start token,
    as Marian's export does; of ``aliases`` more rows after each vocabulary's (aliased_tensors). A
    model of one vocabulary and tied embeddings has one table; any other both vocabularies in one,
    the target's first, the source's from ``source_offset``, and (untied) a projection of its own
    (weights.joined_embeddings)."""
    config = model.config
    settings = bart_family_config(model, vocab)
    rows = config.tgt_vocab_size + aliases[1]
    if not (config.tie_embeddings and config.shared_vocab):
        settings[SETTINGS]["source_offset"] = rows
        rows += config.src_vocab_size + aliases[0]
    return {
        "architectures": ["PegasusForConditionalGeneration"],
        "model_type": "pegasus",
        "vocab_size": rows,
        "tie_word_embeddings": config.tie_embeddings,
        **settings,
    }


def generation_config(model: Transformer, vocab: Vocab) -> dict[str, Any]:
    """OPUS-MT's generation_config.json: four beams, ``<pad>`` and the start token never emitted (as
    this package's decoding: decoding.never_emitted), as long as the model's target positions allow;
    but those set aside after the log-softmax over every token, without renormalising
    (``renormalize_logits`` false), as this package's beam search does, so that ``generate()``'s
    defaults translate as ``translate`` does."""
    ids = vocab.ids
    return {
        "bad_words_ids": [[never] for never in sorted({ids.pad, ids.bos} - {ids.eos})],
        "bos_token_id": ids.bos,
        "decoder_start_token_id": ids.bos,
        "eos_token_id": ids.eos,
        "forced_eos_token_id": ids.eos,
        "max_length": model.config.tgt_seq_len,
        "num_beams": 4,
        "pad_token_id": ids.pad,
        "renormalize_logits": False,
    }
