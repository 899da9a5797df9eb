"""The three houses and every rule of the layout, in one table: the model (numpy_transformer/*.py)
imports neither the workbook (numpy_transformer/workbook/) nor the translation toolkit
(numpy_transformer/translator/); the workbook imports the model alone; no module takes over a
house (900 lines), no class takes over the toolkit (300 lines); the run directory does not reach
into the Trainer; each exercise of the workbook is declared once; importing the package loads the
model alone."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import numpy_transformer as nt

PACKAGE = Path(nt.__file__).parent
HOUSES = ("translator", "workbook")  # the folders that are houses of their own; the rest is the model

# the package's doors: ``python -m numpy_transformer`` runs the command line, and the package's
# __getattr__ imports ``load_pretrained`` on first use (checked below); their top level is held to the rule
DOORS = {"__main__.py", "__init__.py"}


def house_of(path: Path) -> str:
    first = path.relative_to(PACKAGE).parts[0]
    return {"translator": "toolkit", "workbook": "workbook"}.get(first, "model")


def files_of(house: str) -> list[Path]:
    return sorted(path for path in PACKAGE.rglob("*.py") if house_of(path) == house)


def imported_modules(path: Path, top_level_only: bool = False) -> list[str]:
    """Every module ``path`` imports, as an absolute dotted name (relative imports resolved)."""
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    names = []
    tree = ast.parse(path.read_text())
    for node in tree.body if top_level_only else ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            names += [module] + [f"{module}.{alias.name}" for alias in node.names]
    return names


# ------------------------------------------------------------------------------------------------
# the table: each house, what it never imports, how long its modules and classes may grow

RULES = {
    # house: (packages it never imports, most lines of a module, most lines of a class)
    "model": (("numpy_transformer.translator", "numpy_transformer.workbook"), 900, None),
    "workbook": (("numpy_transformer.translator",), 900, None),
    "toolkit": ((), 900, 300),
}
EXEMPT = {"__main__.py"}  # the command line's door: ``python -m numpy_transformer`` is the toolkit's


@pytest.mark.parametrize("house", sorted(RULES))
def test_a_house_never_imports_what_its_rule_forbids(house):
    forbidden, _, _ = RULES[house]
    files = files_of(house)
    assert len(files) > 5  # the check reads the house it means
    offenders = {
        str(path.relative_to(PACKAGE)): name
        for path in files
        if str(path.relative_to(PACKAGE)) not in EXEMPT
        for name in imported_modules(path, top_level_only=path.name in DOORS and house == "model")
        if name.startswith(forbidden) and forbidden
    }
    assert offenders == {}


@pytest.mark.parametrize("house", sorted(RULES))
def test_no_module_takes_over_a_house(house):
    _, most, _ = RULES[house]
    sizes = {
        str(p.relative_to(PACKAGE)): len(p.read_text(encoding="utf-8").splitlines()) for p in files_of(house)
    }
    offenders = {name: lines for name, lines in sizes.items() if lines > most}
    assert not offenders, f"modules over {most} lines: {offenders}"


def class_sizes(path: Path) -> dict[str, int]:
    """module.py:Class -> its lines (decorators, docstring and methods included)."""
    sizes = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ClassDef):
            first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
            sizes[f"{path.relative_to(PACKAGE)}:{node.name}"] = (node.end_lineno or node.lineno) - first + 1
    return sizes


@pytest.mark.parametrize("house", sorted(house for house, (_, _, most) in RULES.items() if most))
def test_no_class_takes_over_a_house(house):
    _, _, most = RULES[house]
    sizes = {name: lines for path in files_of(house) for name, lines in class_sizes(path).items()}
    assert "translator/training.py:Trainer" in sizes  # the check reads the package it means
    offenders = {name: lines for name, lines in sizes.items() if lines > most}
    assert not offenders, f"classes over {most} lines: {offenders}"


def test_the_houses_are_told_apart():
    assert house_of(PACKAGE / "functional.py") == "model"
    assert house_of(PACKAGE / "kernels" / "cpu.py") == "model"
    assert house_of(PACKAGE / "workbook" / "blocks.py") == "workbook"
    assert house_of(PACKAGE / "translator" / "cli" / "learn.py") == "toolkit"
    assert {house_of(path) for path in PACKAGE.rglob("*.py")} == set(RULES)


def test_the_layering_check_sees_relative_imports():
    """The check resolves ``from .translator.data import X``, ``from ..translator import Y``, ``from .. import Z``."""
    names = imported_modules(PACKAGE / "kernels" / "cpu.py")
    assert "numpy_transformer.functional" in names and "numpy_transformer.machine" in names
    names = imported_modules(PACKAGE / "workbook" / "exercises" / "curriculum.py")
    assert "numpy_transformer.functional" in names and "numpy_transformer.workbook.blocks" in names


def test_the_run_directory_does_not_import_training():
    imported = imported_modules(PACKAGE / "translator" / "run_directory.py")
    assert imported and not any(name.endswith("training") for name in imported), imported


def test_each_exercise_is_declared_once():
    """One Exercise(...) per backward, in the workbook's exercise modules; no table elsewhere keyed by
    an exercise's name (its cases, hints and mistakes travel with its declaration)."""
    from numpy_transformer.workbook import EXERCISES

    names = {exercise.backward for exercise in EXERCISES}
    declared: dict[str, list[str]] = {}
    keyed: list[str] = []
    for path in files_of("workbook"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Exercise" and node.args:
                declared.setdefault(node.args[0].value, []).append(path.name)
            if isinstance(node, ast.Dict):
                keys = {key.value for key in node.keys if isinstance(key, ast.Constant)}
                if len(keys & names) > 1:
                    keyed.append(f"{path.name}:{node.lineno}")
    assert sorted(declared) == sorted(names)
    assert all(len(places) == 1 for places in declared.values()), declared
    assert keyed == []


def test_importing_the_package_loads_the_model_alone():
    code = (
        "import sys, numpy_transformer\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith(('numpy_transformer.translator', "
        "'numpy_transformer.workbook')))))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == ""


def test_the_toolkit_names_at_the_top_load_on_first_use():
    code = (
        "import sys, numpy_transformer as nt\n"
        "assert 'numpy_transformer.translator.pretrained' not in sys.modules\n"
        "print(nt.load_pretrained.__module__)"
    )
    module = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert module.strip() == "numpy_transformer.translator.pretrained"
