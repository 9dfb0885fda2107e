"""Report chapter: does unscaled attention really stop learning? (experiment A, ``train/scale-vs-dk``)

Reads the ``train/scale-vs-dk`` result (written by ``attnscale train scale-vs-dk``) and only formats and
places what its analysis holds (``scale_vs_dk.analyse`` in the experiments): the set-up, the SGD
rate tuned for 1/√d_k and whether it lies inside the grid, learning curves with the logit spread and the
saturated rows over training, the table of final accuracy, steps to target and verdicts, the findings
each interpretive sentence is chosen by, the chain-rule check of the gradient at initialisation, and the
measured run times. Every number and every choice between two sentences comes from the analysis; what
the result cannot show is said as a hypothesis and marked so.
"""

from __future__ import annotations

import functools

from attnscale.report.html import esc, figure_svg, number, table, table_with_details
from attnscale.report.text import localize, t

KIND = "train/scale-vs-dk"
TITLE = {"en": "Training: does unscaled attention really stop learning?",
         "zh": "训练：不缩放的注意力真的学不动吗？"}
HOW_TO = "attnscale train scale-vs-dk"

HYP = {"en": "Hypothesis, not tested here: ", "zh": "假设（此处未检验）："}

TEXT = {
    "intro": {
        "en": ("A one-layer transformer (width {d_model}, {heads} heads) learns to count the ones among "
               "{k} marked positions out of {n}: the query must spread its attention evenly over the {k} "
               "marked keys. One attended key is not enough: from one marked bit the best possible "
               "accuracy is {single:.3f}, {versus}. "
               "W_Q and W_K start with Var(q_i) ≈ 1, so Var(q·k) ≈ dₖ, the seed's assumption. Every "
               "rule starts from the same weights for a given dₖ and seed; {steps} steps of batch {batch}, "
               "{seeds} seed(s), {cells} cells. Adam runs at lr {adam_lr:g}; plain SGD runs on the grid {sgd_lrs}."),
        "zh": ("一层 transformer（宽 {d_model}，{heads} 个头）学习数出 {n} 个位置中 {k} 个标记位置上 1 的个数："
               "查询必须把注意力均匀地分散到 {k} 个标记键上。只看一个键不够：仅凭一个标记位，最佳准确率为 "
               "{single:.3f}，{versus}。W_Q 与 W_K 的初始化使 Var(q_i) ≈ 1，于是 Var(q·k) ≈ dₖ，正是原文的假设。"
               "同一 dₖ 与种子下各规则从相同权重出发；训练 {steps} 步，批大小 {batch}，{seeds} 个种子，共 {cells} 个格子。"
               "Adam 学习率 {adam_lr:g}；普通 SGD 在网格 {sgd_lrs} 上运行。"),
    },
    "single_same": {"en": "the same as guessing the most likely count ({prior:.3f})",
                    "zh": "与猜最常见的计数（{prior:.3f}）相同"},
    "single_above": {"en": "against {prior:.3f} for guessing the most likely count",
                     "zh": "而猜最常见的计数可得 {prior:.3f}"},
    "quick": {"en": "Quick sweep ({steps} steps, {seeds} seed(s)): every sentence below describes this short run "
                    "only, not the full sweep.",
              "zh": "快速扫描（{steps} 步，{seeds} 个种子）：下面每句话只描述这次短运行，而非完整扫描。"},
    "ref_none": {"en": "Within {steps} steps not even 1/√dₖ reaches {target:g} accuracy, with either optimiser: this "
                       "sweep cannot tell a rule that learns from one that does not.",
                 "zh": "在 {steps} 步内，连 1/√dₖ 用哪种优化器都达不到 {target:g} 准确率：这次扫描无法区分学得会与学不会的规则。"},
    "ref_some": {"en": "1/√dₖ itself reaches {target:g} accuracy on only part of the sweep ({where}; seeds reaching / "
                       "seeds): where it does not, no rule can be judged slower than it.",
                 "zh": "1/√dₖ 本身只在部分设置下达到 {target:g} 准确率（{where}；达到的种子数/种子数）：在它达不到之处，"
                       "无法判断其他规则比它慢。"},
    "tuned": {"en": "The SGD rate tuned for 1/√dₖ (best mean final accuracy over seeds, then fewer steps): {lrs}.",
              "zh": "为 1/√dₖ 调好的 SGD 学习率（各种子平均最终准确率最高，其次步数最少）：{lrs}。"},
    "tuned_inside": {"en": "It lies inside the grid at every dₖ: a worse rate on either side.",
                     "zh": "在每个 dₖ 上它都位于网格内部：两侧都有更差的学习率。"},
    "tuned_edge": {"en": "At dₖ = {d_ks} it lies on the grid's edge, so the best rate may lie outside the grid and "
                         "'the tuned rate' there means the best rate the grid has.",
                   "zh": "在 dₖ = {d_ks} 上它位于网格边缘，最佳学习率可能在网格之外；那里的“调好的学习率”只是网格中最好的一个。"},
    "tuned_note": {"en": "The same grid gives each rule its own best rate (marked ‹ or › where it is the grid's lowest "
                         "or highest). Both choices are made on the seeds they are reported on, which flatters the "
                         "tuned cells a little.",
                   "zh": "同一网格也为每条规则选出各自最佳学习率（若是网格最低或最高值，标为 ‹ 或 ›）。两种选择都基于报告所用的"
                         "同一批种子，对调优格子略有偏袒。"},
    "verdict_head": {"en": "Verdicts", "zh": "判定"},
    "verdict_def": {"en": "Each (rule, dₖ) against 1/√dₖ on the same seeds and optimiser: learns like it (reaches "
                          "{target:g} within {like:g}× the batches 1/√dₖ needs), slower, fails within the {steps}-step "
                          "budget, or diverges (a non-finite loss, kept and shown). The verdict is the one most seeds "
                          "share (a tie goes to the more severe); the fraction is the seeds agreeing.",
                    "zh": "每组（规则, dₖ）与同种子、同优化器的 1/√dₖ 比较：学得和它一样（在 1/√dₖ 所需批数的 {like:g} 倍内达到 "
                          "{target:g}）、更慢、在 {steps} 步预算内学不会、或发散（损失非有限，保留并显示）。判定取多数种子的结果"
                          "（平局取更严重者）；分数为一致的种子数。"},
    "v_line": {"en": "{rule}, {opt}: {items}.", "zh": "{rule}，{opt}：{items}。"},
    "opt_adam": {"en": "Adam", "zh": "Adam"},
    "opt_sgd": {"en": "SGD at the rate tuned for 1/√dₖ", "zh": "SGD（为 1/√dₖ 调好的学习率）"},
    "v_learns": {"en": "learns like 1/√dₖ", "zh": "学得与 1/√dₖ 一样"},
    "v_slower": {"en": "slower", "zh": "更慢"},
    "v_fails": {"en": "fails within the budget", "zh": "预算内学不会"},
    "v_diverges": {"en": "diverges", "zh": "发散"},
    "ratio": {"en": "×{r} the steps", "zh": "步数 ×{r}"},
    "findings": {"en": "What the numbers say", "zh": "数字说明了什么"},
    "glance": {"en": "Adam, seed range [min, max]: the query rows' logit standard deviation and saturated fraction "
                     "(largest weight > {w:g}) and the largest logit, at step 0 and at the last logged step.",
               "zh": "Adam，种子范围 [最小, 最大]：查询行的 logit 标准差、饱和比例（最大权重 > {w:g}）与最大 logit，"
                     "在第 0 步与最后一个记录步。"},
    "why_sd": {"en": "Without the scale the seed predicts logits of standard deviation √dₖ (here: {pred}); measured at "
                     "step 0 on the query rows of unscaled attention: {meas}.",
               "zh": "不缩放时，原文预言 logit 标准差为 √dₖ（此处为 {pred}）；不缩放注意力的查询行在第 0 步实测为 {meas}。"},
    "grad_larger": {"en": "At step 0 the gradient reaching {w} is larger without the scale, not smaller: unscaled ÷ "
                          "1/√dₖ = {ratios} (the scale alone would make it {alone}).",
                    "zh": "第 0 步到达 {w} 的梯度不缩放时更大而不是更小：不缩放 ÷ 1/√dₖ = {ratios}（仅凭缩放应为 {alone}）。"},
    "grad_smaller": {"en": "At step 0 the gradient reaching {w} is smaller without the scale: unscaled ÷ 1/√dₖ = "
                           "{ratios}, although the scale alone would make it {alone}: saturation at initialisation "
                           "shrinks it by more than the missing 1/√dₖ enlarges it.",
                     "zh": "第 0 步到达 {w} 的梯度不缩放时更小：不缩放 ÷ 1/√dₖ = {ratios}，而仅凭缩放应为 {alone}："
                           "初始化时的饱和使它缩小的倍数超过了缺少 1/√dₖ 带来的放大。"},
    "grad_mixed": {"en": "At step 0 the gradient reaching {w} is larger without the scale at dₖ = {up} and smaller at "
                         "dₖ = {down}: unscaled ÷ 1/√dₖ = {ratios} (the scale alone: {alone}).",
                   "zh": "第 0 步到达 {w} 的梯度不缩放时在 dₖ = {up} 更大、在 dₖ = {down} 更小：不缩放 ÷ 1/√dₖ = {ratios}"
                         "（仅凭缩放：{alone}）。"},
    "sat_none": {"en": "No run fails within the budget.", "zh": "没有运行在预算内学不会。"},
    "sat_fails": {"en": "Of the {n} runs (Adam, and SGD at the tuned rate) that fail within the budget, {stayed} start "
                        "saturated (at least {thr:.0%} of query rows) and stay so, {became} become saturated during "
                        "training, {left} leave saturation and {never} are never saturated at a logged step; their "
                        "logit standard deviation goes from {s0} at step 0 to {s1} at the last logged step "
                        "(median ratio {g}).",
                  "zh": "在预算内学不会的 {n} 个运行（Adam，以及调好学习率的 SGD）中，{stayed} 个起初饱和（至少 {thr:.0%} 的查询行）"
                        "并保持饱和，{became} 个在训练中变得饱和，{left} 个离开饱和，{never} 个在任何记录步都不饱和；它们的 logit "
                        "标准差从第 0 步的 {s0} 变为最后记录步的 {s1}（中位比值 {g}）。"},
    "path_stayed": {"en": "Most of them start saturated and stay so.", "zh": "其中多数起初饱和并保持饱和。"},
    "path_became": {"en": "Most of them are not saturated at step 0 but become so as training goes on.",
                    "zh": "其中多数在第 0 步并不饱和，而是随训练变得饱和。"},
    "path_left": {"en": "Most of them start saturated and leave saturation.", "zh": "其中多数起初饱和，之后离开饱和。"},
    "path_never": {"en": "Most of them are never saturated at a logged step: saturation, counted this way, does not "
                         "explain those failures.",
                   "zh": "其中多数在任何记录步都不饱和：按这种计法，饱和解释不了这些失败。"},
    "grow_grows": {"en": "Their logits grow during training (median last ÷ first logit standard deviation ≥ {G:g}).",
                   "zh": "它们的 logit 在训练中增长（最后 ÷ 最初 logit 标准差的中位数 ≥ {G:g}）。"},
    "grow_shrinks": {"en": "Their logits shrink during training (median ratio ≤ 1/{G:g}).",
                     "zh": "它们的 logit 在训练中缩小（中位比值 ≤ 1/{G:g}）。"},
    "grow_steady": {"en": "Their logit spread stays within a factor {G:g} of where it started.",
                    "zh": "它们的 logit 离散程度保持在起点的 {G:g} 倍以内。"},
    "hyp_growth": {"en": "that growing logits are what saturate these rows, and that the saturated rows are what "
                         "stops them learning; an intervention (e.g. capping the logits) would test it.",
                   "zh": "是增长的 logit 使这些行饱和，而饱和的行使它们停止学习；需要干预实验（例如截断 logit）来检验。"},
    "sat_reaches": {"en": "The {n} runs that reach the target: logit standard deviation from {s0} to {s1} (median ratio "
                          "{g}), saturated fraction at the end {e}.",
                    "zh": "达到目标的 {n} 个运行：logit 标准差从 {s0} 变为 {s1}（中位比值 {g}），结束时饱和比例 {e}。"},
    "cap_learns": {"en": "At dₖ = {d_k} soft-cap 50 starts with {cap0} of its query rows saturated (unscaled: {un0}) and "
                         "still reaches the target on {r}/{n} seeds with Adam (unscaled: {ru}/{n}): starting saturated "
                         "does not by itself stop learning here.",
                   "zh": "dₖ = {d_k} 时软截断 50 起初有 {cap0} 的查询行饱和（不缩放：{un0}），用 Adam 仍有 {r}/{n} 个种子达到目标"
                         "（不缩放：{ru}/{n}）：在这里，起初饱和本身并不使学习停止。"},
    "cap_fails": {"en": "At dₖ = {d_k} soft-cap 50 starts with {cap0} of its query rows saturated (unscaled: {un0}) and "
                        "reaches the target on {r}/{n} seeds with Adam (unscaled: {ru}/{n}).",
                  "zh": "dₖ = {d_k} 时软截断 50 起初有 {cap0} 的查询行饱和（不缩放：{un0}），用 Adam 有 {r}/{n} 个种子达到目标"
                        "（不缩放：{ru}/{n}）。"},
    "cap_never": {"en": "Soft-cap 50 never starts with {thr:.0%} or more of its rows saturated here (step 0: {fracs}), "
                        "so this sweep does not test whether starting saturated stops learning.",
                  "zh": "这里软截断 50 起初饱和的行从未达到 {thr:.0%}（第 0 步：{fracs}），所以这次扫描没有检验起初饱和是否使学习停止。"},
    "hyp_cap": {"en": "the cap keeps the logits within ±50 while they grow (last logged logit standard deviation at "
                      "dₖ = {d_ks}: {cap} soft-capped against {un} unscaled), so its rows can leave saturation.",
                "zh": "截断使 logit 在增长时保持在 ±50 以内（dₖ = {d_ks} 最后记录的 logit 标准差：软截断 {cap}，不缩放 {un}），"
                      "所以它的行能离开饱和。"},
    "adam_only": {"en": "{pairs}: reach the target with Adam, but not with SGD at the tuned rate nor at their own best rate.",
                  "zh": "{pairs}：用 Adam 能达到目标，用 SGD 无论调好的学习率还是自身最佳学习率都达不到。"},
    "hyp_adam": {"en": "Adam divides each step by a running estimate of the gradient's size, so a gradient made large "
                       "or small by the scale matters less to it than to plain SGD.",
                 "zh": "Adam 用梯度大小的滑动估计去除每一步，所以缩放使梯度变大或变小对它的影响小于对普通 SGD。"},
    "sgd_only": {"en": "{pairs}: reach the target with SGD, but not with Adam at lr {lr:g}.",
                 "zh": "{pairs}：用 SGD 能达到目标，用学习率 {lr:g} 的 Adam 达不到。"},
    "zero": {"en": "Cells in which the W_Q/W_K gradient was exactly zero (every entry 0.0 in float32) at some logged "
                   "step: {n} of {total}, {div} of which diverged afterwards.",
             "zh": "在某个记录步上 W_Q/W_K 梯度恰好为 0（float32 中每个元素都是 0.0）的格子：{n}/{total}，其中 {div} 个随后发散。"},
    "small_zero": {"en": "Unscaled attention with Adam at dₖ = {d_k}: the gradient is exactly zero at a logged step in "
                         "{z}/{seeds} seeds.",
                   "zh": "dₖ = {d_k} 的不缩放注意力（Adam）：{z}/{seeds} 个种子在某个记录步上梯度恰好为 0。"},
    "small_falls": {"en": "The smallest logged ‖∇W_Q‖ of unscaled attention with Adam at dₖ = {d_k} is {smallest}, "
                          "against {first} at step 0 (seed mean): the gradient becomes smaller, not zero.",
                    "zh": "dₖ = {d_k} 的不缩放注意力（Adam）记录到的最小 ‖∇W_Q‖ 为 {smallest}，第 0 步为 {first}（种子平均）："
                          "梯度变小，但不为 0。"},
    "small_stays": {"en": "The logged ‖∇W_Q‖ of unscaled attention with Adam at dₖ = {d_k} never falls below its step-0 "
                          "value ({first}, seed mean; smallest {smallest}).",
                    "zh": "dₖ = {d_k} 的不缩放注意力（Adam）记录到的 ‖∇W_Q‖ 从未低于第 0 步的值（{first}，种子平均；最小 {smallest}）。"},
    "chain": {
        "en": ("Why the gradient reaching W_Q and W_K has the size it has at step 0. For the query row, "
               "dL/dq = s·Kᵀ J V δ and dL/dK = s·(J V δ) qᵀ with J = diag(p) − ppᵀ (times cap′ for soft-capping): "
               "the scale s multiplies the gradient, and Kᵀ J V — the p-weighted covariance of keys and values — "
               "vanishes as the row saturates, however large the keys. Prediction: ‖∇W_Q‖ ≈ C·s·RMS‖Kᵀ J V‖ and "
               "‖∇W_K‖ ≈ C′·s·RMS(‖q‖·‖Xᵀ J V‖), with C, C′ fitted once on {anchor} at dₖ = {anchor_dk}; "
               "δ = dL/do is left out (the same weights start every rule). Measured ÷ predicted ranges "
               "from {lo} to {hi} over {n} other (rule, dₖ) pairs, while s alone spans a factor {span}. "
               "The column 'scale alone' is the 1/√dₖ rule's measured gradient times s/s_ref, blind to "
               "saturation: for unscaled attention at dₖ = {big} it predicts ‖∇W_Q‖ = {blind}; "
               "with the Jacobian factor the prediction is {pred}; measured: {meas}."),
        "zh": ("为什么第 0 步到达 W_Q 与 W_K 的梯度是这个大小。对查询行，dL/dq = s·Kᵀ J V δ，dL/dK = s·(J V δ) qᵀ，"
               "其中 J = diag(p) − ppᵀ（软截断时再乘 cap′）：缩放 s 直接乘在梯度上；Kᵀ J V 是按 p 加权的键–值协方差，"
               "行一旦饱和它就趋于 0，无论键有多大。预测：‖∇W_Q‖ ≈ C·s·RMS‖Kᵀ J V‖，‖∇W_K‖ ≈ C′·s·RMS(‖q‖·‖Xᵀ J V‖)，"
               "C、C′ 只在 {anchor}、dₖ = {anchor_dk} 上拟合一次；δ = dL/do 不计入（各规则从相同权重出发）。"
               "实测 ÷ 预测在另外 {n} 组（规则, dₖ）上介于 {lo} 与 {hi} 之间，而 s 本身跨越 {span} 倍。"
               "“仅缩放”一列是 1/√dₖ 规则的实测梯度乘以 s/s_ref，对饱和视而不见：对 dₖ = {big} 的不缩放注意力，"
               "它预测 ‖∇W_Q‖ = {blind}；计入雅可比因子后预测为 {pred}；实测 {meas}。"),
    },
    "chain_rest": {
        "en": "What the prediction leaves out: the direction of δ relative to Kᵀ J V, and how the per-example "
              "gradients add up over the batch; both depend on the attention pattern, hence on the rule.",
        "zh": "预测没有计入的：δ 相对 Kᵀ J V 的方向，以及各样本梯度在批内如何叠加；两者都取决于注意力模式，因而取决于规则。",
    },
    "timing": {"en": "Measured run time: the {cells} cells took {cpu} CPU-seconds in all, {per} s of wall time per cell "
                     "on average (at most {most} s). {run}Times depend on the machine and how loaded it was.",
               "zh": "实测运行时间：{cells} 个格子共用 {cpu} CPU 秒，每格平均 {per} 秒墙钟时间（最多 {most} 秒）。{run}"
                     "时间取决于机器及其负载。"},
    "timing_run": {"en": "This run of the sweep took {wall} s of wall time (cells read from the cache cost nothing). ",
                   "zh": "这次扫描用了 {wall} 秒墙钟时间（从缓存读取的格子不计）。"},
    "alt_curves": {"en": "Accuracy, logit standard deviation and saturated rows over training ({opt}), per dₖ and rule",
                   "zh": "准确率、logit 标准差与饱和行比例随训练的变化（{opt}），按 dₖ 与规则"},
    "cap_curves": {"en": "{opt}. Thick: mean over the seeds still running; thin: each seed. Top: running training "
                         "accuracy (dotted: the one-key ceiling). Middle: the query rows' logit standard deviation "
                         "(log scale). Bottom: fraction of query rows whose largest weight exceeds {w:g}.",
                   "zh": "{opt}。粗线：仍在运行的种子的平均；细线：各种子。上：滑动训练准确率（虚线：单键上限）。中：查询行的 "
                         "logit 标准差（对数坐标）。下：最大权重超过 {w:g} 的查询行比例。"},
    "alt_chain": {"en": "Predicted vs measured gradient norm at initialisation", "zh": "初始化时梯度范数：预测与实测"},
    "cap_chain": {"en": "Each point a (rule, dₖ), mean over seeds, labelled by dₖ; the line is measured = predicted. "
                        "Filled: the chain-rule prediction; hollow: the scale alone, blind to saturation.",
                  "zh": "每点为一组（规则, dₖ），各种子平均，标注为 dₖ；直线为实测 = 预测。实心：链式法则的预测；"
                        "空心：仅凭缩放、对饱和视而不见的预测。"},
    "step": {"en": "step", "zh": "步"},
    "accuracy": {"en": "accuracy", "zh": "准确率"},
    "logit_sd": {"en": "logit sd", "zh": "logit 标准差"},
    "saturated": {"en": "saturated rows", "zh": "饱和行"},
    "predicted": {"en": "predicted", "zh": "预测"},
    "measured": {"en": "measured", "zh": "实测"},
    "h_rule": {"en": "rule", "zh": "规则"},
    "h_acc": {"en": "{opt}: acc", "zh": "{opt}：准确率"},
    "h_steps": {"en": "steps", "zh": "步数"},
    "h_verdict": {"en": "verdict", "zh": "判定"},
    "h_best_lr": {"en": "own best lr", "zh": "自身最佳学习率"},
    "sgd_ref": {"en": "SGD at 1/√dₖ's lr", "zh": "SGD（1/√dₖ 的学习率）"},
    "sgd_best": {"en": "SGD at it", "zh": "该学习率下 SGD"},
    "h_grad": {"en": "gradient", "zh": "梯度"},
    "h_maxp": {"en": "mean max p", "zh": "平均最大 p"},
    "h_ratio": {"en": "measured ÷ predicted", "zh": "实测 ÷ 预测"},
    "h_scale_only": {"en": "scale alone", "zh": "仅缩放"},
    "h_sd0": {"en": "logit sd, step 0", "zh": "logit 标准差，第 0 步"},
    "h_sd1": {"en": "logit sd, end", "zh": "logit 标准差，结束"},
    "h_sat0": {"en": "saturated, step 0", "zh": "饱和，第 0 步"},
    "h_sat1": {"en": "saturated, end", "zh": "饱和，结束"},
    "h_max0": {"en": "max logit, step 0", "zh": "最大 logit，第 0 步"},
    "h_max1": {"en": "max logit, end", "zh": "最大 logit，结束"},
    "h_reached": {"en": "reached", "zh": "达到"},
    "table_note": {"en": "Final accuracy: mean [min, max] over seeds on {n_eval} fresh samples. Steps: first step at "
                         "which the running training accuracy (window {window}, every batch fresh) reaches {target:g}, "
                         "mean over the seeds that reached it, and how many did. '÷' = diverged seeds.",
                   "zh": "最终准确率：在 {n_eval} 个新样本上，各种子的均值 [最小, 最大]。步数：滑动训练准确率（窗口 {window}，"
                         "每批都是新数据）首次达到 {target:g} 的步数，对达到者取平均，并给出达到的种子数。“÷” 为发散的种子数。"},
}

_t = functools.partial(localize, TEXT)


def render(env, lang: str) -> str:
    a = env.data["analysis"]
    s, f = a["setup"], a["findings"]
    names = _labels(s, lang)
    versus = _t("single_same" if a["single_key_is_prior"] else "single_above", lang, prior=a["prior_ceiling"])
    out = [_p("intro", lang, d_model=s["d_model"], heads=s["n_heads"], k=s["n_marked"], n=s["n_keys"],
              single=a["single_key_ceiling"], versus=versus, steps=s["steps"], batch=s["batch"], seeds=s["seeds"],
              cells=s["cells"], adam_lr=s["adam_lr"], sgd_lrs=", ".join(f"{v:g}" for v in s["sgd_lrs"]))]
    if env.quick:
        out.append(_p("quick", lang, steps=s["steps"], seeds=s["seeds"]))
    out += _reference(f["reference"], s, lang) + _tuning(a["sgd_tuning"], lang)
    for opt in ("adam", "sgd_reference_lr"):
        label = _opt(opt, lang)
        out.append(_figure(_curves_figure(a, opt, names, lang), _t("alt_curves", lang, opt=label),
                           _t("cap_curves", lang, opt=label, w=s["saturated_weight"])))
    out.append(_results_table(a["table"], names, lang))
    out.append(_note("table_note", lang, n_eval=s["final_eval"], window=s["log_every"], target=s["target_accuracy"]))
    out.append(f"<h3>{esc(_t('verdict_head', lang))}</h3>")
    out.append(_p("verdict_def", lang, target=s["target_accuracy"], like=s["like_reference_steps"], steps=s["steps"]))
    out += _verdict_lines(a["table"], names, lang)
    out.append(f"<h3>{esc(_t('findings', lang))}</h3>")
    out.append(_p("glance", lang, w=s["saturated_weight"]))
    out.append(_glance_table(a["table"], names, lang))
    if f["logit_sd_at_init"]:
        out.append(_p("why_sd", lang, pred=_join(f"{_n(r['predicted'])} (dₖ = {r['d_k']})" for r in f["logit_sd_at_init"]),
                      meas=_join(_n(r["measured"]) for r in f["logit_sd_at_init"])))
    out += _gradient(f["gradient_step0"], lang) + _saturation(f["saturation_path"], s, lang)
    out += _softcap(f["softcap"], s, lang) + _optimiser(f["optimiser"], s, names, lang) + _zero(f["zero_gradient"], lang)
    out += _chain(a["chain_rule"], names, lang)
    out.append(_timing(a["timing"], env.data.get("wall_s"), lang))
    return "\n".join(out)


# --- small formatting helpers ----------------------------------------------------------------------

def _p(key: str, lang: str, **kw) -> str:
    return f"<p>{esc(_t(key, lang, **kw))}</p>"


def _note(key: str, lang: str, **kw) -> str:
    return f"<p class='note'>{esc(_t(key, lang, **kw))}</p>"


def _hyp(key: str, lang: str, **kw) -> str:
    return f"<p class='hypothesis'><em>{esc(HYP.get(lang, HYP['en']))}</em>{esc(_t(key, lang, **kw))}</p>"


def _n(x, spec: str = ".3g") -> str:
    return number(x, spec)


def _join(items) -> str:
    return ", ".join(items)


def _range(spread: dict, spec: str = ".2f") -> str:
    if spread["min"] is None:
        return number(None)
    lo, hi = number(spread["min"], spec), number(spread["max"], spec)
    return lo if lo == hi else f"{lo}–{hi}"


def _labels(setup: dict, lang: str) -> dict[str, str]:
    """The report's one label table (report.text), soft-cap labels filled with the sweep's own cap."""
    return {rule: t(f"rule_{rule}", lang).format(cap=setup["caps"].get(rule, 0)) for rule in setup["rules"]}


def _opt(which: str, lang: str) -> str:
    return _t("opt_adam" if which == "adam" else "opt_sgd", lang)


def _figure(fig, alt: str, caption: str) -> str:
    return figure_svg(fig, alt, caption)


def _verdict(s: dict, lang: str) -> str:
    if s["verdict"] is None:
        return number(None)
    word = _t(f"v_{s['verdict']}", lang)
    if s["verdict"] == "slower" and s["steps_ratio"] is not None:
        word += f" ({_t('ratio', lang, r=_n(s['steps_ratio'], '.2g'))})"
    return f"{word} {s['seeds_agreeing']}/{s['seeds']}"


def _acc(s: dict) -> str:
    a = s["final_accuracy"]
    div = f" ÷{s['diverged']}" if s["diverged"] else ""
    return f"{_n(a['mean'], '.2f')} [{_n(a['min'], '.2f')}, {_n(a['max'], '.2f')}]{div}"


def _steps(s: dict) -> str:
    if not s["reached"]:
        return f"— 0/{s['seeds']}"
    return f"{_n(s['steps_to_target']['mean'], '.0f')} {s['reached']}/{s['seeds']}"


def _lr(s: dict) -> str:
    mark = {"low": "‹", "high": "›"}.get(s.get("edge"), "")
    return f"{mark}{s['lr']:g}"


# --- the parts of the chapter ----------------------------------------------------------------------

def _reference(ref: dict, s: dict, lang: str) -> list[str]:
    if ref["reached_everywhere"]:
        return []
    if ref["reached_nowhere"]:
        return [_p("ref_none", lang, steps=s["steps"], target=s["target_accuracy"])]
    where = _join(f"{'Adam' if r['optimiser'] == 'adam' else 'SGD'} lr {r['lr']:g}, dₖ = {r['d_k']}: "
                  f"{r['reached']}/{r['seeds']}" for r in ref["rows"])
    return [_p("ref_some", lang, target=s["target_accuracy"], where=where)]


def _tuning(tuning: list[dict], lang: str) -> list[str]:
    lrs = _join(f"dₖ = {r['d_k']}: {_lr(r)}" for r in tuning)
    edges = [str(r["d_k"]) for r in tuning if r["edge"]]
    said = _t("tuned_edge", lang, d_ks=", ".join(edges)) if edges else _t("tuned_inside", lang)
    return [f"<p>{esc(_t('tuned', lang, lrs=lrs))} {esc(said)} {esc(_t('tuned_note', lang))}</p>"]


def _results_table(rows: list[dict], names: dict, lang: str) -> str:
    header = [_t("h_rule", lang), "dₖ", _t("h_acc", lang, opt="Adam"), _t("h_steps", lang), _t("h_verdict", lang),
              _t("h_acc", lang, opt=_t("sgd_ref", lang)), _t("h_steps", lang), _t("h_verdict", lang),
              _t("h_best_lr", lang), _t("h_acc", lang, opt=_t("sgd_best", lang)), _t("h_steps", lang)]
    body = [[names[r["rule"]], r["d_k"], _acc(r["adam"]), _steps(r["adam"]), _verdict(r["adam"], lang),
             _acc(r["sgd_reference_lr"]), _steps(r["sgd_reference_lr"]), _verdict(r["sgd_reference_lr"], lang),
             _lr(r["sgd_best_lr"]), _acc(r["sgd_best_lr"]), _steps(r["sgd_best_lr"])] for r in rows]
    return table(header, body, cls="numeric")


def _verdict_lines(rows: list[dict], names: dict, lang: str) -> list[str]:
    items = []
    for rule in dict.fromkeys(r["rule"] for r in rows):
        for opt in ("adam", "sgd_reference_lr"):
            mine = [r for r in rows if r["rule"] == rule]
            said = _join(f"dₖ = {r['d_k']}" + (f" (lr {r[opt]['lr']:g})" if opt != "adam" else "") +
                         f" {_verdict(r[opt], lang)}" for r in mine)
            items.append(f"<li>{esc(_t('v_line', lang, rule=names[rule], opt=_opt(opt, lang), items=said))}</li>")
    return [f"<ul>{''.join(items)}</ul>"]


def _glance_table(rows: list[dict], names: dict, lang: str) -> str:
    header = [_t("h_rule", lang), "dₖ", _t("h_sd0", lang), _t("h_sd1", lang), _t("h_sat0", lang), _t("h_sat1", lang),
              _t("h_max0", lang), _t("h_max1", lang), _t("h_reached", lang)]
    body = [[names[r["rule"]], r["d_k"], _range(r["adam"]["start"]["logit_std"], ".3g"),
             _range(r["adam"]["end"]["logit_std"], ".3g"), _range(r["adam"]["start"]["saturated_frac"]),
             _range(r["adam"]["end"]["saturated_frac"]), _range(r["adam"]["start"]["max_logit"], ".3g"),
             _range(r["adam"]["end"]["max_logit"], ".3g"), f"{r['adam']['reached']}/{r['adam']['seeds']}"] for r in rows]
    return table(header, body, cls="numeric")


def _gradient(finding: dict, lang: str) -> list[str]:
    out = []
    for which, label in (("grad_wq", "W_Q"), ("grad_wk", "W_K")):
        g = finding[which]
        if g["direction"] is None:
            continue
        ratios = _join(f"{_n(r['ratio'], '.2f')}× (dₖ = {r['d_k']})" for r in g["rows"])
        alone = _join(f"{_n(r['scale_alone'], '.3g')}×" for r in g["rows"])
        out.append(_p(f"grad_{g['direction']}", lang, w=label, ratios=ratios, alone=alone,
                      up=", ".join(map(str, g["larger_at"])), down=", ".join(map(str, g["smaller_at"]))))
    return out


def _saturation(finding: dict, s: dict, lang: str) -> list[str]:
    fails, reaches = finding["fails"], finding["reaches"]
    out = []
    if not fails["runs"]:
        out.append(_p("sat_none", lang))
    else:
        path = fails["dominant_path"]
        text = _t("sat_fails", lang, n=fails["runs"], thr=s["saturated_run"], s0=_range(fails["logit_std_start"], ".3g"),
                  s1=_range(fails["logit_std_end"], ".3g"), g=_n(fails["growth_median"], ".2g"),
                  stayed=fails["stayed_saturated"], became=fails["became_saturated"], left=fails["left_saturation"],
                  never=fails["never_saturated"])
        growth = _t(f"grow_{fails['growth']}", lang, G=s["logit_growth"]) if fails["growth"] else ""
        out.append(f"<p>{esc(text)} {esc(_t('path_' + path, lang))} {esc(growth)}</p>")
        if fails["growth"] == "grows" and path == "became":
            out.append(_hyp("hyp_growth", lang))
    if reaches["runs"]:
        out.append(_p("sat_reaches", lang, n=reaches["runs"], s0=_range(reaches["logit_std_start"], ".3g"),
                      s1=_range(reaches["logit_std_end"], ".3g"), g=_n(reaches["growth_median"], ".2g"),
                      e=_range(reaches["saturated_end"])))
    return out


def _softcap(finding: dict, s: dict, lang: str) -> list[str]:
    rows = {r["d_k"]: r for r in finding["rows"]}
    if not rows:
        return []
    out = []
    for key, d_ks in (("cap_learns", finding["saturated_yet_learns"]), ("cap_fails", finding["saturated_and_fails"])):
        for d_k in d_ks:
            r = rows[d_k]
            out.append(_p(key, lang, d_k=d_k, cap0=_n(r["softcap_saturated_start"], ".2f"),
                          un0=_n(r["unscaled_saturated_start"], ".2f"), r=r["softcap_reached"], n=r["seeds"],
                          ru=r["unscaled_reached"]))
    if not out:
        fracs = _join(f"{_n(r['softcap_saturated_start'], '.2f')} (dₖ = {d})" for d, r in rows.items())
        return [_p("cap_never", lang, thr=s["saturated_run"], fracs=fracs)]
    lower = finding["learns_with_lower_logits"]
    if lower:
        out.append(_hyp("hyp_cap", lang, d_ks=", ".join(map(str, lower)),
                        cap=_join(_n(rows[d]["softcap_logit_std_end"]) for d in lower),
                        un=_join(_n(rows[d]["unscaled_logit_std_end"]) for d in lower)))
    return out


def _optimiser(finding: dict, s: dict, names: dict, lang: str) -> list[str]:
    pairs = lambda items: _join(f"{names[i['rule']]} dₖ = {i['d_k']}" for i in items)  # noqa: E731
    out = []
    if finding["adam_only"]:
        out += [_p("adam_only", lang, pairs=pairs(finding["adam_only"])), _hyp("hyp_adam", lang)]
    if finding["sgd_only"]:
        out.append(_p("sgd_only", lang, pairs=pairs(finding["sgd_only"]), lr=s["adam_lr"]))
    return out


def _zero(finding: dict, lang: str) -> list[str]:
    out = [_p("zero", lang, n=finding["cells"], total=finding["total"], div=finding["cells_then_diverged"])]
    if finding["group_zero"]:
        out.append(_p("small_zero", lang, d_k=finding["d_k"], z=finding["group_zero"], seeds=finding["group_seeds"]))
    elif finding["falls_below_start"] is not None:
        out.append(_p("small_falls" if finding["falls_below_start"] else "small_stays", lang, d_k=finding["d_k"],
                      smallest=_n(finding["smallest_grad_wq"], ".2g"), first=_n(finding["step0_grad_wq"], ".2g")))
    return out


def _chain(chain: dict, names: dict, lang: str) -> list[str]:
    summary = chain.get("summary")
    if not chain["rows"] or summary is None:
        return []
    quoted = summary["quoted"] or {}
    out = [_p("chain", lang, anchor=names[chain["anchor"]["rule"]], anchor_dk=chain["anchor"]["d_k"],
              lo=_n(summary["ratio_min"], ".2f"), hi=_n(summary["ratio_max"], ".2f"), n=summary["pairs"],
              span=_n(summary["factor_span"], ".0f"), big=quoted.get("d_k"), blind=_n(quoted.get("scale_only")),
              pred=_n(quoted.get("predicted")), meas=_n(quoted.get("measured")))]
    out.append(_figure(_chain_figure(chain["rows"], names, lang), _t("alt_chain", lang), _t("cap_chain", lang)))
    header = [_t("h_grad", lang), _t("h_rule", lang), "dₖ", "s", _t("logit_sd", lang), _t("h_maxp", lang),
              _t("h_scale_only", lang), _t("predicted", lang), _t("measured", lang), _t("h_ratio", lang)]
    body = [["W_Q" if r["gradient"] == "grad_wq" else "W_K", names[r["rule"]], r["d_k"], _n(r["factor"], ".4g"),
             _n(r["logit_std"], ".2f"), _n(r["max_weight_mean"], ".3f"), _n(r["scale_only"]), _n(r["predicted"]),
             _n(r["measured"]), _n(r["ratio"], ".2f")] for r in chain["rows"]]
    # at a glance the largest d_k (where the rules differ most); every row behind a <details>
    top = max(r["d_k"] for r in chain["rows"])
    glance = [row for row, r in zip(body, chain["rows"]) if r["d_k"] == top]
    return out + [table_with_details(header, body, glance, lang, cls="numeric"), _p("chain_rest", lang)]


def _timing(timing: dict, wall_s, lang: str) -> str:
    run = _t("timing_run", lang, wall=_n(wall_s, ".0f")) if wall_s is not None else ""
    return _note("timing", lang, cells=timing["timed"], cpu=_n(timing["cpu_s"], ".0f"),
                 per=_n(timing["wall_s_per_cell"], ".2g"), most=_n(timing["wall_s_max"], ".2g"), run=run)


# --- figures: drawn from the analysis' curves and chain-rule rows only ---------------------------------

def _curves_figure(a: dict, opt: str, names: dict, lang: str):
    from attnscale.report.figures import SERIES, style

    setup = a["setup"]
    choice = "adam" if opt == "adam" else "tuned_for_reference"
    curves = [c for c in a["curves"] if c["lr_choice"] == choice]
    metrics = ("accuracy", "logit_std", "saturated_frac")
    with style() as plt:
        fig, axes = plt.subplots(3, len(setup["d_ks"]), figsize=(4.1 * len(setup["d_ks"]), 7.6), sharex=True,
                                 squeeze=False, constrained_layout=True)
        for col, d_k in enumerate(setup["d_ks"]):
            for i, rule in enumerate(setup["rules"]):
                color = SERIES[i % len(SERIES)]
                for c in (c for c in curves if c["rule"] == rule and c["d_k"] == d_k):
                    for row, key in enumerate(metrics):
                        ax = axes[row][col]
                        for seed in c["per_seed"][key]:
                            ax.plot(c["steps"][:len(seed)], [_nan(v) for v in seed], color=color, lw=0.6, alpha=0.35)
                        ax.plot(c["steps"], [_nan(v) for v in c["mean"][key]], color=color, lw=1.6,
                                label=names[rule] if row == 0 else None)
            axes[0][col].axhline(a["single_key_ceiling"], color="#5d6677", ls=":", lw=1)
            axes[0][col].set_title(f"dₖ = {d_k}")
            axes[0][col].set_ylim(0, 1.02)
            axes[1][col].set_yscale("log")
            axes[2][col].set_ylim(-0.02, 1.02)
            axes[2][col].set_xlabel(_t("step", lang))
        for row, key in enumerate(("accuracy", "logit_sd", "saturated")):
            axes[row][0].set_ylabel(_t(key, lang))
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncol=max(1, len(labels)))
    return fig


def _nan(v):
    return float("nan") if v is None else v


def _chain_figure(rows: list[dict], names: dict, lang: str):
    from attnscale.report.figures import SERIES, style

    rules = list(dict.fromkeys(r["rule"] for r in rows))
    with style() as plt:
        fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.8), constrained_layout=True)
        for ax, which in zip(axes, ("grad_wq", "grad_wk")):
            sel = [r for r in rows if r["gradient"] == which and r["predicted"] and r["measured"]]
            for i, rule in enumerate(rules):
                pts = [r for r in sel if r["rule"] == rule]
                color = SERIES[i % len(SERIES)]
                ax.scatter([r["predicted"] for r in pts], [r["measured"] for r in pts], color=color,
                           label=names[rule], s=28)
                # Hollow: the scale alone (blind to saturation), on the same row as the full prediction.
                blind = [r for r in pts if r["scale_only"]]
                ax.scatter([r["scale_only"] for r in blind], [r["measured"] for r in blind], facecolors="none",
                           edgecolors=color, s=28, lw=0.9)
                for r in pts:
                    ax.annotate(str(r["d_k"]), (r["predicted"], r["measured"]), fontsize=7, xytext=(3, 2),
                                textcoords="offset points", color="#5d6677")
            values = [v for r in sel for v in (r["predicted"], r["measured"], r["scale_only"]) if v]
            if values:
                lo, hi = min(values) / 1.5, max(values) * 1.5
                ax.plot([lo, hi], [lo, hi], color="#1d2330", lw=0.8)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_title("‖∇W_Q‖" if which == "grad_wq" else "‖∇W_K‖")
            ax.set_xlabel(_t("predicted", lang))
            ax.set_ylabel(_t("measured", lang))
        axes[0].legend(loc="upper left", fontsize=8)
    return fig
