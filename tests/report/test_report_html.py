"""The report's shared HTML blocks (report.html): every chapter's paragraphs, notes, lists and error
boxes come from these, so they escape what they are given and keep one markup."""

from attnscale.report.html import bullets, error_box, note, para


def test_prose_blocks_escape_their_text():
    assert para("a < b & c") == "<p>a &lt; b &amp; c</p>"
    assert note('"quoted"') == '<p class="note">&quot;quoted&quot;</p>'
    assert bullets(s for s in ("x<y", "z")) == "<ul><li>x&lt;y</li><li>z</li></ul>"
    assert bullets([]) == "<ul></ul>"


def test_an_error_box_names_what_failed_and_the_error():
    assert error_box("Check <failed>") == '<div class="error-box" role="alert"><p>Check &lt;failed&gt;</p></div>'
    box = error_box("This figure could not be drawn:", "jacobian", KeyError("by_n"))
    assert box == (
        '<div class="error-box" role="alert"><p>This figure could not be drawn: <code>jacobian</code></p>'
        "<pre>KeyError: &#x27;by_n&#x27;</pre></div>"
    )
    assert "<code>" not in error_box("chapter failed", err=ValueError("x")) and "ValueError: x" in error_box(
        "chapter failed", err=ValueError("x")
    )
