"""The toolkit's shape: no class or module takes over (one room per concept), and the run directory
does not reach into the Trainer."""

import ast
from pathlib import Path

import numpy_transformer.translator as translator

PACKAGE = Path(translator.__file__).parent
MAX_CLASS_LINES = 300


def class_sizes(folder: Path) -> dict[str, int]:
    """module.py:Class -> its lines (decorators, docstring and methods included)."""
    sizes = {}
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
                sizes[f"{path.name}:{node.name}"] = (node.end_lineno or node.lineno) - first + 1
    return sizes


def test_no_class_of_the_toolkit_is_over_300_lines():
    sizes = class_sizes(PACKAGE)
    assert "training.py:Trainer" in sizes  # the check reads the package it means
    offenders = {name: lines for name, lines in sizes.items() if lines > MAX_CLASS_LINES}
    assert not offenders, f"classes over {MAX_CLASS_LINES} lines: {offenders}"


def test_the_run_directory_does_not_import_training():
    tree = ast.parse((PACKAGE / "run_directory.py").read_text(encoding="utf-8"))
    imported = {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)} | {
        alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    assert not any(name.endswith("training") for name in imported), imported


MAX_MODULE_LINES = 900


def test_no_module_of_the_toolkit_is_over_900_lines():
    sizes = {
        str(path.relative_to(PACKAGE)): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(PACKAGE.rglob("*.py"))
    }
    assert "cli/train.py" in sizes and "tasks.py" in sizes  # the check reads the package it means
    offenders = {name: lines for name, lines in sizes.items() if lines > MAX_MODULE_LINES}
    assert not offenders, f"modules over {MAX_MODULE_LINES} lines: {offenders}"
