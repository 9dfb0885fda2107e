"""Every module of attnscale can be imported by its name: no package attribute hides a submodule.

``import attnscale.torch.monitor`` must give the module, and ``attnscale.torch.monitor`` after it
the same module: a package that re-exported a function or class under a submodule's name would
make the attribute and the module two different things under one name."""

import importlib
import pkgutil
import sys

import pytest

import attnscale


def _packages():
    names = ["attnscale"] + [
        m.name
        for m in pkgutil.walk_packages(attnscale.__path__, prefix="attnscale.", onerror=lambda _: None)
        if m.ispkg
    ]
    return sorted(names)


@pytest.mark.parametrize("package_name", _packages())
def test_no_attribute_shadows_a_submodule(package_name):
    package = importlib.import_module(package_name)
    shadowed = []
    for sub in pkgutil.iter_modules(package.__path__):
        if sub.name == "__main__":  # runs the CLI when imported
            continue
        full = f"{package_name}.{sub.name}"
        try:
            importlib.import_module(full)
        except ImportError:  # an optional dependency missing: its own tests say so
            continue
        if getattr(package, sub.name) is not sys.modules[full]:
            shadowed.append(f"{full} (the attribute is {type(getattr(package, sub.name)).__name__})")
    assert not shadowed, f"package attributes named like a submodule but not that module: {shadowed}"


def test_the_check_sees_a_shadowed_module(monkeypatch):
    """The check above fails where it should: a function put in place of attnscale.torch.scales."""
    import attnscale.torch

    monkeypatch.setattr(attnscale.torch, "scales", lambda: None)
    with pytest.raises(AssertionError, match=r"attnscale\.torch\.scales"):
        test_no_attribute_shadows_a_submodule("attnscale.torch")
