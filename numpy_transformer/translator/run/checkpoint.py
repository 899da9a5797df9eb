"""Checkpoints: everything about a trained model on disk.

A checkpoint is one ``.npz`` of plain arrays plus a JSON document, written atomically; from it
come the model (model_from_checkpoint), the task it was trained on (task_recipe and
task_from_recipe: a generated task by name, a corpus by its path and content hash), its tokenizer
and vocabularies alone for scoring other pairs (saved_task), the model with its tokenizer for
translating (load_for_inference), and averages of several (average_checkpoints).

Layout: ``param/<name>`` model weights, ``optim/<key>`` optimiser moments, and ``meta``, a UTF-8
JSON document stored as a uint8 array (model config, step, random-generator states, tokenizer,
vocabularies, training arguments). Loading uses ``allow_pickle=False``: nothing is unpickled.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy

from ...files import SaveError
from ...machine import MissingLibrary
from ...model import Transformer, TransformerConfig, build_from_config, parameter_count
from ..corpora import MAX_LENGTH
from ..tasks import NumbersTask, TranslationTask, make_task
from ..tokenizers import BPETokenizer, SentencePieceTokenizer
from ..vocabulary import DEFAULT_IDS, SpecialIds, Vocab

if TYPE_CHECKING:
    from ..config import TrainConfig

FORMAT = "numpy_transformer/1"
FILENAME = "model.npz"


class CheckpointError(ValueError):
    """A checkpoint is missing, corrupt, truncated or does not fit: the message names file and problem."""


def resolve_path(path: str | Path) -> Path:
    """``--checkpoint`` accepts the run directory or the file itself."""
    path = Path(path)
    return path / FILENAME if path.is_dir() else path


def save_checkpoint(path: str | Path, arrays: dict[str, numpy.ndarray], meta: dict[str, Any]) -> Path:
    """Write arrays and meta to ``path`` through a temporary file in the same folder, then rename.

    A crash at any moment leaves either the old checkpoint or the new one, never half of one; a
    failed write (a full disk: OSError) removes the temporary file and raises a SaveError naming
    ``path`` and the error.
    """
    path = Path(path)
    meta = {**meta, "format": FORMAT}
    payload: dict[str, Any] = {
        **arrays,
        "meta": numpy.frombuffer(json.dumps(meta).encode("utf-8"), dtype=numpy.uint8),
    }
    kept = f"the previous {path.name} is unchanged" if path.exists() else "nothing was written there"
    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.fchmod(handle, 0o666 & ~_umask())  # as any file the user creates (the log), not mkstemp's 0600
        with os.fdopen(handle, "wb") as file:
            numpy.savez(file, **payload)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException as error:
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)
        if isinstance(error, OSError) and not isinstance(error, SaveError):
            raise SaveError.writing(path, error, kept) from error
        raise
    return path


def _umask() -> int:
    """The process's file-creation mask, read without changing it where Linux tells it."""
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1], 8) for line in status if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError):
        mask = os.umask(0o022)
        os.umask(mask)
        return mask


def load_checkpoint(path: str | Path) -> tuple[dict[str, numpy.ndarray], dict[str, Any]]:
    """(arrays, meta) from a checkpoint file or run directory; CheckpointError names what is wrong."""
    return _read(path, arrays=True)


def load_meta(path: str | Path) -> dict[str, Any]:
    """The metadata of a checkpoint file or run directory, without reading its arrays."""
    return _read(path, arrays=False)[1]


def saved_step(path: str | Path) -> int:
    """The step the checkpoint ``path`` holds; -1 where it cannot be read, so that any other is newer."""
    try:
        return load_meta(path)["step"]
    except CheckpointError:
        return -1


def _read(path: str | Path, arrays: bool) -> tuple[dict[str, numpy.ndarray], dict[str, Any]]:
    path = resolve_path(path)
    if not path.is_file():
        what = "not a regular file" if path.exists() else "no such file"  # /dev/null exists
        raise CheckpointError(f"checkpoint {path}: {what}")
    try:
        with open(path, "rb") as file:
            start = file.read(4)
    except OSError as error:
        raise CheckpointError(f"checkpoint {path}: cannot be read ({error.strerror or error})") from None
    if start not in (b"PK\x03\x04", b"PK\x05\x06"):  # else NumPy tries it as a pickle, and says so
        raise CheckpointError(
            f"checkpoint {path}: not a checkpoint (an .npz file is a zip archive, this starts with {start!r})"
        )
    try:
        with numpy.load(path, allow_pickle=False) as archive:  # an .npz reads each entry on demand
            names = archive.files if arrays else [name for name in archive.files if name == "meta"]
            loaded = {name: archive[name] for name in names}
    except ValueError as error:
        if "Object arrays" in str(error):
            raise CheckpointError(
                f"checkpoint {path}: holds pickled Python objects, which are never loaded (they can "
                "run any code): it was not written by numpy_transformer"
            ) from error
        raise CheckpointError(f"checkpoint {path}: corrupt or truncated (ValueError: {error})") from error
    except (zipfile.BadZipFile, EOFError, OSError, KeyError, AttributeError, TypeError) as error:
        raise CheckpointError(
            f"checkpoint {path}: corrupt or truncated ({type(error).__name__}: {error})"
        ) from error
    if "meta" not in loaded:
        raise CheckpointError(
            f"checkpoint {path}: has no 'meta' entry, so it was not written by numpy_transformer"
        )
    try:
        meta = json.loads(loaded.pop("meta").tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"checkpoint {path}: its 'meta' entry is not valid JSON ({error})") from error
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else meta
        raise CheckpointError(f"checkpoint {path}: format {found!r}, expected {FORMAT!r}")
    return loaded, meta


def split_prefix(arrays: dict[str, numpy.ndarray], prefix: str) -> dict[str, numpy.ndarray]:
    """The entries under ``prefix/``, with the prefix removed."""
    return {name[len(prefix) + 1 :]: value for name, value in arrays.items() if name.startswith(prefix + "/")}


def task_recipe(task: TranslationTask, config: TrainConfig) -> dict[str, Any]:
    """How to rebuild the task: a generated task by name, a corpus by its absolute path and content hash."""
    recipe: dict[str, Any] = {
        "task": config.task if config.data is None else None,
        "data": None,
        "seed": config.seed,
        "tokenizer": task.tokenizer.name,
    }
    if config.data is not None:
        path = Path(config.data).resolve()
        recipe.update(
            data=str(path),
            data_sha256=file_sha256(path),
            max_length=config.max_length,
            vocab_size=config.vocab_size,
            shared_vocab=config.shared_vocab,
        )
        for split in ("dev", "test"):  # the user's own files: a resumed or evaluated run reads them again
            if getattr(config, split) is not None:
                own = Path(getattr(config, split)).resolve()
                recipe.update({split: str(own), f"{split}_sha256": file_sha256(own)})
    if isinstance(task.tokenizer, BPETokenizer):  # the learned subwords themselves, as the library's JSON
        recipe["tokenizer_json"] = task.tokenizer.serialized
    if isinstance(task.tokenizer, SentencePieceTokenizer):  # a pretrained model's two SentencePiece models
        recipe["sentencepiece"] = task.tokenizer.serialized
    if task.ids != DEFAULT_IDS:  # a pretrained model's vocabulary: where its special tokens are
        recipe["special_ids"] = asdict(task.ids)
    if isinstance(task, NumbersTask):  # its training draws (a recipe without it: uniform draws alone)
        recipe["small_share"] = task.small_share
    return recipe


def serialized_tokenizer(recipe: dict[str, Any]) -> Any:
    """The saved tokenizer's own state: learned subwords, a pretrained model's SentencePiece models, or
    None (char and word tokenizers learn nothing)."""
    return recipe.get("tokenizer_json", recipe.get("sentencepiece"))


def saved_vocabularies(path: str | Path, meta: dict[str, Any]) -> tuple[Vocab, Vocab]:
    """The checkpoint's source and target vocabularies (one object when they are the same list)."""
    try:
        ids = SpecialIds(**meta["task"].get("special_ids", {}))
        src_vocab = Vocab.from_list(meta["src_vocab"], ids)
        tgt_vocab = (
            src_vocab if meta["tgt_vocab"] == meta["src_vocab"] else Vocab.from_list(meta["tgt_vocab"], ids)
        )
    except (KeyError, TypeError, ValueError) as error:
        raise CheckpointError(
            f"checkpoint {resolve_path(path)}: its vocabularies are unusable ({error})"
        ) from error
    return src_vocab, tgt_vocab


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


META_FIELDS = {
    "model": dict,
    "step": int,
    "train": dict,
    "optimizer": dict,
    "task": dict,
    "src_vocab": list,
    "tgt_vocab": list,
}


def check_meta(path: str | Path, meta: dict) -> None:
    """Raise a CheckpointError naming the file and the field when the metadata is not what a run saves."""
    for field, kind in META_FIELDS.items():
        if not isinstance(meta.get(field), kind) or isinstance(meta.get(field), bool):
            raise CheckpointError(
                f"checkpoint {resolve_path(path)}: its metadata field {field!r} is missing or not a "
                f"{kind.__name__} (got {type(meta.get(field)).__name__})"
            )
    for side in ("src", "tgt"):
        vocab, size = meta[f"{side}_vocab"], meta["model"].get(f"{side}_vocab_size")
        if len(vocab) != size or not all(isinstance(token, str) for token in vocab):
            raise CheckpointError(
                f"checkpoint {resolve_path(path)}: its {side}_vocab holds {len(vocab)} entries, but the "
                f"model's {side}_vocab_size is {size!r}"
            )


def model_from_checkpoint(path: str | Path, arrays: dict, meta: dict) -> Transformer:
    """The saved model: built from its configuration, its weights loaded, checked by name and shape."""
    check_meta(path, meta)
    weights = split_prefix(arrays, "param")
    try:
        config = TransformerConfig.of(meta["model"])
        # the file's weights bound what is built: a configuration claiming more is refused unbuilt
        if parameter_count(config) > sum(value.size for value in weights.values()):
            raise ValueError(
                f"the file holds {sum(value.size for value in weights.values()):,} weights, d_model "
                f"{config.d_model}, N {config.N}, d_ff {config.d_ff} expected {parameter_count(config):,}"
            )
        model = build_from_config(config, seed=0)
        model.load_state_dict(weights)
    except (KeyError, TypeError, ValueError) as error:
        raise CheckpointError(
            f"checkpoint {resolve_path(path)}: the weights do not fit its model configuration ({error})"
        ) from error
    return model


def task_from_recipe(
    recipe: dict[str, Any], vocabularies: tuple[Vocab, Vocab] | None = None, path: str | Path | None = None
) -> TranslationTask:
    """Rebuild the task a checkpoint was trained on (generated tasks regenerate; files are re-read).

    A corpus must be the very file the run trained on: a file changed since, or another file at
    that path, is refused by name rather than scored or trained on. A pretrained model's tokenizer
    needs its ``vocabularies`` (saved_vocabularies); ``path`` names the checkpoint in a refusal.
    """
    if recipe.get("task") is None and recipe.get("data") is None:
        checkpoint = f"checkpoint {resolve_path(path)}" if path is not None else "the checkpoint"
        raise ValueError(
            f"{checkpoint} holds an imported model, which was trained on no corpus this package knows: "
            "give a corpus of your own (evaluate --data FILE.tsv, train --from RUN --data FILE.tsv)"
        )
    for key, what in (
        ("data", "trained on"),
        ("dev", "took its dev pairs from"),
        ("test", "took its test pairs from"),
    ):
        expected = recipe.get(f"{key}_sha256")
        if recipe.get(key) is not None and expected is not None:
            corpus = Path(recipe[key])
            if not corpus.is_file():
                raise ValueError(f"the run {what} {corpus}, which no longer exists")
            if file_sha256(corpus) != expected:
                raise ValueError(
                    f"the run {what} {corpus}, but that file has changed since (its sha256 differs)"
                )
    vocabulary: dict[str, Any] = {key: recipe[key] for key in ("vocab_size", "shared_vocab") if key in recipe}
    if serialized_tokenizer(recipe) is not None:
        vocabulary["serialized_tokenizer"] = serialized_tokenizer(recipe)
    if vocabularies is not None:
        vocabulary["vocabularies"] = vocabularies
    return make_task(
        recipe["task"],
        recipe["data"],
        recipe["seed"],
        recipe["tokenizer"],
        recipe.get("max_length", MAX_LENGTH),
        recipe.get("dev"),
        recipe.get("test"),
        small_share=recipe.get("small_share", 0.0),  # absent: saved before the share, uniform draws
        **vocabulary,
    )


def restore_model_and_task(path: str | Path, arrays: dict, meta: dict) -> tuple[Transformer, TranslationTask]:
    """Rebuild the model and the task, with the saved vocabularies (dropout needs no saved state:
    see step_rng)."""
    task = trained_task(path, meta)  # its refusals (a corpus gone or changed) before the weights are built
    return model_from_checkpoint(path, arrays, meta), task


def trained_task(path: str | Path, meta: dict) -> TranslationTask:
    """The task the checkpoint's run trained on, rebuilt (task_from_recipe), with its saved vocabularies."""
    check_meta(path, meta)
    # a pretrained model's tokenizer, or a run's fine-tuned further (train --from): its own vocabularies
    own = meta["task"].get("tokenizer") == SentencePieceTokenizer.name or meta["train"].get("from_run")
    task = task_from_recipe(meta["task"], saved_vocabularies(path, meta) if own else None, path)
    if task.src_vocab.itos != meta["src_vocab"] or task.tgt_vocab.itos != meta["tgt_vocab"]:
        task.src_vocab, task.tgt_vocab = (
            Vocab.from_list(meta["src_vocab"]),
            Vocab.from_list(meta["tgt_vocab"]),
        )
    return task


def average_checkpoints(
    paths: Sequence[str | Path], allow_no_run_id: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(arrays, meta) of a checkpoint whose weights are the mean of the given checkpoints' (run
    directories or .npz files), as the paper averages the last checkpoints of one run.

    Every metadata is read and checked first: one model configuration, tokenizer and vocabularies,
    and one run (the ``run_id`` a run records in every checkpoint it saves). A checkpoint saved
    before runs recorded one is refused unless ``allow_no_run_id`` (the caller vouches for it);
    the ids that are there must still agree. Then the weights are summed in float64, one
    checkpoint in memory at a time, and divided at the end; a weight that is NaN or infinite is
    refused by file and name (CheckpointError). The optimiser state and metadata are the last
    one's, with ``averaged_from`` naming them all (what tells an average from a training run's
    checkpoint, which --resume refuses).
    """
    if not paths:
        raise ValueError("average needs at least one checkpoint")
    files = [resolve_path(path) for path in paths]
    metas = [load_meta(path) for path in files]
    for path, meta in zip(files, metas):
        check_meta(path, meta)
        for field in ("model", "src_vocab", "tgt_vocab"):
            if meta[field] != metas[0][field]:
                raise ValueError(
                    f"checkpoint {path} has another {field} than {files[0]}: only checkpoints of one "
                    "model can be averaged"
                )
        if serialized_tokenizer(meta["task"]) != serialized_tokenizer(metas[0]["task"]):
            raise ValueError(f"checkpoint {path} has another tokenizer than {files[0]}")
    check_one_run(files, metas, allow_no_run_id)
    total: dict[str, numpy.ndarray] = {}
    for path in files:
        arrays, _ = load_checkpoint(path)  # the previous one is freed: memory does not grow with the count
        weights = split_prefix(arrays, "param")
        if total and weights.keys() != total.keys():
            raise CheckpointError(f"checkpoint {path}: its weights are not named as those of {files[0]}")
        for name, value in weights.items():
            if value.dtype.kind == "f" and not numpy.isfinite(value).all():  # the average would be too
                raise CheckpointError(
                    f"checkpoint {path}: its weight {name} holds NaN or infinite values, which no "
                    "checkpoint is written with: it cannot be averaged"
                )
            if name not in total:
                total[name] = value.astype(numpy.float64)  # a copy
            elif value.shape != total[name].shape:
                raise CheckpointError(
                    f"checkpoint {path}: its weight {name} has shape {value.shape}, {files[0]}'s "
                    f"{total[name].shape}"
                )
            else:
                total[name] += value
    for name, value in total.items():
        arrays[f"param/{name}"] = (value / len(files)).astype(arrays[f"param/{name}"].dtype)
    return arrays, {**metas[-1], "averaged_from": [str(path) for path in files]}


def check_one_run(files: Sequence[Path], metas: Sequence[dict[str, Any]], allow_no_run_id: bool) -> None:
    """Refuse, naming the file, checkpoints that do not share the run_id their runs recorded:
    models of two runs can share every size and vocabulary and still average to nonsense."""
    for path, meta in zip(files, metas):
        run_id = meta.get("run_id")
        if run_id is not None and not isinstance(run_id, str):
            raise CheckpointError(f"checkpoint {path}: its metadata field 'run_id' is not a string")
        if not run_id and not allow_no_run_id:
            raise ValueError(
                f"checkpoint {path} records no run id (it was saved before runs recorded one), so nothing "
                "shows it comes from the same run as the others: average it only if you know it does, "
                "with --allow-no-run-id (allow_no_run_id=True)"
            )
    identified = [(path, meta["run_id"]) for path, meta in zip(files, metas) if meta.get("run_id")]
    for path, run_id in identified:
        if run_id != identified[0][1]:
            raise ValueError(
                f"checkpoint {path} is of another run (run id {run_id}) than {identified[0][0]} (run id "
                f"{identified[0][1]}): only checkpoints of one training run can be averaged"
            )
    first_of_step: dict[int, Path] = {}  # a run saves each step once: RUN and its last step-*.npz are one
    for path, meta in zip(files, metas):
        if meta.get("run_id") and meta["step"] in first_of_step:
            raise ValueError(
                f"checkpoint {path} is step {meta['step']} of the run, as {first_of_step[meta['step']]} "
                "is: averaging it twice would weigh it double; give each step once"
            )
        first_of_step.setdefault(meta["step"], path)


def saved_task(path: str | Path, meta: dict) -> TranslationTask:
    """A task of the checkpoint's own tokenizer and vocabularies and no pairs: what scoring or
    translating other text needs (``evaluate --data``, ``translate``). The corpus the run trained on
    is not read: it may be gone or changed since."""
    try:
        recipe = meta["task"]
        return TranslationTask(
            recipe["tokenizer"],
            [],
            [],
            [],
            int(recipe.get("seed", 0)),
            serialized_tokenizer=serialized_tokenizer(recipe),
            vocabularies=saved_vocabularies(path, meta),
        )
    except (CheckpointError, MissingLibrary):  # names the checkpoint already; the checkpoint is fine
        raise
    except (KeyError, TypeError, ValueError, RuntimeError) as error:
        raise CheckpointError(
            f"checkpoint {resolve_path(path)}: its tokenizer or vocabularies are unusable ({error})"
        ) from error


def load_for_inference(path: str | Path) -> tuple[Transformer, Any, Vocab, Vocab]:
    """(model in eval mode, tokenizer, source vocab, target vocab) without rebuilding the task."""
    arrays, meta = load_checkpoint(path)
    model = model_from_checkpoint(path, arrays, meta)
    task = saved_task(path, meta)
    return model.eval(), task.tokenizer, task.src_vocab, task.tgt_vocab
