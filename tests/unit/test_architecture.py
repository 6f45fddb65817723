"""docs/architecture.md against the code: every module:function of its reading path exists,
every module of the package and the benchmarks has its row in the modules table, and the
worker graph reads top-down in short steps."""

from __future__ import annotations

import ast
import importlib
import re
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
