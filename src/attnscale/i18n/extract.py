"""The messages of the source and the checks of a catalog against them (xgettext's and msgfmt's
jobs for this package), and the update of a catalog after the English changed (msgmerge's):

    python -m attnscale.i18n.extract          # rewrite zh.po: new messages added untranslated,
                                              # translations kept, unused entries dropped

A message is the literal first argument of a call to ``_`` or ``N_``. Anything else there that
builds a string (an f-string, ``+``, ``%``, ``.format``) is a :class:`Problem`: translators and grep
need whole sentences. So is a second positional argument to ``_``: the message is its only one (its
language is bound by :func:`attnscale.i18n.language`, never passed). A module that imports ``_`` may not assign the name ``_`` (``for _ in …``
would silently replace the translation function).
"""

from __future__ import annotations

import ast
import string
import sys
from dataclasses import dataclass
from pathlib import Path

import polib

PACKAGE = Path(__file__).resolve().parents[1]  # src/attnscale
CALLS = ("_", "N_")
BUILT = (ast.JoinedStr, ast.BinOp)


@dataclass(frozen=True)
class Found:
    """One use of a message: (context, English) and where it is."""

    context: str | None
    msgid: str
    path: str
    line: int

    @property
    def key(self) -> tuple[str | None, str]:
        return self.context, self.msgid


@dataclass(frozen=True)
class Problem:
    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def placeholders(text: str) -> set[str]:
    """The names of ``text``'s ``{placeholders}`` (``{x:g}``, ``{x[0]}`` and ``{x.y}`` are all ``x``);
    a lone brace raises :class:`ValueError`."""
    names = set()
    for _literal, name, _spec, _conv in string.Formatter().parse(text):
        if name is not None:
            names.add(name.split(".")[0].split("[")[0])
    return names


def _context(call: ast.Call, at: tuple[str, int], problems: list) -> str | None:
    args = call.args[1:] if call.func.id == "N_" else []
    given = [kw.value for kw in call.keywords if kw.arg == "msgctxt"] + args
    if not given:
        return None
    if isinstance(given[0], ast.Constant) and isinstance(given[0].value, str):
        return given[0].value
    problems.append(Problem(*at, "a context that is not a literal string"))
    return None


def _imports_underscore(tree: ast.Module) -> bool:
    return any(
        isinstance(node, ast.ImportFrom) and any(a.name == "_" and a.asname is None for a in node.names)
        for node in ast.walk(tree)
    )


def scan(path: Path, root: Path = PACKAGE) -> tuple[list[Found], list[Problem]]:
    """The messages of one module, and what is wrong with how it uses them."""
    rel = path.relative_to(root.parent).as_posix()
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
    found, problems = [], []
    uses_underscore = _imports_underscore(tree)
    for node in ast.walk(tree):
        if uses_underscore and isinstance(node, ast.Name) and node.id == "_" and isinstance(node.ctx, ast.Store):
            problems.append(Problem(rel, node.lineno, "assigns the name _, which is the translation function here"))
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in CALLS):
            continue
        if node.func.id == "_" and not uses_underscore:
            continue  # some other function called _
        at = (rel, node.lineno)
        if not node.args:
            problems.append(Problem(*at, f"{node.func.id}() without a message"))
            continue
        if node.func.id == "_" and len(node.args) > 1:
            problems.append(Problem(*at, "_() takes the message alone: its language is bound by i18n.language()"))
        first = node.args[0]
        context = _context(node, at, problems)
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            try:
                placeholders(first.value)
            except ValueError as err:
                problems.append(Problem(*at, f"{first.value!r}: {err} (a literal brace is written {{{{ or }}}})"))
            found.append((node.lineno, node.col_offset, Found(context, first.value, *at)))
        elif isinstance(first, BUILT) or (
            isinstance(first, ast.Call)
            and isinstance(first.func, ast.Attribute)
            and first.func.attr in ("format", "join")
        ):
            problems.append(
                Problem(
                    *at,
                    f"{node.func.id}() of a message built at run time "
                    "(write the whole sentence, with named placeholders)",
                )
            )
        elif node.func.id == "N_":
            problems.append(Problem(*at, "N_() marks a literal message, got an expression"))
    return [f for *_at, f in sorted(found, key=lambda x: x[:2])], sorted(set(problems), key=lambda p: p.line)


def scan_package(root: Path = PACKAGE) -> tuple[list[Found], list[Problem]]:
    """Every message of the package's modules, in file and line order, and every problem."""
    found, problems = [], []
    for path in sorted(root.rglob("*.py")):
        f, p = scan(path, root)
        found += f
        problems += p
    return found, problems


def catalog_path(lang: str, root: Path = PACKAGE) -> Path:
    return root / "i18n" / f"{lang}.po"


def check(po: polib.POFile, found: list[Found]) -> list[str]:
    """What is wrong with the catalog ``po`` for the messages ``found``: a message without a
    translation, an entry no code uses, a translation whose placeholders differ from its English."""
    used = {f.key: f for f in found}
    entries = {(e.msgctxt or None, e.msgid): e for e in po if not e.obsolete}
    out = []
    for key, f in used.items():
        e = entries.get(key)
        if e is None or not e.msgstr or "fuzzy" in e.flags:
            out.append(
                f"{f.path}:{f.line}: no translation of {f.msgid!r}" + (f" (context {f.context!r})" if f.context else "")
            )
    for key, e in entries.items():
        if key not in used:
            out.append(f"unused entry {e.msgid!r}" + (f" (context {e.msgctxt!r})" if e.msgctxt else ""))
        elif e.msgstr:
            try:
                theirs = placeholders(e.msgstr)
            except ValueError as err:
                out.append(f"{e.msgid!r}: its translation has {err}")
                continue
            if theirs != placeholders(e.msgid):
                out.append(
                    f"{e.msgid!r}: placeholders {sorted(placeholders(e.msgid))}, its translation has {sorted(theirs)}"
                )
    return out


def updated(po: polib.POFile, found: list[Found]) -> polib.POFile:
    """A catalog with one entry per message of ``found`` in source order, each keeping the
    translation ``po`` has for it (new ones untranslated), with its source references."""
    old = {(e.msgctxt or None, e.msgid): e for e in po if not e.obsolete}
    out = polib.POFile(wrapwidth=0)
    out.metadata = po.metadata or {
        "Project-Id-Version": "attnscale",
        "Language": "zh_CN",
        "MIME-Version": "1.0",
        "Content-Type": "text/plain; charset=UTF-8",
        "Content-Transfer-Encoding": "8bit",
    }
    by_key: dict = {}
    for f in found:
        entry = by_key.get(f.key)
        if entry is None:
            before = old.get(f.key)
            fuzzy = ["fuzzy"] if before is not None and "fuzzy" in before.flags else []  # still to be checked
            entry = polib.POEntry(
                msgid=f.msgid,
                msgstr=before.msgstr if before else "",
                msgctxt=f.context,
                flags=fuzzy + (["python-brace-format"] if placeholders(f.msgid) else []),
            )
            by_key[f.key] = entry
            out.append(entry)
        entry.occurrences.append((f.path, str(f.line)))
    return out


def main(argv: list[str] | None = None) -> int:
    found, problems = scan_package()
    for p in problems:
        print(p, file=sys.stderr)
    path = catalog_path("zh")
    po = polib.pofile(str(path), wrapwidth=0) if path.exists() else polib.POFile()
    new = updated(po, found)
    new.save(str(path))
    missing = sum(1 for e in new if not e.msgstr)
    print(f"{path}: {len(new)} messages, {missing} without a translation", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
