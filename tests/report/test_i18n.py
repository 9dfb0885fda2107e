"""The one text mechanism (attnscale.i18n): English inline, Chinese in i18n/zh.po.

The catalog checks are the ones msgfmt --check-format and xgettext would make, run on the package
itself: every message of the source has its Chinese, every entry is used, the placeholders agree,
no message is built at run time. Then the same checks are shown to fail on broken copies."""

from __future__ import annotations

import shutil
import subprocess
import textwrap
import threading

import polib
import pytest

from attnscale.i18n import LANGS, N_, MissingTranslation, TextError, _, catalog, check_lang, current_lang, language
from attnscale.i18n.extract import PACKAGE, Found, catalog_path, check, placeholders, scan, scan_package, updated


@pytest.fixture(scope="module")
def package_messages():
    return scan_package()


def test_the_source_builds_no_message_at_run_time(package_messages):
    _found, problems = package_messages
    assert not problems, "\n".join(map(str, problems))


def test_every_message_has_its_chinese_and_every_entry_is_used(package_messages):
    found, _problems = package_messages
    assert found
    wrong = check(polib.pofile(str(catalog_path("zh"))), found)
    assert not wrong, "\n".join(wrong[:40]) + (
        "\n(run python -m attnscale.i18n.extract, then translate)" if wrong else ""
    )


@pytest.mark.skipif(shutil.which("msgfmt") is None, reason="GNU gettext's msgfmt is not installed")
def test_msgfmt_checks_the_catalog(tmp_path):
    done = subprocess.run(
        ["msgfmt", "--check-format", "--check-domain", "-o", str(tmp_path / "zh.mo"), str(catalog_path("zh"))],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.skipif(shutil.which("msgfmt") is None, reason="GNU gettext's msgfmt is not installed")
def test_msgfmt_refuses_a_translation_with_other_placeholders(tmp_path):
    po = polib.POFile()
    po.metadata = {"Content-Type": "text/plain; charset=UTF-8"}
    po.append(polib.POEntry(msgid="At d_k = {d_k}", msgstr="当 d_k = {n}", flags=["python-brace-format"]))
    po.save(str(tmp_path / "bad.po"))
    done = subprocess.run(
        ["msgfmt", "--check-format", "-o", "/dev/null", str(tmp_path / "bad.po")], capture_output=True, text=True
    )
    assert done.returncode != 0


def test_underscore_fills_placeholders_in_both_languages():
    en = next(msgid for (ctx, msgid), zh in catalog("zh").items() if ctx is None and placeholders(msgid))
    values = {name: 7 for name in placeholders(en)}
    assert _(en, **values) == en.format(**values)
    zh = catalog("zh")[(None, en)]
    with language("zh"):
        assert _(en, **values) == zh.format(**values)


def test_a_message_without_chinese_is_an_error_not_english():
    with pytest.raises(MissingTranslation, match="no zh translation of 'not a message of attnscale'"), language("zh"):
        _("not a message of attnscale")
    assert _("not a message of attnscale") == "not a message of attnscale"


def test_a_placeholder_without_a_value_names_it():
    with pytest.raises(TextError, match=r"placeholder \{d_k\}"):
        _("At d_k = {d_k}")


def test_an_unknown_language_is_refused():
    with pytest.raises(ValueError, match="lang: expected one of en, zh, got 'fr'"), language("fr"):
        pass
    assert check_lang("zh") == "zh" and LANGS == ("en", "zh")
    assert current_lang() == "en"  # the refused binding left nothing bound


def test_a_binding_nests_and_gives_the_language_before_back():
    word = next(msgid for (ctx, msgid) in catalog("zh") if ctx is None and not placeholders(msgid))
    assert current_lang() == "en" and _(word) == word  # outside any binding: English, the source
    with language("zh"):
        assert _(word) == catalog("zh")[(None, word)]
        with language("en"):
            assert _(word) == word
        assert current_lang() == "zh"
        with pytest.raises(RuntimeError), language("en"):  # left by an error: given back all the same
            raise RuntimeError
        assert current_lang() == "zh"
    assert current_lang() == "en"


def test_each_thread_sees_its_own_binding():
    seen, both_bound = {}, threading.Barrier(2)

    def build(lang):
        with language(lang):
            both_bound.wait()  # both bindings in force at once
            seen[lang] = current_lang()

    threads = [threading.Thread(target=build, args=(lang,)) for lang in LANGS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"en": "en", "zh": "zh"} and current_lang() == "en"


def test_a_context_marked_by_N_travels_with_the_message():
    contexted = [(ctx, msgid) for ctx, msgid in catalog("zh") if ctx is not None]
    if not contexted:
        pytest.skip("no message with a msgctxt in the catalog")
    ctx, msgid = contexted[0]
    marked = N_(msgid, ctx)
    assert marked == msgid
    with language("zh"):
        assert _(marked) == catalog("zh")[(ctx, msgid)]
    assert N_("plain") == "plain" and type(N_("plain")) is str


def _module(tmp_path, source: str):
    root = tmp_path / "pkg"
    root.mkdir(exist_ok=True)
    path = root / "m.py"
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return scan(path, root)


@pytest.mark.parametrize(
    "call, what",
    [
        ('_(f"At d_k = {d_k}")', "built at run time"),
        ('_("At d_k = " + str(d_k))', "built at run time"),
        ('_("At d_k = %s" % d_k)', "built at run time"),
        ('_("At {x}".format(x=1))', "built at run time"),
        ('_("a brace { alone")', "literal brace"),
        ("N_(name)", "marks a literal message"),
        ('_("x", msgctxt=name)', "context that is not a literal"),
        ('_("x", lang)', "takes the message alone"),
    ],
)
def test_the_extraction_refuses_messages_built_at_run_time(tmp_path, call, what):
    _found, problems = _module(
        tmp_path, f"from attnscale.i18n import _, N_\n\ndef f(lang, d_k, name):\n    return {call}\n"
    )
    assert any(what in p.what for p in problems), problems


def test_the_extraction_refuses_a_module_that_rebinds_underscore(tmp_path):
    _found, problems = _module(tmp_path, "from attnscale.i18n import _\n\nfor _ in range(3):\n    pass\n")
    assert [p.line for p in problems] == [3]


def test_the_extraction_finds_messages_and_their_contexts(tmp_path):
    found, problems = _module(
        tmp_path,
        """\
        from attnscale.i18n import _, N_

        WORDS = {"a": N_("learns"), "b": N_("fails", "training")}

        def f(key):
            return _("At d_k = {d_k}", d_k=1) + _(WORDS[key]) + _("x", msgctxt="lm")
        """,
    )
    assert not problems
    assert [(f.context, f.msgid, f.line) for f in found] == [
        (None, "learns", 3),
        ("training", "fails", 3),
        (None, "At d_k = {d_k}", 6),
        ("lm", "x", 6),
    ]


def test_the_catalog_check_names_each_kind_of_fault():
    po = polib.POFile()
    po.append(polib.POEntry(msgid="At d_k = {d_k}", msgstr="当 d_k = {n}"))
    po.append(polib.POEntry(msgid="never used", msgstr="从未使用"))
    found = [Found(None, "At d_k = {d_k}", "m.py", 1), Found(None, "new sentence", "m.py", 2)]
    wrong = check(po, found)
    assert any("no translation of 'new sentence'" in w for w in wrong)
    assert any("unused entry 'never used'" in w for w in wrong)
    assert any("placeholders ['d_k'], its translation has ['n']" in w for w in wrong)


def test_the_update_keeps_a_fuzzy_translation_fuzzy():
    po = polib.POFile()
    po.append(polib.POEntry(msgid="kept {x}", msgstr="保留 {x}", flags=["fuzzy"]))
    new = updated(po, [Found(None, "kept {x}", "a.py", 3)])
    assert new[0].flags == ["fuzzy", "python-brace-format"]
    assert check(new, [Found(None, "kept {x}", "a.py", 3)]) == ["a.py:3: no translation of 'kept {x}'"]


def test_the_update_keeps_translations_and_adds_new_messages_untranslated():
    po = polib.POFile()
    po.append(polib.POEntry(msgid="kept", msgstr="保留"))
    po.append(polib.POEntry(msgid="dropped", msgstr="删去"))
    new = updated(
        po, [Found(None, "kept", "a.py", 3), Found(None, "new {x}", "a.py", 4), Found(None, "kept", "b.py", 1)]
    )
    assert [(e.msgid, e.msgstr, e.occurrences, e.flags) for e in new] == [
        ("kept", "保留", [("a.py", "3"), ("b.py", "1")], []),
        ("new {x}", "", [("a.py", "4")], ["python-brace-format"]),
    ]


def test_the_package_is_scanned_where_it_lies():
    assert (PACKAGE / "i18n" / "__init__.py").is_file()
