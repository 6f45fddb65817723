"""docs/architecture.md against the code: every module:function of its reading path exists,
every module of the package and the benchmarks has its row in the modules table, and the
worker graph reads top-down in short steps."""

from __future__ import annotations

import ast
import functools
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
READING_PATH = DOC[DOC.index("## Reading path"):DOC.index("## Layers")]
NAMES = sorted(set(re.findall(r"`((?:a3c_graph|benchmarks)/[\w/]+\.py):([\w.]+)`",
                              READING_PATH.replace("\n", " "))))


def test_the_reading_path_names_the_whole_algorithm():
    assert len(NAMES) >= 25, NAMES
    steps = re.findall(r"^\d+\. \*\*(.+?)\*\*", READING_PATH, flags=re.M)
    assert steps[0] == "A worker task starts" and "Restarts" in steps, steps


@pytest.mark.parametrize("path, name", NAMES, ids=[f"{p}:{n}" for p, n in NAMES])
def test_every_name_of_the_reading_path_exists(path, name):
    module = importlib.import_module(path[:-len(".py")].replace("/", "."))
    found = module
    for part in name.split("."):
        assert hasattr(found, part), f"{path} has no {name}: docs/architecture.md is stale"
        found = getattr(found, part)


def test_every_module_has_its_row_in_the_modules_table():
    rows = set(re.findall(r"^\| `([\w/]+\.py)` \|", DOC, flags=re.M))
    modules = {str(path.relative_to(REPO)) for root in ("a3c_graph", "benchmarks")
               for path in (REPO / root).rglob("*.py")
               if path.name not in ("__init__.py", "__main__.py")
               and ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))}
    assert modules - rows == set(), "modules without a row in docs/architecture.md"
    assert rows - modules == set(), "rows of modules that are gone"


def test_the_worker_graph_is_one_short_function_of_named_steps():
    source = (REPO / "a3c_graph" / "distributed" / "worker_graph.py").read_text(encoding="utf-8")
    functions = {node.name: node for node in ast.walk(ast.parse(source))
                 if isinstance(node, ast.FunctionDef)}
    for name, node in functions.items():
        lines = node.end_lineno - node.lineno + 1
        assert lines <= 60, f"{name} is {lines} lines"
    called = {node.func.id for node in ast.walk(functions["build_worker_graph"])
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert {"build_globals", "build_actors_and_queue", "build_learner", "exchange_with_ps",
            "build_sync"} <= called


# Where the heavy imports load (docs/architecture.md): a module that uses TF imports it at its
# top; code that runs before TF may load imports such a module inside the function that
# crosses over, once process_env has set TF's environment. The only other imports inside
# functions: the Python API's (each function imports what it needs, so `import a3c_graph`
# stays light), gymnasium where the config must make an env, and the optional packages
# where an env or a GIF first needs them.
OPTIONAL = {"ale_py", "minatar", "moviepy"}
LIGHT_ON_IMPORT = {"a3c_graph/api.py": None, "a3c_graph/core/config.py": "gymnasium"}


@functools.cache
def _loads_tensorflow(module: str) -> bool:
    """Whether importing `module` (of this repository) imports TF: TF at its top, or a
    module that does."""
    path = REPO / (module.replace(".", "/") + ".py")
    if not path.is_file():
        path = REPO / module.replace(".", "/") / "__init__.py"
        if not path.is_file():
            return False
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        names = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else
                 [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
                 if isinstance(node, ast.ImportFrom) and node.module else [])
        if any(name == "tensorflow" or name.startswith("tensorflow.")
               or name.startswith("a3c_graph.") and _loads_tensorflow(name) for name in names):
            return True
    return False


def _imports_inside_functions(path: Path) -> list[tuple[str, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import):
                    found += [(f"{path.relative_to(REPO)}:{inner.lineno}", alias.name)
                              for alias in inner.names]
                elif isinstance(inner, ast.ImportFrom):
                    found += [(f"{path.relative_to(REPO)}:{inner.lineno}",
                               f"{inner.module}.{alias.name}") for alias in inner.names]
    return found


def _deferred_as_documented(place: str, module: str) -> bool:
    if module.split(".")[0] in OPTIONAL:
        return True
    path = place.split(":")[0]
    if path in LIGHT_ON_IMPORT and LIGHT_ON_IMPORT[path] in (None, module):
        return True
    if module == "tensorflow":  # TF itself: only where its environment is set first
        return place.startswith("a3c_graph/system/process_env.py:")
    return _loads_tensorflow(module) or _loads_tensorflow(module.rsplit(".", 1)[0])


def test_imports_stand_at_the_top_but_where_tensorflow_or_an_optional_package_loads():
    inside = {(place, module) for path in sorted((REPO / "a3c_graph").rglob("*.py"))
              for place, module in _imports_inside_functions(path)}
    assert sorted(pair for pair in inside if not _deferred_as_documented(*pair)) == []


def test_the_commands_check_their_flags_before_tensorflow_loads():
    modules = ["a3c_graph", "a3c_graph.api", "a3c_graph.worker", "a3c_graph.launch",
               "a3c_graph.evaluate", "a3c_graph.export"]
    code = (f"import sys, {', '.join(modules)}; "
            "print('tensorflow' in sys.modules)")
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "False"


def test_no_function_of_the_package_is_over_60_lines():
    long = [f"{path.relative_to(REPO)}:{node.name} ({node.end_lineno - node.lineno + 1})"
            for path in sorted((REPO / "a3c_graph").rglob("*.py"))
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > 60]
    assert long == []
