"""The examples in docstrings are tests: run them on the installed `rentopt` modules.

pytest's --doctest-modules would import optimizer/*.py a second time under the folder's name
(`optimizer.billing`), next to the installed `rentopt.optimizer.billing`; this runs each
installed module's doctests instead.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import rentopt


def _modules() -> list[str]:
    found = []
    for info in pkgutil.walk_packages(rentopt.__path__, "rentopt."):
        found.append(info.name)
    for package in ("rentopt.optimizer", "rentopt.providers"):
        module = importlib.import_module(package)
        found += [info.name for info in pkgutil.walk_packages(module.__path__, package + ".")]
    return sorted(set(found) - {"rentopt.__main__"})


MODULES = _modules()


def test_every_part_of_the_package_is_found():
    assert {"rentopt.optimizer.billing", "rentopt.providers.base"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, report=True)
    assert result.failed == 0, f"{result.failed} of {result.attempted} doctest examples failed in {name}"
