"""Hand-made report data (the verification's figure blocks and claims, with numbers no estimator
would produce, so a figure or sentence that recomputes instead of showing is caught), writing it as
`attnscale verify` does, and the rule a figure's text is held to on a phone."""

from __future__ import annotations

import math

from attnscale import results
from attnscale.claims.result import VERDICTS

D_KS = [1, 4, 16, 64, 256]


def fake_data() -> dict:
    """Every figure block, in the shapes the verification engine writes, with made-up numbers that
    no estimator would produce (so a figure that recomputes instead of plotting is caught)."""

    def fam(f):
        return {
            "d_k": D_KS,
            "estimate": [d * f for d in D_KS],
            "ci_low": [d * f * 0.9 for d in D_KS],
            "ci_high": [d * f * 1.1 for d in D_KS],
            "n_samples": [1000] * 5,
            "converged": [True] * 5,
            "scaled": {"estimate": [f] * 5, "ci_low": [f - 0.05] * 5, "ci_high": [f + 0.05] * 5},
        }

    hist = {}
    for d, counts in ((4, [1, 5, 9, 5, 1]), (64, [2, 6, 7, 6, 2]), (512, [3, 5, 6, 5, 3])):
        edges = [-2.5 * math.sqrt(d) + i * math.sqrt(d) for i in range(6)]
        hist[str(d)] = {
            "d_k": d,
            "n_samples": sum(counts),
            "edges_unscaled": edges,
            "edges_scaled": [e / math.sqrt(d) for e in edges],
            "counts": counts,
            "outside": 0,
            "std_unscaled": 1.0,
            "std_scaled": 1.0,
        }
    examples = {
        "[14, 10, 12]": {
            "logits": [14.0, 10.0, 12.0],
            "weights": [0.7, 0.1, 0.2],
            "logits_scaled": [1.75, 1.25, 1.5],
            "weights_scaled": [0.4, 0.3, 0.3],
            "scale": 0.125,
        },
        "[50, 10, 5]": {
            "logits": [50.0, 10.0, 5.0],
            "weights": [1.0, 0.0, 0.0],
            "logits_scaled": [6.25, 1.25, 0.625],
            "weights_scaled": [0.98, 0.01, 0.01],
            "scale": 0.125,
        },
        "[5, 1, 0.5]": {
            "logits": [5.0, 1.0, 0.5],
            "weights": [0.9, 0.06, 0.04],
            "logits_scaled": [0.625, 0.125, 0.0625],
            "weights_scaled": [0.5, 0.25, 0.25],
            "scale": 0.125,
        },
    }

    def summary(q10, median, q90, mean=None):
        return {
            "median": [median] * 5,
            "median_ci": [[median - 0.01, median + 0.01]] * 5,
            "q10": [q10] * 5,
            "q90": [q90] * 5,
            "mean": [mean if mean is not None else median] * 5,
            "mean_ci": [[median - 0.02, median + 0.02]] * 5,
        }

    def rows(figs):
        return {
            "d_k": D_KS,
            "rows": 300,
            "by_n": {
                n: {mode: {f: summary(*vals[mode]) for f, vals in figs.items()} for mode in ("unscaled", "scaled")}
                for n in ("16", "128")
            },
        }

    sigmas = [0.5, 1.0, 2.0, 3.0]
    return {
        "variance_vs_dk": {"gaussian": fam(1.0), "uniform": fam(1.02)},
        "dot_histograms": hist,
        "seed_softmax_examples": examples,
        "saturation": rows(
            {
                "max_weight": {"unscaled": (0.1, 0.8, 0.9), "scaled": (0.1, 0.3, 0.5)},
                "entropy": {"unscaled": (0.1, 0.5, 2.0), "scaled": (1.0, 2.0, 2.5)},
                "normalized_entropy": {"unscaled": (0.05, 0.2, 0.7), "scaled": (0.6, 0.8, 0.9)},
            }
        ),
        "jacobian": rows({"jacobian_frobenius": {"unscaled": (1e-9, 1e-3, 0.3, 0.05), "scaled": (0.2, 0.4, 0.5)}}),
        "phase": {
            "sigma": sigmas,
            "n": [16, 128],
            "mc": {"16": [0.9, 0.7, 0.3, 0.1], "128": [0.95, 0.8, 0.5, 0.2]},
            "mc_ci": {
                "16": [[v - 0.01, v + 0.01] for v in (0.9, 0.7, 0.3, 0.1)],
                "128": [[v - 0.01, v + 0.01] for v in (0.95, 0.8, 0.5, 0.2)],
            },
            "asymptote": {"16": [0.95, 0.8, 0.2, 0.0], "128": [0.97, 0.9, 0.6, 0.1]},
            "boundary": {"16": 2.35, "128": 3.11},
            "rows": {"16": 2048, "128": 256},
        },
        "broken_assumptions": [
            {"case": "non-zero means", "d_k": 64, "estimate": 96.0, "ci_low": 90.0, "ci_high": 102.0, "formula": 100.0},
            {
                "case": "correlated q and k",
                "d_k": 512,
                "estimate": 640.0,
                "ci_low": 600.0,
                "ci_high": 680.0,
                "formula": 650.0,
            },
        ],
        "ssmax": {
            "n": [10, 100, 1000, 100000],
            "softmax": [0.94, 0.6, 0.13, 0.0015],
            "ssmax": [0.99, 0.98, 0.97, 0.96],
            "s": 0.43,
        },
        "error_vs_samples": {
            "d_k": 64,
            "replicates": 30,
            "slope": -0.49,
            "points": [
                {"n_samples": n, "rms_error": 90 / n**0.5 * 1.1, "predicted": 90 / n**0.5, "mean_error": 0.1}
                for n in (64, 256, 1024)
            ],
        },
        "give_away": {
            "n": 16,
            "logit": [-10.0, 0.0, 10.0],
            "softmax_total_measured": [1.0, 1.0, 0.9999999],
            "softmax1_total": [0.0007, 0.94, 0.99999],
        },
    }


def fake_claims() -> list[dict]:
    chapters = (
        "formula",
        "without_scaling",
        "why_grows",
        "variance",
        "proof",
        "softmax_large",
        "why_sqrt",
        "real_numbers",
        "faq",
        "beyond",
    )
    verdicts = ("holds", "holds", "fails", "seed number wrong")
    out = []
    for i, ch in enumerate(chapters):
        for j in range(2):
            v = verdicts[(i + j) % 4]
            out.append(
                {
                    "id": f"T{i}.{j}",
                    "chapter": ch,
                    "claim_en": f"claim {i}.{j} about d_k in {ch}",
                    "claim_zh": f"论断 {i}.{j}：{ch}",
                    "seed_value": "0.867" if j else None,
                    "method": "Monte Carlo" if j else "exact arithmetic",
                    "expected": "d_k",
                    "measured": f"{63.9 + i:.1f}",
                    "estimate": 63.9 + i,
                    "ci_low": 63.0 + i,
                    "ci_high": 64.8 + i,
                    "n_samples": 123456 if j else None,
                    "verdict": v,
                    "correct_value": "0.868" if v == "seed number wrong" else None,
                    "note": "<b>not bold</b>" if i == 0 else "",
                }
            )
    return out


def fake_verify() -> dict:
    """A VerifyReport.to_dict() made by hand."""
    claims = fake_claims()
    return {
        "config": {
            "seed": 0,
            "quick": True,
            "rel_ci_target": 0.01,
            "confidence": 0.99,
            "max_draws": None,
            "groups": None,
        },
        "environment": {
            "attnscale": "0.1.0",
            "python": "3.x-test",
            "numpy": "9.9-test",
            "torch": None,
            "matplotlib": "3.x",
            "platform": "TestOS",
            "machine": "x86_64",
            "processor": None,
            "cpu_count": 2,
        },
        "counts": {v: sum(c["verdict"] == v for c in claims) for v in VERDICTS},
        "claims": claims,
        "data": fake_data(),
        "timings": {"total": 1.5},
    }


def report_config(tmp_path, **kw):
    """A quick ReportConfig writing into ``tmp_path``/site from ``tmp_path``/results."""
    from attnscale.report.build import ReportConfig

    return ReportConfig(out=tmp_path / "site", results=tmp_path / "results", quick=True, **kw)


def write_verify(root, verify: dict | None = None, quick: bool = True, seed: int = 0) -> results.Envelope:
    """A hand-made verification written as `attnscale verify` writes it."""
    from attnscale.claims import VerifyReport
    from attnscale.cli.verify import verify_data

    v = verify or fake_verify()
    config = {**v["config"], "quick": quick, "seed": seed}
    return results.write(
        "verify", verify_data(VerifyReport.from_dict(v)), config=config, seed=seed, quick=quick, root=root
    )


def prime(config, verify: dict | None = None) -> results.Envelope:
    """The hand-made verification written into the results folder ``config`` (a ReportConfig) reads."""
    return write_verify(config.results, verify, quick=config.quick)


def text_px(svg: str, column_px: float, max_px: float | None = None) -> list[float]:
    """The size in CSS px of every text of an inline SVG shown ``column_px`` wide (or ``max_px``)."""
    import re

    view_w = float(re.search(r'viewBox="[\d.]+ [\d.]+ ([\d.]+) [\d.]+"', svg).group(1))
    shown = min(column_px, max_px) if max_px else column_px
    return [float(s) * shown / view_w for s in re.findall(r"font-size: ?([\d.]+)px", svg)]


def figures_readable_on_a_phone(html: str) -> None:
    """Every figure of a chapter has a phone's drawing, whose text is at least ~8 px (median ≥ 10)
    in a 420 px phone's 388 px column."""
    import re
    import statistics

    shown = re.findall(r'<figure class="fig[^"]*".*?</figure>', html, flags=re.S)
    assert shown and all("fig-responsive" in f for f in shown)
    for f in shown:
        narrow = re.search(r'<div class="fig-narrow">(<svg .*?</svg>)', f, flags=re.S).group(1)
        sizes = text_px(narrow, 388)
        assert sizes and min(sizes) >= 8 and statistics.median(sizes) >= 10, sorted(sizes)[:5]
