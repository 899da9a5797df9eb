"""The three houses and every rule of the layout, in one table: the model (numpy_transformer/*.py)
imports neither the workbook (numpy_transformer/workbook/) nor the translation toolkit
(numpy_transformer/translator/); the workbook imports the model alone; no module takes over a
house (900 lines), no class takes over the toolkit (300 lines); no import circle inside a house,
deferred imports included; the run on disk does not reach into the Trainer; each exercise of the
workbook is declared once; importing the package loads the model alone."""

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
    assert "translator/training/trainer.py:Trainer" in sizes  # the check reads the package it means
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


def test_the_run_on_disk_does_not_import_training():
    files = sorted((PACKAGE / "translator" / "run").glob("*.py"))
    imported = {name for path in files for name in imported_modules(path)}
    assert len(files) > 3 and imported  # the check reads the package it means
    assert not any(".training" in name for name in imported), imported


def module_name(path: Path, root: Path) -> str:
    """The dotted name of the module at ``path`` in the package whose folder is ``root``."""
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the modules of the package at ``root`` it imports: every import statement, those
    inside functions and under ``if TYPE_CHECKING:`` included. ``from P import name`` imports the
    module P.name when there is one, else P; a package's __init__ handing on its own submodules is
    no import of theirs."""
    modules = {module_name(path, root): path for path in root.rglob("*.py")}

    def owner(name: str) -> str | None:  # the module that defines ``name``, when it is one of the package
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: list[str] = []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = (
                    package.rsplit(".", node.level - 1)[0]
                    if node.level > 1
                    else package
                    if node.level
                    else ""
                )
                module = ".".join(part for part in (base, node.module or "") if part)
                named = [f"{module}.{alias.name}" for alias in node.names]
                targets += [target for target in named if target in modules]
                targets += [module] if any(target not in modules for target in named) else []
        owners = {owner(target) for target in targets} - {None, name}
        if path.name == "__init__.py":
            owners = {target for target in owners if not target.startswith(name + ".")}
        graph[name] = {target for target in owners if target is not None}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The circles of ``graph``: each set of two or more modules that import one another, through
    any number of others (its strongly connected components, by Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph.get(module, ()):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = [stack.pop()]
            while component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return circles


def test_no_import_circle_inside_a_house():
    graph = import_graph(PACKAGE)
    assert (
        "numpy_transformer.translator.run.checkpoint" in graph["numpy_transformer.translator.run.directory"]
    )
    houses: dict[str, set[str]] = {house: set() for house in RULES}
    for module in graph:
        first = module.split(".")[1] if "." in module else ""
        houses[{"translator": "toolkit", "workbook": "workbook"}.get(first, "model")].add(module)
    circles = {
        house: import_circles({module: graph[module] & modules for module in modules})
        for house, modules in houses.items()
    }
    assert circles == {house: [] for house in RULES}


def test_the_circle_check_sees_deferred_and_type_checking_imports(tmp_path):
    """A circle closed by an import inside a function, or under ``if TYPE_CHECKING:``, is one."""
    root = tmp_path / "house"
    (root / "inner").mkdir(parents=True)
    (root / "__init__.py").write_text("from .a import A\n")  # hands on its own module: no circle
    (root / "a.py").write_text("from .inner.b import B\nA = 1\n")
    (root / "inner" / "__init__.py").write_text("")
    (root / "inner" / "b.py").write_text("def later():\n    from ..c import C\nB = 2\n")
    (root / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\nC = 3\n"
    )
    (root / "d.py").write_text("from .a import A\n")  # imports the circle, is no part of it
    graph = import_graph(root)
    assert graph["house.inner.b"] == {"house.c"} and graph["house.c"] == {"house.a"}
    assert import_circles(graph) == [["house.a", "house.c", "house.inner.b"]]
    (root / "c.py").write_text("C = 3\n")
    assert import_circles(import_graph(root)) == []


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
        "assert 'numpy_transformer.translator.huggingface' not in sys.modules\n"
        "print(nt.load_pretrained.__module__)"
    )
    module = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert module.strip() == "numpy_transformer.translator.huggingface.loading"


def test_the_readmes_map_names_every_module():
    """The README's map of the package (its tree of rooms) names every module's file: a room added
    without a line there is a room a reader cannot find."""
    readme = (PACKAGE.parent / "README.md").read_text()
    top = readme.index("├── functional.py")
    tree = readme[readme.rfind("```", 0, top) : readme.index("```", top)]
    unnamed = [
        str(path.relative_to(PACKAGE))
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "__init__.py" and path.name not in tree
    ]
    assert not unnamed, f"modules the README's map does not name: {unnamed}"
