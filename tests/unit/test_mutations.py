"""The mutation table of docs/testing.md stays true to the code, without running a mutation:
every snippet still occurs exactly once where it says, and the docs show MUTATIONS as they are.
(Running them: python -m tests.support.mutations.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.mutations import MUTATIONS, REPO, mutated, table


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_each_mutation_still_applies_to_its_file(mutation):
    text = (REPO / mutation.path).read_text()
    assert mutated(text, mutation) != text
    path, _, name = mutation.test.partition("::")
    assert f"def {name.split('[')[0]}(" in (REPO / path).read_text(), mutation.test


def test_docs_show_the_table_of_the_mutations():
    assert table() in Path(REPO / "docs" / "testing.md").read_text()
