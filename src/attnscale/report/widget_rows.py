"""Real attention rows for the interactive figure: a few rows of q·k that the probe captured in the
bundled models (the result's ``rows``: the probe's ``rows`` module says which and why), read from the
probe's results as their chapters read them (:func:`attnscale.results.read_preferred`: this machine's
full run, else the reference shipped with attnscale). The report loads no model.

What the slider does to a real row (``widget.js`` computes it): a head of its own dimension D gets,
at the slider's d_k, the q·k and norms it would have if its components were iid, as the iid row's are
(q·k scaled by √(d_k/D), the squared norms by d_k/D); then the chosen rule applies exactly as to the
iid row, over the row's own keys. So under 1/√d_k a row is its model's own logits at every d_k (the
rule cancels the growth it assumes), and at d_k = D every rule sees the head's very q and k.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from attnscale import results
from attnscale.i18n import N_, _
from attnscale.report.experiments import RUNS
from attnscale.report.text import listed

# The bundled models' probes, in the order their rows are shown.
REAL_KINDS = ("probe/minilm", "probe/smollm2")
# Why a head was picked (rows.PICKS), as the widget names it.
PICK_LABELS = {
    "lowest": N_("lowest mean entropy"),
    "median": N_("median mean entropy"),
    "highest": N_("highest mean entropy"),
}
# How close the recorded logits must be to scale·q·k for a row to count as its model's own under
# 1/√d_k: both are rounded to 7 significant digits in the result.
OWN_RTOL = 1e-5


@dataclass
class RealRows:
    rows: list[dict] = field(default_factory=list)  # the widget's rows (widget_row), in REAL_KINDS order
    sources: list[str] = field(default_factory=list)  # per result read: its file and what run it is
    missing: list[str] = field(default_factory=list)  # the kinds with no result here at all
    lacking: list[str] = field(default_factory=list)  # the kinds whose result holds no usable rows


def _token(text: str) -> str:
    """A token as a reader reads it: byte-level BPE's space marker (Ġ) as the space it stands for."""
    return text.replace("Ġ", " ")


def widget_row(model: dict, block: dict, row: dict) -> dict:
    """One row as the widget takes it, from a probe result's ``model`` facts, its ``rows`` block and
    one of its rows. ``own``: under 1/√d_k its logits are the model's own (the layer's scale is
    1/√d_k, with no soft-cap, and the recorded logits are that scale times q·k: no bias)."""
    rule = model["scale_rules"][row["layer"]]
    qk = np.asarray(row["qk"], dtype=float)
    logits = np.asarray(row["logits"], dtype=float)
    if not (qk.shape == logits.shape == (len(row["keys"]),) == (len(row["k_norm2"]),)):
        raise ValueError(f"rows: layer {row['layer']} head {row['head']}: its arrays differ in length")
    own = (
        rule["rule"] == "1/sqrt(d_k)"
        and rule.get("softcap") is None
        and bool(np.allclose(logits, rule["value"] * qk, rtol=OWN_RTOL, atol=0.0))
    )
    tokens = block["tokens"]
    return {
        "model": str(model["name"]),
        "layer": int(row["layer"]),
        "head": int(row["head"]),
        "pick": _(PICK_LABELS[row["pick"]]),
        "d_k": int(rule["d_k"]),
        "own": own,
        "qk": qk.tolist(),
        "q_norm2": float(row["q_norm2"]),
        "k_norm2": [float(v) for v in row["k_norm2"]],
        "keys": [_token(tokens[j]) for j in row["keys"]],
        "query": _token(tokens[block["query"]]),
    }


def read_real_rows(root) -> RealRows:
    """The rows of :data:`REAL_KINDS`' results under ``root`` (or their references); a kind with no
    result is named in ``missing``, one whose result is unreadable or made before the probe recorded
    rows in ``lacking``."""
    real = RealRows()
    for kind in REAL_KINDS:
        try:
            env = results.read_preferred(kind, root)
            block = env.data.get("rows")
            found = [widget_row(env.data["model"], block, row) for row in block["rows"]] if block else []
        except results.ResultMissing:
            real.missing.append(kind)
            continue
        except (results.ResultError, KeyError, TypeError, ValueError, IndexError):  # malformed: its chapter says why
            found = []
        if not found:
            real.lacking.append(kind)
            continue
        real.rows += found
        real.sources.append(_("{file} ({run})", file=results.result_path(kind, "").as_posix(), run=_(RUNS[env.origin])))
    return real


def rows_note(real: RealRows) -> str:
    """The sentences under the real rows: where they come from, how they were picked and what the
    slider does to them; which bundled probe has none, with the command that makes or records them."""
    words = []
    if real.rows:
        words.append(
            _(
                "Real rows, from {sources}: in each model, one query (the last token of the probe's first sentence that is not a special token) in its heads of lowest, median and highest mean entropy over the probe's text.",
                sources=listed(real.sources),
            )
        )
        words.append(
            _(
                "Under 1/√d_k each row is its model's own logits, at every d_k. Under another rule, its q·k and norms grow with d_k as the iid row's do (q·k × √(d_k/D), D its head's d_k) and the rule applies as above; at d_k = D, to the head's very q and k."
            )
        )
    if real.missing:
        words.append(
            _(
                "No real rows from {kinds}: not run here yet ({commands}).",
                kinds=listed(list(real.missing)),
                commands=listed([results.KINDS[kind].description for kind in real.missing]),
            )
        )
    if real.lacking:
        commands = [results.KINDS[kind].description for kind in real.lacking]
        words.append(
            _(
                "No captured rows for {kinds}: the result shown was made before the probe recorded them, or cannot be read; rerun {commands} to record them.",
                kinds=listed(list(real.lacking)),
                commands=listed(commands),
            )
        )
    return " ".join(words)
