"""The beyond chapter's QK-norm figure: entropy and largest weight of softmax rows of RMS-normalised
q, k against d, with scaling 1 and 1/√d (drawn from ``VerifyReport.data["qk_norm"]``, claims S8.6–S8.8)."""

from __future__ import annotations

import math

from attnscale.i18n import _
from attnscale.report.figure_parts import dk_axis, errorbars
from attnscale.report.plotting import REFERENCE, SCALED, UNSCALED, style


def qk_norm(data: dict):
    """Two panels against d: mean entropy (bits, with log₂ T, the uniform row's, dashed) and mean largest
    weight, each with its interval, for scaling 1 and 1/√d.

    data: {"T": int, "d": [...], "scaling_1": {str(d): {"entropy_bits": [v, lo, hi], "max_weight": [v, lo, hi]}},
    "scaling_sqrt": {...}}
    """
    ds = data["d"]
    with style() as plt:
        fig, axes = plt.subplots(1, 2, figsize=(6.4, 3.0), constrained_layout=True)
        for ax, figure, label in (
            (axes[0], "entropy_bits", _("mean entropy (bits)")),
            (axes[1], "max_weight", _("mean largest weight")),
        ):
            for key, color, marker, name in (
                ("scaling_1", UNSCALED, "o", _("scaling 1")),
                ("scaling_sqrt", SCALED, "s", _("scaling 1/√d")),
            ):
                v, lo, hi = zip(*(data[key][str(d)][figure] for d in ds))
                errorbars(ax, ds, v, lo, hi, color, name, marker)
                ax.plot(ds, v, color=color, lw=1.2)
            dk_axis(ax, ds)
            ax.set_xlabel("d")
            ax.set_ylabel(label)
        axes[0].axhline(math.log2(data["T"]), color=REFERENCE, ls="--", lw=1, label=_("uniform row: log₂ T"))
        axes[0].set_ylim(bottom=0)
        axes[1].set_ylim(0, 1.02)
        axes[0].legend(loc="center right", fontsize="small")
        return fig
