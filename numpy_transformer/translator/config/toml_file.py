"""A run's configuration as a TOML file: ``--config`` reads one (``read_config_file``), and every run
saves the configuration it resolved to as one (``config_toml``, its ``config.toml``)."""

from __future__ import annotations

import os
import sys
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from ...settings import check_value
from .run import PATHS, SECTIONS, ModelConfig, TrainConfig

MAX_CONFIG_BYTES = 1 << 20  # a --config file is read up to this size


def read_config_file(path: str | Path) -> dict[str, dict[str, Any]]:
    """``{"model": {...}, "train": {...}}`` from a TOML file of [model] and [train] tables (a run's
    config.toml is one), each value checked; an unknown table or key is named with the file."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib

    path = Path(path)
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_CONFIG_BYTES + 1)  # /dev/zero, or a corpus given by mistake: bounded
    except OSError as error:
        raise ValueError(f"--config {path}: cannot be read ({error.strerror or error})") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ValueError(
            f"--config {path}: larger than {MAX_CONFIG_BYTES // 1024} KiB, expected a TOML file of [model] "
            "and [train] settings"
        )
    try:
        text = data.decode("utf-8-sig")  # a byte-order mark, as Notepad writes one, is not a setting
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise ValueError(
            f"--config {path}:{line}: not UTF-8 text (byte {data[error.start]:#04x}); TOML files are UTF-8"
        ) from None
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"--config {path}: not valid TOML ({error})") from None
    sections: dict[str, dict[str, Any]] = {}
    for section, values in document.items():
        cls = SECTIONS.get(section)
        if cls is not None and isinstance(values, list):
            raise ValueError(
                f"--config {path}: [[{section}]] is an array of tables; write the table [{section}] once"
            )
        if cls is None and not isinstance(values, dict):
            where = next(
                (c.__name__ for c in SECTIONS.values() if section in {f.name for f in fields(c)}), None
            )
            table = "[model]" if where == "ModelConfig" else "[train]" if where else "[model] or [train]"
            raise ValueError(
                f"--config {path}: {section} = {values!r} is a setting outside any table; every setting "
                f"belongs under {table}"
            )
        if cls is None or not isinstance(values, dict):
            raise ValueError(
                f"--config {path}: unknown table [{section}]; the tables are [model] and [train]"
            )
        by_name = {item.name: item for item in fields(cls)}
        for key, value in values.items():
            if key not in by_name:
                raise ValueError(
                    f"--config {path}: unknown setting {key!r} in [{section}]; its settings are: "
                    f"{', '.join(by_name)}"
                )
            check_value(cls, by_name[key], value, where=f"--config {path}: [{section}] ")
        sections[section] = dict(values)
    return sections


def toml_string(value: str) -> str:
    """``value`` as a TOML basic string: UTF-8 as it is (an emoji stays one character), the quote,
    the backslash and control characters escaped (TOML has no escape for a lone surrogate)."""
    escaped = []
    for character in value:
        if character in '"\\':
            escaped.append("\\" + character)
        elif ord(character) < 0x20 or ord(character) == 0x7F:
            escaped.append(f"\\u{ord(character):04x}")
        else:
            escaped.append(character)
    return '"' + "".join(escaped) + '"'


def config_toml(model: ModelConfig, train: TrainConfig | None = None) -> str:
    """The run's resolved configuration as a TOML document that ``--config`` reads back (the model
    alone for an imported one)."""
    lines = ["# The configuration this run resolved to: train --config FILE reads it back."]
    for section, config in (("model", model), ("train", train)):
        if config is None:
            continue
        lines.append(f"\n[{section}]")
        for name, value in asdict(config).items():
            if value is None:
                lines.append(f"# {name}: not set")
            elif isinstance(value, bool):
                lines.append(f"{name} = {str(value).lower()}")
            elif isinstance(value, str):
                if any("\ud800" <= c <= "\udfff" for c in value):  # a path of non-UTF-8 bytes
                    shown = os.fsencode(value) if name in PATHS else value.encode(errors="replace")
                    lines.append(
                        f"# {name}: {ascii(shown)[2:-1]} is not UTF-8 text, which TOML cannot hold: give it "
                        "on the command line"
                    )
                else:
                    lines.append(f"{name} = {toml_string(value)}")
            else:
                lines.append(f"{name} = {value!r}")
    return "\n".join(lines) + "\n"
