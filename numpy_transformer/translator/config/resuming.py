"""What a run started from a saved one may change: ``--resume`` continues a run as it was saved (bar
the settings declared ``on_resume``), and ``--from`` fine-tunes a run's model on a corpus, keeping
its model (bar dropout), its tokenizer and its vocabularies."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import Field, fields, replace
from pathlib import Path
from typing import Any

from ...settings import flag_of
from .run import PATHS, SECTIONS, ModelConfig, TrainConfig


def setting_differs(item: Field, value: Any, kept: Any, where: str, kept_there: str) -> str:
    """'--flag VALUE differs from KEPT_THERE', or for a flag, as typed: '--flag differs from WHERE,
    which has no --flag'."""
    flag = flag_of(item)
    if isinstance(kept, bool):
        typed, was = (flag if on != item.default else f"no {flag}" for on in (value, kept))
        return f"{typed} differs from {where}, which has {was}"
    return f"{flag} {value!r} differs from {kept_there}"


def resume_conflicts(given: dict[str, dict[str, Any]], saved: dict[str, Any]) -> None:
    """Refuse, naming the flag, a setting given to ``--resume`` whose value differs from the saved
    run's and that ``on_resume`` does not let change. ``given``: section -> field -> value;
    ``saved``: section -> the saved dataclass."""
    for section, values in given.items():
        config = saved[section]
        for item in fields(config):
            if item.name in values and not item.metadata["on_resume"]:
                value, kept = values[item.name], getattr(config, item.name)
                if item.name in PATHS and value is not None:
                    value = str(Path(value).expanduser().resolve())
                if value != kept:
                    difference = setting_differs(
                        item, value, kept, "the saved run", f"the saved run's {kept!r}"
                    )
                    raise ValueError(
                        f"{difference}: --resume continues the run as it was saved (only "
                        f"{' and '.join(resumable_flags())} may change); start a new run (another --out, or "
                        "--overwrite) to change it"
                    )


def resumable_flags() -> list[str]:
    """The flags whose settings ``--resume`` may change."""
    return [flag_of(item) for cls in SECTIONS.values() for item in fields(cls) if item.metadata["on_resume"]]


def resumable_fields() -> list[str]:
    """The TrainConfig fields ``--resume`` may change (Trainer.resume takes them by name)."""
    return [item.name for item in fields(TrainConfig) if item.metadata["on_resume"]]


def fine_tune_settings(
    given: TrainConfig,
    config: TrainConfig,
    model: ModelConfig | Mapping[str, Any] | None,
    meta: dict[str, Any],
) -> tuple[dict[str, Any], TrainConfig]:
    """(the model's configuration, the run's settings) of a fine-tune from ``config.from_run``, whose
    checkpoint's metadata is ``meta``: refusing by name a setting given (``given``: before resolve;
    ``model``: the model settings given) that the run decides otherwise: the model (bar dropout),
    the tokenizer and vocabularies, a --max-length beyond its positional tables."""
    path = config.from_run
    saved, recipe = ModelConfig.from_model(meta["model"]), meta["task"]
    # given: a mapping's entries, or a ModelConfig's fields that differ from their defaults
    changes = (
        {
            item.name: getattr(model, item.name)
            for item in fields(ModelConfig)
            if getattr(model, item.name) != item.default
        }
        if isinstance(model, ModelConfig)
        else {name: value for name, value in dict(model or {}).items() if value is not None}
    )
    for item in fields(ModelConfig):
        if (
            item.name in changes
            and item.name != "dropout"
            and changes[item.name] != getattr(saved, item.name)
        ):
            value, kept = changes[item.name], getattr(saved, item.name)
            where = f"the model of --from {path}"
            difference = setting_differs(item, value, kept, where, f"{where} ({kept!r})")
            raise ValueError(
                f"{difference}: a fine-tune keeps the model it starts from (only --dropout may change)"
            )
    shared = bool(meta["model"].get("shared_vocab", False))
    if given.vocab_size is not None and recipe.get("vocab_size") is None:  # no subwords of its own learned
        src, tgt = len(meta["src_vocab"]), len(meta["tgt_vocab"])
        kind = "SentencePiece (Marian) " if recipe.get("tokenizer") == "marian" else ""
        units = (
            f"vocabulary of {src:,}"
            if src == tgt
            else f"source and target vocabularies of {src:,} and {tgt:,}"
        )
        raise ValueError(
            f"--vocab-size {given.vocab_size} cannot apply to a fine-tune of --from {path}: it keeps that "
            f"run's {recipe.get('tokenizer')} tokenizer and its {kind}{units} units"
        )
    for flag, value, kept in (
        ("--tokenizer", given.tokenizer, recipe.get("tokenizer")),
        ("--vocab-size", given.vocab_size, recipe.get("vocab_size")),
        ("--shared-vocab", given.shared_vocab or None, shared or None),
    ):
        if value is not None and value != kept:
            raise ValueError(
                f"{flag} {value!r} differs from the run of --from {path} ({kept!r}): a fine-tune keeps its "
                "tokenizer and vocabularies"
            )
    limit = min(meta["model"]["src_seq_len"], meta["model"]["tgt_seq_len"] - 1)  # the target gains <eos>
    if given.max_length is not None and given.max_length > limit:
        raise ValueError(
            f"--max-length {given.max_length} exceeds what the model of --from {path} holds: {limit} "
            "tokens a side (its positional tables)"
        )
    if config.bpe_dropout and recipe["tokenizer"] != "bpe":
        raise ValueError(
            f"--bpe-dropout {config.bpe_dropout:g} applies to learned BPE subwords only: the run of --from "
            f"{path} is tokenized by its {recipe['tokenizer']} tokenizer"
            + (" (an imported Marian model's SentencePiece)" if recipe["tokenizer"] == "marian" else "")
        )
    max_length = min(config.max_length or limit, limit)
    config = replace(
        config,
        tokenizer=recipe["tokenizer"],
        vocab_size=recipe.get("vocab_size"),
        shared_vocab=shared,
        max_length=max_length,
    )
    return {**meta["model"], "dropout": changes.get("dropout", saved.dropout)}, config
