"""The one way to declare a checked setting: a dataclass field made by ``setting``, checked by ``Checked``.

A setting is a field of a frozen dataclass: its annotation is its type (``int``, ``float``, ``str``,
``bool``, or one of them ``| None``), ``setting(default, help, ...)`` its default, its help and its
checks (``choices``; the bounds ``minimum`` and ``maximum``, inclusive, ``above`` and ``below``,
exclusive). A dataclass that derives from ``Checked`` checks every field whenever it is made, by a
flag, a file, a checkpoint or Python, and stores it plainly (a NumPy integer as ``int``, an integer
given for a float as ``float``); a bad value is refused by ``check_value`` naming the setting, the
value and what was expected. The model's TransformerConfig declares its settings so, and the
toolkit's run configuration (ModelConfig, TrainConfig) too, whose command line and ``--config``
files are made from the same fields: ``flag`` names a setting's flag where it is not
``--field-name``, and ``on_resume`` lets a resumed run change it::

    @dataclass(frozen=True)
    class Sizes(Checked):
        width: int = setting(64, "model width", minimum=1)
"""

from __future__ import annotations

import functools
import math
import numbers
import typing
from dataclasses import MISSING, Field, field, fields
from typing import Any


class SettingTypeError(TypeError, ValueError):
    """A setting of the wrong type: a TypeError, and a ValueError like every other bad setting."""


def setting(
    default: Any = MISSING,
    help: str = "",
    *,
    flag: str | None = None,
    choices: tuple[str, ...] | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
    below: float | None = None,
    on_resume: bool = False,
) -> Any:
    """A dataclass field with its help and checks (no ``default``: the setting must be given).

    ``minimum`` and ``maximum`` are inclusive bounds, ``above`` and ``below`` exclusive ones; ``flag``
    overrides ``--field-name`` on a command line (a bool field whose default is True has a flag that
    stores False, such as ``--post-norm``); ``on_resume`` True lets a resumed run change the value (the
    others must stay as saved).
    """
    meta = {
        "help": help,
        "flag": flag,
        "choices": choices,
        "minimum": minimum,
        "maximum": maximum,
        "above": above,
        "below": below,
        "on_resume": on_resume,
    }
    return field(default=default, metadata=meta)


def flag_of(item: Field[Any]) -> str:
    """The command-line flag of a setting: ``--batch-size`` for batch_size unless it names another."""
    return item.metadata.get("flag") or "--" + item.name.replace("_", "-")


@functools.cache
def _value_types(cls: type) -> dict[str, tuple[type, bool]]:
    """name -> (the field's value type, whether None is allowed), from ``cls``'s annotations."""
    types = {}
    for name, hint in typing.get_type_hints(cls).items():
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        types[name] = (args[0] if args else hint), type(None) in typing.get_args(hint)
    return types


def value_type(cls: type, item: Field[Any]) -> type:
    """The type of the values of ``cls``'s setting ``item``: ``int`` for ``int | None``."""
    return _value_types(cls)[item.name][0]


def expected(cls: type, item: Field[Any]) -> str:
    """What a setting accepts, in words: "a positive integer", "a number in [0, 1)", "one of a, b"."""
    kind, _ = _value_types(cls)[item.name]
    meta = item.metadata
    low, high, above, below = meta.get("minimum"), meta.get("maximum"), meta.get("above"), meta.get("below")
    if meta.get("choices"):
        return "one of " + ", ".join(meta["choices"])
    if kind is bool:
        return "true or false"
    if kind is str:
        return "a string"
    if kind is int and low is not None and high is not None:
        return f"an integer in [{low}, {high}]"
    if kind is int:
        return (
            "a positive integer" if low == 1 else f"an integer >= {low}" if low is not None else "an integer"
        )
    if above is not None and high is not None:
        return f"a number in ({above:g}, {high:g}]"
    if low is not None and below is not None:
        return f"a number in [{low:g}, {below:g})"
    if above == 0:
        return "a positive finite number"
    return f"a finite number >= {low:g}" if low is not None else "a finite number"


def _plain(kind: type, value: Any) -> Any:
    """``value`` as the plain Python ``kind`` where it is one in all but type (a NumPy integer, a
    NumPy boolean, an integer given for a float); else ``value`` itself, for the check to refuse."""
    if kind is bool and getattr(value, "dtype", None) is not None and value.dtype.kind == "b":
        return bool(value) if getattr(value, "shape", None) == () else value
    if isinstance(value, bool):
        return value
    if kind is float and isinstance(value, numbers.Real):
        return float(value)
    if kind is int and isinstance(value, numbers.Integral):
        return int(value)
    return value


def check_value(cls: type, item: Field[Any], value: Any, where: str = "") -> Any:
    """``value`` for the setting ``item`` of ``cls``, checked and stored plainly; a ValueError (or a
    SettingTypeError) names the setting (``where`` says where it came from), the value and what was
    expected."""
    kind, optional = _value_types(cls)[item.name]
    # the name Python and a --config file use (argparse's messages name the flag)
    name = f"{where}{item.name}"
    if value is None:
        if optional:
            return None
        raise SettingTypeError(f"{name} must be {expected(cls, item)}, got None")
    value = _plain(kind, value)
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise SettingTypeError(
            f"{name} must be {expected(cls, item)}, got {value!r} ({type(value).__name__})"
        )
    meta = item.metadata
    if (
        (isinstance(value, float) and not math.isfinite(value))
        or (meta.get("choices") and value not in meta["choices"])
        or (meta.get("minimum") is not None and value < meta["minimum"])
        or (meta.get("maximum") is not None and value > meta["maximum"])
        or (meta.get("above") is not None and value <= meta["above"])
        or (meta.get("below") is not None and value >= meta["below"])
    ):
        raise ValueError(f"{name} must be {expected(cls, item)}, got {value!r}")
    return value


class Checked:
    """A frozen dataclass of settings, every field checked by ``check_value`` whoever made it."""

    def __post_init__(self) -> None:
        for item in fields(self):  # type: ignore[arg-type]
            object.__setattr__(self, item.name, check_value(type(self), item, getattr(self, item.name)))

    @classmethod
    def from_mapping(cls, values: dict[str, Any], where: str = "") -> Any:
        """The dataclass from a mapping of field names, refusing an unknown name by name."""
        known = {item.name for item in fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"{where}unknown setting {unknown[0]!r}; the settings are: {', '.join(sorted(known))}"
            )
        return cls(**values)
