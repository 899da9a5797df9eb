"""Pretrained Marian (OPUS-MT) translators, and Marian and Pegasus models (this package's exports,
transformers' Pegasus), loaded from a local Hugging Face model directory as a Transformer.

``load_pretrained(DIR)`` reads ``config.json`` (config_json.read_config) and ``model.safetensors``:
its header first (safetensors_reader.read_header), checked against config.json before anything is
built (plan_weights), then each tensor the model uses from a memory map of its bytes. It returns an
ordinary :class:`Transformer` built with the options Marian's architecture needs (post-norm blocks
without final norms, SiLU feed-forward, biased attention projections, sines-then-cosines positions,
one embedding matrix for the source, the target and the projection, or with ``tie_word_embeddings``
false the file's own three, and ``final_logits_bias`` as the projection's bias). Its token ids are
Marian's own (``vocab.json``): ``marian_special_ids`` gives the padding, the end of sentence and the
decoder's start token (Marian starts decoding from the padding id).

A Pegasus model (``model_type`` pegasus) is read as pre-norm blocks with a final layer norm after
each stack and one embedding (``model.shared``; untied, the projection ``lm_head``); an export of
this package's (config.json's ``numpy_transformer`` settings) is read back as the model it was: its
position layout (an interleaved model's weights, reordered for split sinusoids on export, reordered
back), its vocabularies' own sizes (the rows after them, its tokenizer's units read as ``<unk>``,
are left), the source's and the target's rows of one table of both (config_json.embedding_rows)
and its dtype.

Nothing here reaches the network: the user downloads a model once (docs/translating.md, "Start
from a pretrained translator").
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, NamedTuple

import numpy

from ...backend import get_array_module, to_numpy
from ...functional import sinusoidal_table
from ...machine import available_memory
from ...model import DTYPES, Transformer, TransformerConfig, build_from_config, parameter_count
from .config_json import SETTINGS, embedding_rows, model_shape, own_dtype, read_config, vocab_sizes
from .directory import CONFIG, PretrainedError, weights_path
from .safetensors_reader import TensorEntry, read_header
from .weights import POSITIONS, marian_embedding_names, marian_names, permuted_state, residual_permutation

LAYER = re.compile(r"(?:^|\.)(?:en|de)coder\.layers\.(\d+)\.")  # a tensor of a layer: its index
ATTENTION_BIAS = re.compile(r"_attn\.\w+_proj\.bias$")  # Marian's name of an attention projection's bias
UNTIED = " (tie_word_embeddings is false: the projection is its own)"


class WeightPlan(NamedTuple):
    """Where each weight of the model comes from, decided from the file's header alone."""

    parameters: dict[str, TensorEntry]  # our parameter name -> the tensor it is read from
    positions: dict[str, TensorEntry]  # "encoder" / "decoder" -> a position table the file saves
    zeros: list[TensorEntry]  # the attention biases of a model without them: they must hold zeros


class WeightPlanner:
    """plan_weights' stages over one file's tensors (``tensors``, read from the header of ``path``)
    for the model ``shape`` describes: the layers the file holds, a tensor for every parameter with
    every copy of it checked, the position tables it saves, and no tensor left without a place.
    ``used`` holds the names of the tensors given a place so far; ``copies`` the tensor read for a
    tied embedding and each other copy of it in the file (the projection's ``lm_head``)."""

    def __init__(
        self, config: dict[str, Any], tensors: dict[str, TensorEntry], path: Path, shape: TransformerConfig
    ) -> None:
        self.tensors, self.path, self.shape = tensors, path, shape
        self.length = config["max_position_embeddings"]
        # the file's rows: the model's, and any of <unk> after them
        self.vocab, self.decoder_vocab = vocab_sizes(config)
        self.used: set[str] = set()
        self.copies: list[tuple[TensorEntry, TensorEntry]] = []

    def plan(self) -> WeightPlan:
        """The plan, or PretrainedError naming what of the file does not fit config.json."""
        self.refuse_missing_layers()
        parameters, zeros, missing = self.place_parameters()
        positions = self.place_position_tables()
        self.refuse_missing(missing)
        self.refuse_unplaced()
        return WeightPlan(parameters, positions, zeros)

    def find(self, name: str) -> str | None:
        """The file's name of Marian's tensor ``name``: under a "model." prefix or without (None: absent)."""
        return next((prefix + name for prefix in ("model.", "") if prefix + name in self.tensors), None)

    def expected_shapes(self, ours: str) -> tuple[tuple[int, ...], ...]:
        """The shapes the tensor of our parameter ``ours`` may have in the file."""
        width, ffn = self.shape.d_model, self.shape.d_ff
        if ours == "src_embed.embedding.weight":
            return ((self.vocab, width),)
        if ours.endswith("embedding.weight") or ours == "projection_layer.proj.weight":
            return ((self.decoder_vocab, width),)
        if ours == "projection_layer.proj.bias":
            return ((1, self.decoder_vocab), (self.decoder_vocab,))
        if ".linear_1." in ours:
            return ((ffn, width),) if ours.endswith("weight") else ((ffn,),)
        if ".linear_2." in ours:
            return ((width, ffn),) if ours.endswith("weight") else ((width,),)
        if ours.endswith((".w_q.weight", ".w_k.weight", ".w_v.weight", ".w_o.weight")):
            return ((width, width),)
        return ((width,),)

    def take(self, name: str, shapes: tuple[tuple[int, ...], ...]) -> None:
        """The file's tensor ``name`` given a place, once its shape is checked to be one of ``shapes``."""
        if self.tensors[name].shape not in shapes:
            raise PretrainedError(
                f"{self.path}: the weights do not fit config.json (tensor {name!r} has shape "
                f"{list(self.tensors[name].shape)}, config.json's d_model {self.shape.d_model}, encoder_ffn_dim "
                f"{self.shape.d_ff}, vocab_size {self.vocab} and decoder_vocab_size {self.decoder_vocab} give "
                f"{' or '.join(str(list(s)) for s in shapes)})"
            )
        self.used.add(name)

    def refuse_missing_layers(self) -> None:
        """A configuration of more layers than the file holds, refused before listing their names."""
        indices = [int(match.group(1)) for name in self.tensors if (match := LAYER.search(name))]
        held, layers = max(indices, default=-1) + 1, self.shape.N
        if layers > held:
            raise PretrainedError(
                f"{self.path}: holds no tensor 'encoder.layers.{held}.*', which config.json "
                f"(encoder_layers {layers}) needs: the file holds {held} layers"
            )

    def place_parameters(self) -> tuple[dict[str, TensorEntry], list[TensorEntry], list[str]]:
        """The tensor each parameter is read from, the attention biases that must hold zeros, and the
        names of the tensors the file lacks. The embeddings are read under the names
        marian_embedding_names gives; every copy the file holds of one is checked and given a place."""
        shape = self.shape
        embeddings = marian_embedding_names(
            shape.tie_embeddings, shape.shared_vocab, pegasus=shape.final_norm
        )
        parameters: dict[str, TensorEntry] = {}
        zeros: list[TensorEntry] = []
        missing: list[str] = []
        for ours, theirs in marian_names(
            shape.N, shape.tie_embeddings, shape.shared_vocab, shape.final_norm
        ).items():
            copies = [found for found in map(self.find, theirs) if found is not None]
            if not copies:
                missing.append(theirs[0] + (UNTIED if theirs[0] == "lm_head.weight" else ""))
                continue
            for found in copies if ours in embeddings else copies[:1]:
                self.take(found, self.expected_shapes(ours))
            if shape.tie_embeddings and ours in embeddings:  # one matrix: every copy must hold it
                self.copies += [(self.tensors[copies[0]], self.tensors[other]) for other in copies[1:]]
            if shape.attention_bias or not ATTENTION_BIAS.search(theirs[0]):
                parameters[ours] = self.tensors[copies[0]]
            else:
                zeros.append(self.tensors[copies[0]])
        return parameters, zeros, missing

    def place_position_tables(self) -> dict[str, TensorEntry]:
        """The position tables the file saves ("encoder" / "decoder"), each of config.json's shape."""
        saved = {}
        for side, name in POSITIONS.items():
            table = self.find(name)
            if table is not None:
                self.take(table, ((self.length, self.shape.d_model),))
                saved[side] = self.tensors[table]
        return saved

    def refuse_missing(self, missing: list[str]) -> None:
        """A file that lacks tensors the configuration needs, refused naming the first three."""
        if missing:
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            raise PretrainedError(
                f"{self.path}: holds no tensor {', '.join(map(repr, missing[:3]))}{more}, which config.json "
                f"(encoder_layers {self.shape.N}, tie_word_embeddings {str(self.shape.tie_embeddings).lower()}) needs"
            )

    def refuse_unplaced(self) -> None:
        """A file that holds tensors without a place, refused naming the first five, rather than ignored."""
        unexpected = [name for name in self.tensors if name not in self.used]
        if unexpected:
            more = f" and {len(unexpected) - 5} more" if len(unexpected) > 5 else ""
            raise PretrainedError(
                f"{self.path}: holds tensors config.json has no place for: {', '.join(unexpected[:5])}{more} "
                f"(encoder_layers {self.shape.N}; this package builds Marian's post-norm blocks and Pegasus's "
                "pre-norm ones, without layernorm_embedding); refused rather than ignored"
            )


def plan_weights(
    config: dict[str, Any], tensors: dict[str, TensorEntry], path: Path, shape: TransformerConfig
) -> WeightPlan:
    """Which tensor of the file each parameter of the model ``shape`` describes is read from ({our
    name: entry}), the saved position tables ({"encoder" / "decoder": entry}) and the tensors that must
    hold zeros (the attention biases of a model without them), from the header alone: every tensor
    the configuration needs must be there with the shape it gives, and every tensor of the file must
    have a place, or the file is refused naming them, before anything is built or read.

    The embeddings are read under the names marian_embedding_names gives: with ``tie_word_embeddings``
    (Marian's default) and ``share_encoder_decoder_embeddings`` one matrix is the source and target
    embedding and the projection (any copies the file holds under the other names have its shape)."""
    return WeightPlanner(config, tensors, path, shape).plan()


def load_pretrained(directory: str | Path, dtype: str | None = None) -> Transformer:
    """The Marian or Pegasus model in ``directory`` (``config.json``, ``model.safetensors``) as a
    Transformer, in ``dtype`` (None: an export's own, float32 for any other model).

    Its ids are Marian's vocabulary's (see marian_special_ids); its configuration (``model.config``)
    is an ordinary one, so it saves, translates, evaluates and trains as any other model. The
    file's header is checked against config.json (plan_weights), and the memory the model needs
    against the memory available, before the model is built; only the tensors the model uses are
    read, one at a time.
    """
    return load_model(directory, dtype, copies=1)


def load_model(directory: str | Path, dtype: str | None, copies: int) -> Transformer:
    """load_pretrained, refusing a model of which ``copies`` (the model, and what is saved of it)
    and its largest tensor as read do not fit the memory available."""
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    directory = Path(directory)
    config = read_config(directory)
    dtype = dtype or own_dtype(config)
    path = weights_path(directory)
    shape = model_shape(config, dtype, directory / CONFIG)
    planner = WeightPlanner(config, read_header(path), path, shape)  # plan_weights, and the copies it found
    plan = planner.plan()
    refuse_beyond_memory(plan, shape, copies, path)
    model = build_from_config(shape, seed=0)
    check_computed_tensors(plan, path)
    check_tied_copies(planner.copies, path)
    # an export's own source vocabulary size: the rows after it are copies of <unk>'s
    recorded = "src_vocab_size" in config.get(SETTINGS, {})
    fill_parameters(model, plan.parameters, path, embedding_rows(config), recorded)
    if shape.positions == "interleaved":  # an export's weights, reordered for split sinusoids: undone
        state = {name: to_numpy(value) for name, value in model.state_dict().items()}
        model.load_state_dict(permuted_state(state, numpy.argsort(residual_permutation(shape.d_model))))
    return model


def refuse_beyond_memory(plan: WeightPlan, shape: TransformerConfig, copies: int, path: Path) -> None:
    """PretrainedError where ``copies`` of the model ``shape`` describes and the largest tensor of
    ``plan`` as read (float64 at most) need more memory than is available."""
    largest = max(
        8 * math.prod(entry.shape) for entry in [*plan.parameters.values(), *plan.positions.values()]
    )
    needed = copies * parameter_count(shape) * numpy.dtype(shape.dtype).itemsize + 2 * largest
    available = available_memory()
    if available is not None and needed > available:
        raise PretrainedError(
            f"{path}: the model needs about {needed / 2**20:,.1f} MiB ({parameter_count(shape):,} weights in "
            f"{shape.dtype}, {copies} cop{'y' if copies == 1 else 'ies'}, and its largest tensor as read), but only "
            f"{available / 2**20:,.1f} MiB is available"
        )


def check_computed_tensors(plan: WeightPlan, path: Path) -> None:
    """The tensors the file saves of what the model computes are what it computes: a position table
    the sines-then-cosines table, an attention bias of a model without them zeros."""
    for entry in plan.positions.values():
        table = to_numpy(sinusoidal_table(entry.shape[0], entry.shape[1], numpy.float64, "split"))
        saved = entry.read().astype(numpy.float64)
        if numpy.abs(saved - table).max() > 1e-6:
            raise PretrainedError(
                f"{path}: its {entry.name} is not the sines-then-cosines table Marian computes"
            )
    for entry in plan.zeros:
        if numpy.any(entry.read()):
            raise PretrainedError(
                f"{path}: tensor {entry.name!r} is not zero, but config.json's {SETTINGS}.attention_bias is false"
            )


def check_tied_copies(copies: list[tuple[TensorEntry, TensorEntry]], path: Path) -> None:
    """Each copy the file holds of a tied embedding (config.json's ``tie_word_embeddings`` true: the
    embedding is the projection too; with ``share_encoder_decoder_embeddings``, or Pegasus's one
    table, the source's and the target's are one) holds the same values as the tensor read: a
    projection of its own (``lm_head.weight`` of an untied model) has no place in a tied one, and is
    refused by name rather than dropped. ``copies``: WeightPlanner's, the tensor read and a copy."""
    for read, copy in copies:
        if not numpy.array_equal(read.read(), copy.read()):
            if copy.name == "lm_head.weight":
                raise PretrainedError(
                    f"{path}: tensor 'lm_head.weight' is a projection of its own (not the values of "
                    f"{read.name!r}), but {CONFIG}'s tie_word_embeddings is true (the projection is the target's "
                    "embedding): refused rather than dropped; tie_word_embeddings false reads it"
                )
            raise PretrainedError(
                f"{path}: tensor {copy.name!r} is not the values of {read.name!r}, but {CONFIG} makes them one "
                "matrix (tie_word_embeddings true, the embeddings shared): refused rather than dropped"
            )


def fill_parameters(
    model: Transformer,
    parameters: dict[str, TensorEntry],
    path: Path,
    rows: tuple[range, range],
    source_recorded: bool = False,
) -> None:
    """Each of ``model``'s parameters (written into) set to its tensor of ``parameters``, read one at a
    time, in the parameter's dtype and on its device; a tensor of NaN or infinite values refused. The
    source and target embeddings are read from their ``rows`` (config_json.embedding_rows: of a
    Pegasus export of two vocabularies, each its range of the one table). ``source_recorded``: an
    export's config.json gives the source vocabulary's own size, whose rows must not end in the
    copies of <unk>'s an export writes after them (refuse_vocabulary_of_copied_rows)."""
    own, xp = dict(model.named_parameters()), get_array_module()
    if set(own) != set(parameters):  # plan_weights and build_from_config disagree: a bug here, not the user's
        raise AssertionError(f"parameters {sorted(set(own) ^ set(parameters))} unplanned")
    windows = dict(zip(("src_embed.embedding.weight", "tgt_embed.embedding.weight"), rows))
    for name, entry in parameters.items():  # one tensor in memory at a time, beside the model
        value = entry.read()
        weight = own[name].data
        if name == "projection_layer.proj.bias":
            value = value.reshape(-1)
        if name in windows:
            value = value[windows[name].start : windows[name].stop]
        if value.shape[0] > weight.shape[0]:  # an export's rows after the vocabulary's: its tokenizer's units
            check_unit_rows(
                value, weight.shape[0], entry.name, "src" if name.startswith("src_") else "tgt", path
            )
        value = value[: weight.shape[0]]
        if source_recorded and name == "src_embed.embedding.weight":
            refuse_vocabulary_of_copied_rows(value, entry.name, path)
        if not numpy.isfinite(value).all():
            refuse_vocabulary_of_unit_rows(value, entry.name, path)
            raise PretrainedError(f"{path}: tensor {entry.name!r} holds NaN or infinite values")
        weight[...] = xp.asarray(value.reshape(weight.shape), dtype=weight.dtype)  # on the device, if any


def refuse_vocabulary_of_unit_rows(bias: numpy.ndarray, name: str, path: Path) -> None:
    """A projection's bias ``bias`` (as read for the target vocabulary config.json gives) that is -inf
    from some row on: the rows an export writes after its target vocabulary for its tokenizer's units
    (never predicted), counted in the vocabulary by config.json: refused naming its key."""
    finite = numpy.isfinite(bias)
    if bias.ndim != 1 or finite.all() or not finite[0]:
        return
    first = int(numpy.argmin(finite))
    if numpy.isneginf(bias[first:]).all():
        raise PretrainedError(
            f"{path.parent / CONFIG}: gives a target vocabulary of {len(bias)} ({SETTINGS}.tgt_vocab_size, else "
            f"decoder_vocab_size), but {path.name}'s {name!r} is -inf from row {first} on, the rows an export "
            f"writes after its target vocabulary for its tokenizer's units (never predicted): expected {first}"
        )


def refuse_vocabulary_of_copied_rows(embedding: numpy.ndarray, name: str, path: Path) -> None:
    """A source embedding ``embedding`` (as read for the vocabulary config.json's
    ``numpy_transformer.src_vocab_size`` gives) whose last rows are each a copy of one row before
    them: the rows an export writes after its vocabulary for its tokenizer's units (<unk>'s), counted
    in the vocabulary by config.json: refused naming its key. The rows of a trained or initialised
    vocabulary are never one another's copies."""
    same = (embedding == embedding[-1]).all(axis=1)  # the rows that are copies of the last one
    start = len(same) - int(numpy.argmin(same[::-1]))  # where the last rows' run of copies starts
    if start == len(same) or not same[:start].any():  # all rows alike, or the last row one of its own
        return
    original = int(numpy.argmax(same))
    raise PretrainedError(
        f"{path.parent / CONFIG}: {SETTINGS}.src_vocab_size is {len(embedding)}, but in {path.name}'s {name!r} "
        f"the source's rows {start} .. {len(embedding) - 1} are copies of its row {original}, as an export writes "
        f"<unk>'s after its source vocabulary for its tokenizer's units: expected {start}"
    )


def check_unit_rows(value: numpy.ndarray, rows: int, name: str, side: str, path: Path) -> None:
    """The rows of an export's tensor ``name`` after its vocabulary's ``rows`` (config.json's
    ``numpy_transformer.{side}_vocab_size``) are what an export writes there for its tokenizer's
    units the vocabulary lacks (weights.aliased_tensors): each a copy of one row of the vocabulary's
    (``<unk>``'s), or of the projection's bias -inf; else config.json and the weights disagree."""
    extra = value[rows:]
    if value.ndim == 1:
        fits = bool(numpy.isneginf(extra).all())
    else:
        fits = bool((extra == extra[0]).all()) and bool((value[:rows] == extra[0]).all(axis=1).any())
    if not fits:
        raise PretrainedError(
            f"{path}: tensor {name!r} has {value.shape[0]} rows, but {CONFIG}'s {SETTINGS}.{side}_vocab_size is "
            f"{rows}, and its rows after {rows} are not copies of <unk>'s (an export's rows for its tokenizer's "
            f"units): {CONFIG} and {path.name} are not of one export"
        )
