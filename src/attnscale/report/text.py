"""Every word of the report in English and Chinese (the language of the blog post it checks): interface labels and the
chapters' prose. Settings of the verification are not typed here: the page fills ``{named}`` slots
from its data (``facts``); literal braces are doubled.

``t(key, lang)`` looks up an interface label; ``CHAPTERS[id][lang]`` holds a chapter's title and
paragraphs. A Chinese string missing from a table falls back to English rather than failing.
"""

from __future__ import annotations

from attnscale.report.html import percent

LANGS = ("en", "zh")

UI: dict[str, dict[str, str]] = {
    "title": {"en": "Why divide by √d_k? Every claim of a blog post, measured",
              "zh": "为什么要除以 √dₖ？一篇博客的每一个论断，逐条测量"},
    "kicker": {"en": "attnscale report", "zh": "attnscale 报告"},
    "subtitle": {
        "en": "A blog post on why dot-product attention is scaled by √d_k, retold with figures and every claim "
              "checked by attnscale: Monte Carlo estimates with confidence intervals, exact arithmetic where "
              "floats could hide a digit, and a verdict on each claim. No number is typed in; each part says "
              "which result file it comes from, when and on what machine that was computed, and whether it "
              "was a quick or a full run (see also “How this page was made” at the end).",
        "zh": "把一篇关于点积注意力为何要除以 √dₖ 的博客用图重新讲一遍，并由 attnscale 逐条检验其论断："
              "带置信区间的蒙特卡罗估计、在浮点数可能掩盖误差之处使用精确算术，并对每个论断给出判定。"
              "没有任何数字是手写的；每一部分都注明它来自哪个结果文件、何时在哪台机器上计算、是快速运行还是完整运行"
              "（另见页末“本页是如何生成的”）。"},
    "contents": {"en": "Contents", "zh": "目录"},
    "part_seed": {"en": "The blog post, checked", "zh": "原文，逐条验证"},
    "part_beyond": {"en": "Beyond the blog post", "zh": "原文之外"},
    "part_experiments": {"en": "Experiments", "zh": "实验"},
    "part_appendix": {"en": "Appendix", "zh": "附录"},
    "holds": {"en": "holds", "zh": "成立"},
    "fails": {"en": "fails", "zh": "不成立"},
    "inconclusive": {"en": "inconclusive", "zh": "无定论"},
    "seed number wrong": {"en": "blog post's number wrong", "zh": "原文数字有误"},
    "tally_holds": {"en": "claims hold", "zh": "个论断成立"},
    "tally_fails": {"en": "fail", "zh": "个不成立"},
    "tally_inconclusive": {"en": "inconclusive", "zh": "个无定论"},
    "inconclusive_means": {"en": "the interval does not decide the criterion at this sample size",
                           "zh": "在当前样本量下置信区间无法判定该标准"},
    "tally_wrong": {"en": "of the blog post's numbers wrong", "zh": "个原文数字有误"},
    "expected": {"en": "expected", "zh": "期望"},
    "measured": {"en": "measured", "zh": "测得"},
    "method": {"en": "method", "zh": "方法"},
    "ci_plain": {"en": "CI", "zh": "置信区间"},
    "ci_at": {"en": "{level} CI (judged)", "zh": "{level} 置信区间（据此判定）"},
    "ci_judged": {"en": "interval judged (level)", "zh": "判定所用区间（置信水平）"},
    "samples": {"en": "samples", "zh": "样本"},
    "seed_says": {"en": "the blog post says", "zh": "原文写的是"},
    "correct_value": {"en": "correct value", "zh": "正确值"},
    "claim": {"en": "claim", "zh": "论断"},
    "verdict": {"en": "verdict", "zh": "判定"},
    "chapter": {"en": "chapter", "zh": "章节"},
    "no_claims": {"en": "No claim of the verification belongs to this chapter.",
                  "zh": "验证中没有属于本章的论断。"},
    "all_verdicts": {"en": "All verdicts", "zh": "全部判定"},
    "all_verdicts_lead": {"en": "Every claim the verification checked, in one table.",
                          "zh": "验证检查过的全部论断，汇总于一张表。"},
    "missing_result": {"en": "This chapter has no result yet. Produce it with:",
                       "zh": "本章还没有结果。用下面的命令生成："},
    "missing_then": {"en": "then build the report again.", "zh": "然后重新生成本报告。"},
    "chapter_error": {"en": "This chapter could not be rendered; the rest of the report is unaffected.",
                      "zh": "本章渲染失败；报告的其余部分不受影响。"},
    "figure_error": {"en": "This figure could not be drawn:", "zh": "这张图无法绘制："},
    "no_data": {"en": "The verification produced no data for this figure.",
                "zh": "验证没有为这张图提供数据。"},
    "provenance": {"en": "How this page was made", "zh": "本页是如何生成的"},
    "prov_version": {"en": "attnscale", "zh": "attnscale 版本"},
    "prov_seed": {"en": "random seed", "zh": "随机种子"},
    "prov_config": {"en": "configuration", "zh": "配置"},
    "prov_python": {"en": "Python", "zh": "Python"},
    "prov_numpy": {"en": "NumPy", "zh": "NumPy"},
    "prov_torch": {"en": "torch", "zh": "torch"},
    "prov_matplotlib": {"en": "matplotlib", "zh": "matplotlib"},
    "prov_machine": {"en": "machine", "zh": "机器"},
    "prov_built": {"en": "built", "zh": "生成时间"},
    "prov_verify": {"en": "verification", "zh": "验证"},
    "prov_cached": {"en": "read from its result file (the verification took {s} when it ran)",
                    "zh": "读取自其结果文件（验证运行时耗时 {s}）"},
    "prov_computed": {"en": "computed now in {s}", "zh": "本次计算耗时 {s}"},
    "prov_sections": {"en": "compute time, as recorded in the result files: the verification's groups, then each "
                             "section's own result (the blog post's chapters have none of their own: they show "
                             "the verification's); drawing this page is not counted",
                      "zh": "计算耗时（取自结果文件）：先列验证的各组，再列各部分自己的结果"
                            "（原文各章没有自己的结果，显示的是验证的结果）；生成本页的时间不计在内"},
    "prov_total": {"en": "total of the rows above", "zh": "以上各行合计"},
    "prov_experiments": {"en": "result files", "zh": "结果文件"},
    "not_installed": {"en": "not installed", "zh": "未安装"},
    "widget_title": {"en": "Try it: one attention row", "zh": "动手试试：一行注意力"},
    "widget_lead": {
        "en": "A query q and n keys k with iid N(0, 1) components, drawn once from a seeded generator. "
              "Drag d_k and switch the scale rule: the bars are the softmax weights of this row.",
        "zh": "一个查询 q 和 n 个键 k，各分量独立服从 N(0, 1)，由带种子的随机数生成器一次性抽取。"
              "拖动 dₖ、切换缩放规则：柱子就是这一行的 softmax 权重。"},
    "w_dk": {"en": "dₖ", "zh": "dₖ"},
    "w_rule": {"en": "scale rule", "zh": "缩放规则"},
    "w_n": {"en": "keys n", "zh": "键数 n"},
    "w_resample": {"en": "new sample", "zh": "重新抽样"},
    "w_entropy": {"en": "entropy / ln n", "zh": "熵 / ln n"},
    "w_maxw": {"en": "max weight", "zh": "最大权重"},
    "w_spread": {"en": "logit std", "zh": "logit 标准差"},
    "w_support": {"en": "effective keys e^H", "zh": "有效键数 e^H"},
    "w_key": {"en": "key", "zh": "键"},
    "w_keys_axis": {"en": "keys", "zh": "键"},
    "w_uniform": {"en": "uniform", "zh": "均匀"},
    "w_formula": {"en": "logits", "zh": "logits"},
    "rule_inverse_sqrt_dk": {"en": "1/√d_k (Vaswani et al.)", "zh": "1/√dₖ（Vaswani 等）"},
    "rule_unscaled": {"en": "unscaled", "zh": "不缩放"},
    "rule_inverse_dk": {"en": "1/d_k (µP)", "zh": "1/dₖ（µP）"},
    "rule_qknorm": {"en": "QK-norm", "zh": "QK-norm"},
    "rule_softcap": {"en": "soft-cap {cap:g} on 1/√d_k (Gemma 2)", "zh": "软上限 {cap:g}，基于 1/√dₖ（Gemma 2）"},
    "rule_softcap_unscaled": {"en": "soft-cap {cap:g}, unscaled", "zh": "软上限 {cap:g}，不缩放"},
    "rule_logn": {"en": "log-n (Scalable-Softmax)", "zh": "log-n（Scalable-Softmax）"},
    "glance_var": {"en": "Var(q·k) at d_k = {d}, measured", "zh": "dₖ = {d} 时测得的 Var(q·k)"},
    "glance_var_claim": {"en": "the blog post says d_k =", "zh": "原文：dₖ ="},
    "glance_maxw": {"en": "largest weight, unscaled, d_k = {d}, n = {n} (median row)",
                    "zh": "最大权重，不缩放，dₖ = {d}，n = {n}（中位数行）"},
    "glance_jac": {"en": "softmax gradient ‖J‖, unscaled, d_k = {d}, n = {n} (median row)",
                   "zh": "softmax 梯度 ‖J‖，不缩放，dₖ = {d}，n = {n}（中位数行）"},
    "glance_scaled": {"en": "with ÷√d_k:", "zh": "除以 √dₖ 后："},
    "glance_cross": {"en": "unscaled is below it only from d_k = {d} on", "zh": "不缩放的值仅从 dₖ = {d} 起低于它"},
    "lang_switch": {"en": "中文版: index.zh.html beside this page (attnscale report --lang zh)",
                    "zh": "English: index.html beside this page (attnscale report --lang en)"},
    "lang_name_en": {"en": "English", "zh": "English"},
    "lang_name_zh": {"en": "中文版", "zh": "中文版"},
    "quick_label": {"en": "quick run", "zh": "快速运行"},
    "quick_run": {"en": "quick run", "zh": "快速运行"},
    "full_run": {"en": "full run", "zh": "完整运行"},
    "computed_by": {"en": "From {file}: a {run} computed {when} on {machine} (attnscale {version}).",
                    "zh": "来自 {file}：{when} 在 {machine} 上计算的{run}（attnscale {version}）。"},
    "seed_post_is": {"en": "The blog post checked here:", "zh": "本页检验的博客："},
    "seed_post_copy": {"en": "This page checks the Chinese translation kept with attnscale; “the blog post” below "
                             "always means it, and “random seed” the generator's seed.",
                       "zh": "本页检验的是随 attnscale 保存的中文译文；下文的“原文”都指它，“随机种子”指随机数生成器的种子。"},
}


def pretty(text: str) -> str:
    """Prose typography: d_k → dₖ (the source strings stay greppable ASCII)."""
    return text.replace("d_{k}", "dₖ").replace("d_k", "dₖ")


def localize(table: dict, key: str, lang: str, **values) -> str:
    """``table[key]`` in ``lang`` (English when no translation exists), formatted with ``values``.
    Chapters bind their own table: ``_t = functools.partial(localize, TEXT)``."""
    entry = table[key]
    return (entry.get(lang) or entry["en"]).format(**values)


def t(key: str, lang: str) -> str:
    """The interface label ``key`` in ``lang`` (English when no translation exists)."""
    entry = UI[key]
    return pretty(entry.get(lang) or entry["en"])


# The blog post the verification checks (the project calls it "the seed"): named and linked on the page.
SEED_POST = {
    "title": {"en": "Why we scale the dot-product attention by √d_k", "zh": "为什么点积注意力要除以 √dₖ"},
    "author": "Amit Shekhar",
    "published": {"en": "Outcome School blog", "zh": "Outcome School 博客"},
    "url": "https://outcomeschool.com/blog",
}

# The chapters' words, by the chapter ids of the verification result's outline (its ``chapters``,
# which also gives their order and part).

CHAPTERS: dict[str, dict[str, dict]] = {
    "formula": {
        "en": {"title": "The formula (a quick recap)", "paras": [
            "Scaled dot-product attention turns queries, keys and values into outputs: every query is "
            "compared with every key by a dot product, the scores are divided by √d_k, a softmax turns "
            "each row of scores into weights that sum to 1, and the output is the weighted sum of the values. "
            "d_k is the length of the query and key vectors.",
            "This page is about the “÷ √d_k”. The blog post explains it in {n_seed_chapters} sections (its FAQ "
            "included); each chapter below retells one of them and then shows what we measured, with a verdict."]},
        "zh": {"title": "注意力公式（快速回顾）", "paras": [
            "缩放点积注意力把查询、键和值变成输出：每个查询与每个键做点积，分数除以 √dₖ，"
            "softmax 把每一行分数变成和为 1 的权重，输出就是值的加权和。dₖ 是查询和键向量的维度。",
            "本页关注的正是“÷ √dₖ”。原文分 {n_seed_chapters} 个部分（含常见问题）讲解它；下面每一章复述其中一部分，然后给出我们的测量结果与判定。"]},
    },
    "without_scaling": {
        "en": {"title": "What happens without scaling?", "paras": [
            "Skip the division and feed Q·Kᵀ straight into the softmax. The blog post says that in real models "
            "d_k is 64, 128 or more, that the raw scores grow with it, and that a softmax of large scores is "
            "nearly one-hot (one key takes almost all the weight, the others almost none), so that the "
            "gradients that should teach the model shrink toward zero. The verdicts below say which of these "
            "hold as stated.",
            "Try it below: pick “unscaled” and drag d_k to the right. Then switch back to 1/√d_k.",
            "One row is an anecdote. The figures after it summarise many random rows: the typical row (median) "
            "and the spread of rows (10%–90% band), for n = {sat_ns} keys."]},
        "zh": {"title": "不缩放会发生什么？", "paras": [
            "跳过除法，直接把 Q·Kᵀ 送进 softmax。原文说：真实模型中 dₖ 是 64、128 甚至更大，原始分数随之增大；"
            "对很大的分数做 softmax，结果几乎是 one-hot（一个键拿走几乎全部权重，其余几乎为零），"
            "本该用来训练模型的梯度也趋向于零。下面的判定说明其中哪些说法按原文所述成立。",
            "在下面亲自试试：选择“不缩放”，把 dₖ 往右拖。然后再切回 1/√dₖ。",
            "一行只是个例。后面的图汇总了大量随机行：典型的一行（中位数）和各行的分布（10%–90% 带），"
            "键数 n = {sat_ns_zh}。"]},
    },
    "why_grows": {
        "en": {"title": "Why does the dot product grow with d_k?", "paras": [
            "q·k = q₁k₁ + q₂k₂ + … adds d_k terms qᵢkᵢ, one per component i = 1, …, d_k. They are positive and "
            "negative and partly cancel, but not completely: the more terms, the wider the spread of the sum.",
            "The histograms below show q·k for random vectors at d_k = {hist_dks}. Unscaled (left), the "
            "spread widens with d_k; divided by √d_k (right), the {n_hist} curves lie almost on top of each other."]},
        "zh": {"title": "为什么点积会随 dₖ 增大？", "paras": [
            "q·k = q₁k₁ + q₂k₂ + … 把 dₖ 个项 qᵢkᵢ（每个分量 i = 1, …, dₖ 一项）加在一起。这些项有正有负、部分抵消，但不会完全抵消："
            "项越多，和的分布就越宽。",
            "下面的直方图展示了 dₖ = {hist_dks_zh} 时随机向量的 q·k。不缩放时（左），分布随 dₖ 变宽；"
            "除以 √dₖ 后（右），{n_hist} 条曲线几乎重合。"]},
    },
    "variance": {
        "en": {"title": "The variance of the dot product", "paras": [
            "Variance measures spread. If every component of q and k has mean 0 and variance 1, each product "
            "qᵢkᵢ has mean 0 and variance 1, and the d_k independent products add up to a variance of d_k.",
            "We measured the variance by Monte Carlo for d_k from {var_dk_min} to {var_dk_max}. On log–log axes a "
            "variance equal to d_k is a line of slope 1; the error bars are {level} confidence intervals."]},
        "zh": {"title": "理解点积的方差", "paras": [
            "方差衡量离散程度。若 q 和 k 的每个分量均值为 0、方差为 1，则每个乘积 qᵢkᵢ 的均值为 0、方差为 1，"
            "dₖ 个独立乘积相加，方差为 dₖ。",
            "我们用蒙特卡罗方法测量了 dₖ 从 {var_dk_min} 到 {var_dk_max} 的方差。在双对数坐标中，方差等于 dₖ 是一条斜率为 1 的直线；"
            "误差线是 {level} 置信区间。"]},
    },
    "proof": {
        "en": {"title": "Step by step: the variance is d_k", "paras": [
            "With mean 0, the variance is the average of the square. Squaring a sum of d_k terms gives d_k × d_k "
            "products: d_k of them pair a term with itself and average 1; the others mix different, independent "
            "components and average 0. So the variance is exactly d_k.",
            "The verification expands E[(Σ qᵢkᵢ)²] symbolically and counts the terms."]},
        "zh": {"title": "逐步证明：点积的方差是 dₖ", "paras": [
            "均值为 0 时，方差就是平方的平均值。把 dₖ 项之和平方，得到 dₖ × dₖ 个乘积：其中 dₖ 个是某项与自身相乘，"
            "平均为 1；其余的混合了不同的独立分量，平均为 0。所以方差恰好是 dₖ。",
            "验证程序对 E[(Σ qᵢkᵢ)²] 做符号展开，并清点各类项的个数。"]},
    },
    "softmax_large": {
        "en": {"title": "What large dot products do to softmax", "paras": [
            "eˣ grows extremely fast, so in a softmax the largest score takes over as the scores grow apart. "
            "The blog post's two examples, [50, 10, 5] and [5, 1, 0.5], show it; the figure also shows them divided "
            "by 8, as the next chapters will do.",
            "Every value of the blog post's eˣ table is recomputed with exact arithmetic and compared at the "
            "precision the blog post prints it."]},
        "zh": {"title": "大的点积对 softmax 的影响", "paras": [
            "eˣ 增长极快，所以当分数彼此拉开时，softmax 中最大的分数会占据主导。原文的两个例子 [50, 10, 5] 和 "
            "[5, 1, 0.5] 展示了这一点；图中也给出了它们除以 8 之后的结果，正如后面几章要做的那样。",
            "原文 eˣ 表中的每个值都用精确算术重新计算，并按原文印出的精度进行比较。"]},
    },
    "why_sqrt": {
        "en": {"title": "Why √d_k is the right factor", "paras": [
            "Dividing a random variable by a constant c divides its variance by c². The dot product has "
            "variance d_k, so d_k / c² = 1 gives c = √d_k: the one factor that brings the variance back to 1 at "
            "every d_k. The blog post's [2, 4, 6] example shows the c² rule."]},
        "zh": {"title": "为什么 √dₖ 是正确的缩放因子", "paras": [
            "把随机变量除以常数 c，方差会除以 c²。点积的方差是 dₖ，令 dₖ / c² = 1 得 c = √dₖ："
            "它是在任何 dₖ 下都能把方差拉回 1 的那个因子。原文用 [2, 4, 6] 的例子说明了 c² 规则。"]},
    },
    "real_numbers": {
        "en": {"title": "Checking with real numbers", "paras": [
            "The blog post's worked examples: a dot product at d_k = 4, and three scores [14, 10, 12] at d_k = 64, "
            "before and after dividing by √64 = 8. Every digit it prints is recomputed below."]},
        "zh": {"title": "用真实数字验证", "paras": [
            "原文的算例：dₖ = 4 时的一个点积，以及 dₖ = 64 时的三个分数 [14, 10, 12] 在除以 √64 = 8 前后的结果。"
            "它印出的每一位数字都在下面重新计算。"]},
    },
    "faq": {
        "en": {"title": "FAQ", "paras": [
            "Does scaling matter when d_k is small? Is the variance only approximately d_k? The blog post's answers "
            "to these two, checked. (Who introduced the factor is a matter of record, Vaswani et al. 2017, "
            "not of measurement: nothing here checks it.)",
            "“Exact, not approximate” can be watched: the Monte Carlo estimate of the variance closes in on d_k "
            "with an error that shrinks as 1/√N, as it must for an exact value."]},
        "zh": {"title": "常见问题", "paras": [
            "dₖ 较小时缩放重要吗？点积的方差只是近似等于 dₖ 吗？逐一检验原文对这两个问题的回答。"
            "（缩放因子由谁引入——Vaswani 等人 2017——是史实而非测量，这里不作检验。）",
            "“精确而非近似”是可以看到的：方差的蒙特卡罗估计向 dₖ 收敛，误差按 1/√N 缩小，精确值理应如此。"]},
    },
    "beyond": {
        "en": {"title": "Beyond the blog post", "paras": [
            "The blog post's argument rests on assumptions (independent components, mean 0, variance 1) and on one "
            "fixed number of keys. Here we change both and measure what happens."],
            "broken": ("When the assumptions break",
                       "With means μ, variances σ² or correlated q and k, the measured variance follows the general "
                       "formula Var(q·k) = d_k(σ_q²σ_k² + μ_q²σ_k² + μ_k²σ_q²) (plus the correlation term), "
                       "and ÷√d_k no longer brings it back to 1."),
            "phase": ("√d_k removes d_k, not the number of keys n",
                      "Softmax of n random logits with standard deviation σ freezes onto a few keys once σ passes "
                      "√(2 ln n). Unscaled logits have σ = √d_k, so unscaled attention on random inputs is frozen "
                      "once d_k > 2 ln n; after ÷√d_k, σ = 1 and the boundary is never reached."),
            "ssmax": ("Scalable-Softmax: the fading maximum",
                      "Fix the logits (all −2 but one +3) and add keys: the largest weight fades as n grows. "
                      "Multiplying the logits by s·ln n (s = {ssmax_s}) keeps it near 1."),
            "give": ("Softmax must give all its weight away",
                     "Softmax's weights sum to 1 even when nothing deserves attention: equal logits give uniform "
                     "weights, whatever their value. softmax₁ (Miller 2023) adds 1 to the denominator and can give "
                     "almost nothing away."),
        },
        "zh": {"title": "原文之外", "paras": [
            "原文的论证依赖若干假设（分量独立、均值 0、方差 1）以及固定的键数。这里我们改变这两点，测量会发生什么。"],
            "broken": ("当假设不成立时",
                       "当分量有均值 μ、方差 σ²，或 q 与 k 相关时，测得的方差遵循一般公式 "
                       "Var(q·k) = dₖ(σ_q²σ_k² + μ_q²σ_k² + μ_k²σ_q²)（相关时另加一项），"
                       "除以 √dₖ 也不再能把它拉回 1。"),
            "phase": ("√dₖ 消除了 dₖ 的影响，却没有消除键数 n 的影响",
                      "对 n 个标准差为 σ 的随机 logit 做 softmax，当 σ 超过 √(2 ln n) 时，权重会“冻结”在少数几个键上。"
                      "不缩放时 σ = √dₖ，因此随机输入下的不缩放注意力在 dₖ > 2 ln n 时就冻结了；"
                      "除以 √dₖ 后 σ = 1，永远到不了这条边界。"),
            "ssmax": ("Scalable-Softmax：逐渐消失的最大权重",
                      "固定 logits（除最后一个为 +3 外全为 −2），不断增加键数：最大权重随 n 增大而消失。"
                      "把 logits 乘以 s·ln n（s = {ssmax_s}）可以让它保持在 1 附近。"),
            "give": ("softmax 必须把权重全部分配出去",
                     "即使没有任何内容值得关注，softmax 的权重之和也总是 1：相同的 logits 不论取值如何都给出均匀权重。"
                     "softmax₁（Miller 2023）在分母上加 1，可以几乎不分配任何注意力。"),
        },
    },
}


class _Facts(dict):
    """Values for the ``{named}`` slots of the prose; a slot without a value reads "…"."""

    def __missing__(self, key):
        return "…"


def facts(data: dict, config: dict | None = None, outline: list | None = None) -> _Facts:
    """The prose's slots filled from the verification's result (its settings, formatted, never typed
    here): which d_k the histograms use, which n the saturation rows have, SSMax's s, the range of
    d_k of the variance, the confidence level (``config``), the number of the blog post's chapters
    (``outline``)."""
    out = _Facts()
    if (config or {}).get("confidence") is not None:
        out["level"] = percent(config["confidence"])
    if outline:
        out["n_seed_chapters"] = str(sum(entry["part"] == "seed" for entry in outline))
    var = next(iter((data.get("variance_vs_dk") or {}).values()), None)
    if var and var.get("d_k"):
        out["var_dk_min"], out["var_dk_max"] = str(min(var["d_k"])), str(max(var["d_k"]))
    hist = data.get("dot_histograms") or {}
    dks = [str(h.get("d_k", k)) for k, h in hist.items()]
    if dks:
        out["hist_dks"] = ", ".join(dks[:-1]) + " and " + dks[-1] if len(dks) > 1 else dks[0]
        out["hist_dks_zh"] = "、".join(dks)
        out["n_hist"] = str(len(dks))
    ns = list((data.get("saturation") or {}).get("by_n", {}))
    if ns:
        out["sat_ns"] = ", ".join(ns[:-1]) + " and " + ns[-1] if len(ns) > 1 else ns[0]
        out["sat_ns_zh"] = "、".join(ns)
    out.update(_jacobian_story(data.get("jacobian") or {}))
    if (data.get("ssmax") or {}).get("s") is not None:
        out["ssmax_s"] = f'{data["ssmax"]["s"]:g}'
    return out


def _jacobian_story(jac: dict) -> dict[str, str]:
    """The Jacobian caption's reading of the curve, from the verification's crossover per n (where the
    unscaled median drops below the scaled one for good) and the d_k of its peak; without them, only
    what the figure shows."""
    cross, peaks = jac.get("crossover"), jac.get("peak_d_k") or {}
    if not cross:
        return {"jac_story": "Compare the red (unscaled) and blue (÷√d_k) medians at each d_k.",
                "jac_story_zh": "请在每个 dₖ 处比较红色（不缩放）与蓝色（除以 √dₖ）的中位数。"}
    en, zh = [], []
    for n, c in cross.items():
        peak = f", peaks at d_k = {peaks[n]}" if n in peaks else ""
        peak_zh = f"，在 dₖ = {peaks[n]} 处最大" if n in peaks else ""
        if c.get("d_k") is None:
            en.append(f"n = {n}: never below the scaled one on this grid{peak}")
            zh.append(f"n = {n}：在本网格上从未低于缩放后的值{peak_zh}")
        else:
            en.append(f"n = {n}: below the scaled one from d_k = {c['d_k']} on{peak}")
            zh.append(f"n = {n}：从 dₖ = {c['d_k']} 起低于缩放后的值{peak_zh}")
    return {"jac_story": "The unscaled median, per number of keys: " + "; ".join(en) + ".",
            "jac_story_zh": "不缩放时的中位数，按键数：" + "；".join(zh) + "。"}


def _fill(text: str, values: dict | None) -> str:
    return pretty(text.format_map(values if values is not None else _Facts()))


def chapter_text(chapter: str, lang: str, values: dict | None = None) -> dict:
    """A chapter's title and prose in ``lang`` (English when no translation exists), its slots
    filled from ``values`` (see :func:`facts`)."""
    entry = CHAPTERS[chapter]
    text = entry.get(lang) or entry["en"]
    return {k: (_fill(v, values) if isinstance(v, str) else [_fill(p, values) for p in v] if isinstance(v, list)
                else tuple(_fill(p, values) for p in v)) for k, v in text.items()}

# Figure captions and alt texts, by the data block each figure draws.
CAPTIONS: dict[str, dict[str, tuple[str, str]]] = {
    "variance_vs_dk": {
        "en": ("Variance of q·k against d_k, unscaled and scaled",
               "Monte Carlo variance of q·k (left) and of q·k/√d_k (right) for several component distributions, "
               "with {level} confidence intervals. Left: the dashed line Var = d_k has slope 1 on these log–log axes. "
               "Right: after ÷√d_k every point sits on Var = 1."),
        "zh": ("q·k 的方差随 dₖ 的变化（缩放前后）",
               "q·k（左）与 q·k/√dₖ（右）的蒙特卡罗方差，多种分量分布，误差线为 {level} 置信区间。"
               "左：虚线 Var = dₖ 在双对数坐标中斜率为 1。右：除以 √dₖ 后，所有点都落在 Var = 1 上。")},
    "dot_histograms": {
        "en": ("Histograms of q·k at d_k = {hist_dks}",
               "Distribution of q·k for random q, k with iid N(0, 1) components. Unscaled, the spread grows like "
               "√d_k; divided by √d_k the {n_hist} histograms coincide."),
        "zh": ("dₖ = {hist_dks_zh} 时 q·k 的直方图",
               "分量独立服从 N(0, 1) 的随机 q、k 的 q·k 分布。不缩放时宽度按 √dₖ 增长；除以 √dₖ 后{n_hist} 个直方图重合。")},
    "seed_softmax_examples": {
        "en": ("The blog post's softmax examples, before and after ÷8",
               "Softmax weights of the blog post's score vectors, recomputed: as given (red) and divided by √64 = 8 "
               "(blue)."),
        "zh": ("原文的 softmax 例子，除以 8 前后",
               "重新计算原文各组分数的 softmax 权重：原样（红）与除以 √64 = 8 之后（蓝）。")},
    "error_vs_samples": {
        "en": ("The error of the variance estimate against the number of samples",
               "Root-mean-square error of the Monte Carlo estimate of Var(q·k) around the exact d_k, over repeated "
               "runs, against the sample count N. The dashed line is the predicted σ/√N: an exact value is "
               "approached at exactly this rate."),
        "zh": ("方差估计的误差随样本数的变化",
               "多次重复下，Var(q·k) 的蒙特卡罗估计相对精确值 dₖ 的均方根误差随样本数 N 的变化。虚线为预测的 σ/√N："
               "精确值正是以这个速度被逼近的。")},
    "give_away": {
        "en": ("Softmax gives all its weight away; softmax₁ need not",
               "Total weight of a row of n equal logits c: always 1 for softmax, n·e^c/(1 + n·e^c) for softmax₁."),
        "zh": ("softmax 总是分配全部权重；softmax₁ 不必如此",
               "n 个相同 logit c 组成的一行的总权重：softmax 恒为 1，softmax₁ 为 n·e^c/(1 + n·e^c)。")},
    "saturation": {
        "en": ("Saturation: the largest weight and the entropy against d_k",
               "For rows of n random keys: the median row (line) and the 10%–90% band of rows (shade). Solid red: "
               "unscaled; dashed blue: ÷√d_k; darker = more keys. Entropy is divided by ln n, its value for "
               "uniform weights."),
        "zh": ("饱和：最大权重与熵随 dₖ 的变化",
               "n 个随机键组成的行：中位数行（线）与 10%–90% 的行（阴影）。实线：不缩放；虚线：除以 √dₖ。熵除以 ln n（均匀权重时的熵）。")},
    "jacobian": {
        "en": ("The softmax Jacobian's norm against d_k",
               "Frobenius norm of ∂softmax/∂z per row: median (line) and 10%–90% band; dotted: the mean over "
               "rows, unscaled. {jac_story}"),
        "zh": ("softmax 雅可比矩阵的范数随 dₖ 的变化",
               "每行 ∂softmax/∂z 的 Frobenius 范数：中位数（线）与 10%–90% 带；点线：不缩放时各行的平均值。{jac_story_zh}")},
    "phase": {
        "en": ("Phase diagram over the logits' spread σ and the number of keys n",
               "Mean entropy / ln n of softmax rows of n iid N(0, σ²) logits (Monte Carlo, {level} CI bands on the "
               "right). Unscaled attention has σ = √d_k (top axis). The red dashed line is the boundary "
               "σ = √(2 ln n), i.e. d_k = 2 ln n: beyond it the rows are frozen. Right: dashed, the "
               "random-energy-model asymptote ln n − σ²/2 — an asymptote, visibly off near the boundary."),
        "zh": ("logits 标准差 σ 与键数 n 上的相图",
               "n 个独立 N(0, σ²) logits 组成的 softmax 行的平均熵 / ln n（蒙特卡罗，右图阴影为 {level} 置信区间）。"
               "不缩放注意力的 σ = √dₖ（上方坐标轴）。红色虚线是边界 σ = √(2 ln n)，即 dₖ = 2 ln n：越过它，行就被“冻结”。"
               "右图虚线是随机能量模型的渐近式 ln n − σ²/2——它只是渐近式，在边界附近明显偏离。")},
    "broken_assumptions": {
        "en": ("Variance when the blog post's assumptions break",
               "Measured variance after ÷√d_k (dots, {level} CI) against the general formula (bars). The dotted line "
               "is the variance 1 that ÷√d_k promises under the blog post's assumptions."),
        "zh": ("原文假设不成立时的方差",
               "除以 √dₖ 后测得的方差（点，{level} 置信区间）与一般公式（竖线）对比。点线是在原文假设下 ÷√dₖ 所承诺的方差 1。")},
    "ssmax": {
        "en": ("Scalable-Softmax keeps the maximum from fading",
               "All logits −2 except the last, +3: the largest softmax weight against the number of keys n, "
               "plain softmax vs logits multiplied by s·ln n (Nakanishi 2025, Figure 1)."),
        "zh": ("Scalable-Softmax 让最大权重不再消失",
               "除最后一个为 +3 外所有 logit 均为 −2：最大 softmax 权重随键数 n 的变化，普通 softmax 与乘以 s·ln n 后的对比"
               "（Nakanishi 2025，图 1）。")},
}


def caption(key: str, lang: str, values: dict | None = None) -> tuple[str, str]:
    """(alt text, caption) of the figure drawn from data block ``key``, slots filled from ``values``."""
    entry = CAPTIONS[key]
    alt, cap = entry.get(lang) or entry["en"]
    return _fill(alt, values), _fill(cap, values)
