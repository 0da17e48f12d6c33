"""Issue 9's "filterwarnings = error for the project's own warnings", checked for real.

pyproject.toml's [tool.pytest.ini_options] turns UserWarning and DeprecationWarning into
errors when Python attributes them to a module named gptcore.* or explorer.*. A filter
with a typo (a wrong module regex, a misspelt category, a missing colon) is silently
ignored, so the only honest check is to raise a warning from code that Python attributes
to one of our modules and see it become an exception under this very configuration.

How attribution works: `warnings.warn` names the module from the calling frame's
`__name__` (stacklevel=1). Running a statement in a namespace whose `__name__` is a module
of ours is exactly what happens when that module's own code calls `warnings.warn`.
"""
from __future__ import annotations

import importlib
import warnings

import pytest

OURS = ["gptcore", "gptcore.io.loading", "gptcore.interp.probes.attention", "explorer.session.core",
        pytest.param("explorer.controllers.attention", marks=pytest.mark.qt)]  # a controller imports Qt


def warn_from(module_name: str, category: type[Warning]) -> None:
    """Call warnings.warn from code that Python attributes to `module_name`."""
    code = compile(f"import warnings\nwarnings.warn('raised inside {module_name}', {category.__name__})",
                   f"<{module_name}>", "exec")
    exec(code, {"__name__": module_name})  # noqa: S102 - a fixed statement, no input


@pytest.mark.parametrize("category", [UserWarning, DeprecationWarning])
@pytest.mark.parametrize("module_name", OURS)
def test_fault_our_own_warnings_are_errors_under_pytest(module_name, category):
    importlib.import_module(module_name)  # a real module of ours
    with pytest.raises(category, match=f"raised inside {module_name}"):
        warn_from(module_name, category)


@pytest.mark.parametrize("module_name", ["transformers.modeling_utils", "gptcore_fork", "torch.nn"])
def test_fault_other_packages_warnings_stay_warnings(module_name):
    """Only our namespace escalates: a dependency's warning must not fail our tests
    (and `gptcore_fork` checks the filter is anchored at the package, not a prefix)."""
    with warnings.catch_warnings(record=True) as caught:  # keeps the active filters, records output
        warn_from(module_name, UserWarning)
    assert [str(w.message) for w in caught] and all(w.category is UserWarning for w in caught)


def test_the_filters_come_from_pyproject(pytestconfig):
    lines = pytestconfig.getini("filterwarnings")
    for category in ("UserWarning", "DeprecationWarning"):
        for package in ("gptcore", "explorer"):
            assert f"error::{category}:{package}(\\.|$)" in lines, (category, package, lines)
