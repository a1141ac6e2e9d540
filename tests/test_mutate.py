"""tools/mutate.py itself (not the mutation run, which is too slow for the suite): mutations are
located by a snippet found exactly once, and a lost snippet is a clear error naming the mutation."""

from __future__ import annotations

import pytest

from tools.mutate import FILES, MUTATIONS, TESTS, Mutation, SnippetError, apply

SOURCE = "def fee(hours):\n    return max(60, hours) * RATE\n"


def test_a_mutation_replaces_its_snippet():
    m = Mutation("billing", "no minimum", "max(60, hours)", "hours")
    assert apply(SOURCE, m) == "def fee(hours):\n    return hours * RATE\n"


@pytest.mark.parametrize("source, says", [
    ("def fee(hours):\n    return hours * RATE\n", "is no longer in optimizer/billing.py"),
    (SOURCE + SOURCE, "occurs 2 times in optimizer/billing.py"),
])
def test_a_snippet_not_found_exactly_once_names_the_mutation_and_the_file(source, says):
    m = Mutation("billing", "no minimum", "max(60, hours)", "hours")
    with pytest.raises(SnippetError, match="'no minimum'") as caught:
        apply(source, m)
    assert says in str(caught.value) and "tools/mutate.py" in str(caught.value)


def test_the_list_covers_every_module_the_issue_names_with_at_least_60_breaks():
    assert len(MUTATIONS) >= 60
    assert {m.module for m in MUTATIONS} == set(FILES) == set(TESTS)
    names = [(m.module, m.name) for m in MUTATIONS]
    assert len(set(names)) == len(names)
    assert all(m.find != m.replace for m in MUTATIONS)
