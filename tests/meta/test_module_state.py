"""attnscale.torch keeps its process-wide state in named places only: no module rebinds a global
(`global`), and a module-level container is changed at run time only where it is the state's one
owner (the capture's registry; the kernel library's load-once record, which compiled graphs read).
Everything else at module level is a constant: a table, never written after import."""

from __future__ import annotations

import ast
from pathlib import Path

import attnscale.torch

TORCH = Path(attnscale.torch.__file__).parent
# module (relative to attnscale/torch) -> its one mutable global, and why it is there
OWNED_STATE = {
    "capture/registry.py": "REGISTRY",  # the captures alive, rebound names, ops, compiled call sites
    "ext/__init__.py": "_state",  # the fused kernel, built and loaded at most once per process
}
MUTATORS = {"append", "extend", "insert", "pop", "popitem", "clear", "update", "setdefault", "add", "discard", "remove"}


def _module_containers(tree: ast.Module) -> set[str]:
    """Names bound at module level to a dict, list or set (literal, comprehension or call)."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            value = node.value
            container = isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp))
            called = isinstance(value, ast.Call) and getattr(value.func, "id", None) in {"dict", "list", "set"}
            if container or called:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names - {"__all__"}


def _changed_in_functions(tree: ast.Module, names: set[str]) -> set[str]:
    """Which of ``names`` a function body writes into: item assignment or deletion, or a mutating method."""
    changed = set()
    for func in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        for node in ast.walk(func):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
                targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id in names:
                        changed.add(t.value.id)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = node.func.value
                if isinstance(owner, ast.Name) and owner.id in names and node.func.attr in MUTATORS:
                    changed.add(owner.id)
    return changed


def _offences() -> list[str]:
    found = []
    for path in sorted(TORCH.rglob("*.py")):
        where = path.relative_to(TORCH).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found += [
            f"{where}:{n.lineno}: global {', '.join(n.names)}" for n in ast.walk(tree) if isinstance(n, ast.Global)
        ]
        changed = _changed_in_functions(tree, _module_containers(tree)) - {OWNED_STATE.get(where)}
        found += [f"{where}: module-level {name} is changed at run time" for name in sorted(changed)]
    return found


def test_no_module_of_attnscale_torch_keeps_state_outside_its_named_owners():
    assert _offences() == [], "process-wide state belongs to the capture's registry (or the kernel's load record)"


def test_the_check_sees_a_module_dict_written_by_a_function(tmp_path):
    tree = ast.parse("CACHE = {}\nTABLE = {'a': 1}\n\ndef f(k):\n    CACHE[k] = 1\n    return TABLE[k]\n")
    assert _changed_in_functions(tree, _module_containers(tree)) == {"CACHE"}
    tree = ast.parse("SEEN = []\n\ndef g(x):\n    SEEN.append(x)\n")
    assert _changed_in_functions(tree, _module_containers(tree)) == {"SEEN"}
