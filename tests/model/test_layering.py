"""The two houses: the model (numpy_transformer) never imports the translation toolkit
(numpy_transformer.translator), and importing the package loads the model alone."""

import ast
import subprocess
import sys
from pathlib import Path

import numpy_transformer as nt

PACKAGE = Path(nt.__file__).parent


# the package's doors to the toolkit: ``python -m numpy_transformer`` runs the command line, and
# the package's __getattr__ imports ``load_pretrained`` on first use (checked below)
DOORS = {"__main__.py", "__init__.py"}


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


def test_the_model_never_imports_the_toolkit():
    model_files = [p for p in PACKAGE.rglob("*.py") if "translator" not in p.relative_to(PACKAGE).parts]
    assert len(model_files) > 10
    offenders = {
        str(path.relative_to(PACKAGE)): name
        for path in model_files
        for name in imported_modules(path, top_level_only=path.name in DOORS)
        if name.startswith("numpy_transformer.translator") and str(path.relative_to(PACKAGE)) != "__main__.py"
    }
    assert offenders == {}


def test_the_layering_check_sees_relative_imports(tmp_path):
    """The check above resolves ``from .translator.data import X`` and ``from ..translator import Y``."""
    path = PACKAGE / "kernels" / "cpu.py"
    names = imported_modules(path)
    assert "numpy_transformer.functional" in names and "numpy_transformer.machine" in names


def test_importing_the_package_loads_the_model_alone():
    code = (
        "import sys, numpy_transformer\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('numpy_transformer.translator'))))"
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
