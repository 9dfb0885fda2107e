"""The telemetry benchmark's second part (:mod:`.telemetry` times the attention kernels): the monitor
on a real model, a forward with and without :class:`attnscale.torch.Monitor` (times, whether the
outputs stay bit-for-bit equal, the per-head figures), and those figures gathered per layer."""

from __future__ import annotations

import statistics
import time

from attnscale.errors import require

__all__ = ["measure_monitor", "monitor_layers"]


def measure_monitor(model, inputs: dict, repeats: int = 5) -> dict:
    """A model's forward with and without :class:`attnscale.torch.Monitor`: times (interleaved,
    medians), whether the outputs are bit-for-bit equal, the monitor's per-head figures and their
    per-layer aggregates (:func:`monitor_layers`)."""
    torch = require("torch", "torch")
    from attnscale.results import finite_or_none
    from attnscale.torch.monitor import Monitor

    def first_tensor(out):
        return out if isinstance(out, torch.Tensor) else out[0]

    plain_s, watched_s = [], []
    with torch.no_grad():
        reference = first_tensor(model(**inputs))
        equal = True
        for _ in range(repeats):
            t0 = time.perf_counter()
            model(**inputs)
            plain_s.append(time.perf_counter() - t0)
            with Monitor(model) as mon:
                t0 = time.perf_counter()
                out = first_tensor(model(**inputs))
                watched_s.append(time.perf_counter() - t0)
            equal = equal and torch.equal(out, reference)
    summary = mon.as_dict()
    heads = [
        {key: (finite_or_none(x) if isinstance(x, float) else x) for key, x in h.items()} for h in summary["heads"]
    ]
    calls = summary["calls"]
    return {
        "plain_median_s": statistics.median(plain_s),
        "monitored_median_s": statistics.median(watched_s),
        "ratio": statistics.median(watched_s) / statistics.median(plain_s),
        "outputs_bitwise_equal": equal,
        "repeats": repeats,
        "calls_per_forward": len(calls),
        "float16_overflow_calls": sum(1 for c in calls if c["float16_overflow_rows"]),
        "layers": monitor_layers(heads),
        "heads": heads,
    }


def monitor_layers(heads: list[dict]) -> list[dict]:
    """Per layer, from the monitor's per-head figures: the mean of head mean entropies, the median of
    head medians, the lowest entropy, the largest logit and the head with the lowest mean entropy.
    Heads whose figure is missing (None: no attended row) are left out of that figure."""
    layers: dict[str, list[dict]] = {}
    for head in heads:
        layers.setdefault(head["layer"], []).append(head)

    def present(hs, key):
        return [h[key] for h in hs if h.get(key) is not None]

    rows = []
    for name, hs in layers.items():
        means, medians = present(hs, "entropy_mean"), present(hs, "entropy_median")
        mins, logits = present(hs, "entropy_min"), present(hs, "max_logit")
        ranked = [h for h in hs if h.get("entropy_mean") is not None]
        lowest = min(ranked, key=lambda h: h["entropy_mean"]) if ranked else None
        rows.append(
            {
                "layer": name,
                "heads": len(hs),
                "entropy_mean": sum(means) / len(means) if means else None,
                "entropy_median_of_medians": statistics.median(medians) if medians else None,
                "entropy_min": min(mins) if mins else None,
                "max_logit": max(logits) if logits else None,
                "lowest_head": None if lowest is None else lowest["head"],
                "lowest_head_entropy_mean": None if lowest is None else lowest["entropy_mean"],
            }
        )
    return rows
