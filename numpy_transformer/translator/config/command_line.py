"""The ``train`` command's flags, one a setting of the run's configuration, made from its fields."""

from __future__ import annotations

import argparse
from dataclasses import Field, fields
from typing import Any

from ...settings import check_value, expected, flag_of, value_type
from .run import SECTIONS


def add_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup, cls: type, section: str) -> None:
    """One flag per field of ``cls``; a flag not given leaves no attribute (given_settings reads them)."""
    for item in fields(cls):
        kind = value_type(cls, item)
        shown = "" if item.default is None or kind is bool else f" (default: {item.default})"
        options: dict[str, Any] = {"dest": f"{section}.{item.name}", "default": argparse.SUPPRESS}
        if kind is bool:
            options["action"] = "store_false" if item.default else "store_true"
        else:
            options.update(type=_argument_type(cls, item, kind), metavar=item.name.upper())
            if item.metadata.get("choices"):
                options.update(metavar="{" + ",".join(item.metadata["choices"]) + "}")
        parser.add_argument(flag_of(item), help=item.metadata["help"] + shown, **options)


def _argument_type(cls: type, item: Field[Any], kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected(cls, item)}, got {text!r}") from None
        try:
            return check_value(cls, item, value)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"expected {expected(cls, item)}, got {value}") from None

    return parse


def given_settings(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """section -> field -> value, of the settings given on the command line (add_arguments' flags)."""
    given: dict[str, dict[str, Any]] = {section: {} for section in SECTIONS}
    for dest, value in vars(args).items():
        section, _, name = dest.partition(".")
        if section in SECTIONS and name:
            given[section][name] = value
    return given
