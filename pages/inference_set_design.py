import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from components import charts, download, layout, state
from components.runner import run_or_stop
from engine import inference_set_design as eng

SLUG = "inference-set-design"
layout.paper_header(
    SLUG,
    idea=(
        "A screening campaign must hand over one label for **every** candidate in a fixed library. Each "
        "label is either measured in the lab (the observation set) or predicted by a model (the inference "
        "set), so what counts is the accuracy of the whole hybrid table, the *system accuracy*, not the "
        "model's test accuracy. When some candidates are much harder than others, the cheapest route is to "
        "spend experiments on the ones the model is least sure about: what is left to predict becomes easy, "
        "even if the model itself hardly improves. A stopping rule scores the model on each freshly labelled "
        "batch (the hardest remaining examples), turns that into a confident lower bound on the table's "
        "accuracy, and halts once the bound clears the target."
    ),
    caveat=(
        "Small scale: scikit-learn's 8×8 digits (pool of 1,500) with synthetic difficulty instead of the "
        "paper's image, molecule and cell-painting assays, and a one-hidden-layer MLP retrained from scratch "
        "each round. The stopping statistic is our reading of the paper (accuracy on the acquired batch, "
        "Clopper–Pearson lower bound)."
    ),
)
cfg = state.bind_config(eng.Config, SLUG)
state.share_link(cfg)
layout.device_indicator()
res = run_or_stop("engine.inference_set_design", cfg, label="Running both acquisition campaigns")
layout.claims_panel(eng.claims(res))

act, rnd = res.agents["active"], res.agents["random"]

# 1. system accuracy vs fraction acquired, with certified lower bounds and stops
fig = go.Figure()
for name, tr, color in (("active", act, charts.COLORS[0]), ("random", rnd, charts.COLORS[1])):
    x = np.append(tr.frac, 1.0)
    fig.add_trace(go.Scatter(x=x, y=np.append(tr.sa, 1.0), name=f"{name}: system accuracy",
                             mode="lines+markers", line=dict(color=color, width=2)))
    fig.add_trace(go.Scatter(x=tr.frac_next, y=tr.sa_lb, name=f"{name}: certified lower bound",
                             mode="lines", line=dict(color=color, dash="dash", width=1.5)))
    s = tr.stop_round
    fig.add_trace(go.Scatter(x=[tr.frac_next[s]], y=[tr.sa_delivered[s]],
                             name=f"{name}: stop" if tr.halted else f"{name}: no stop (all labels)",
                             mode="markers", marker=dict(color=color, size=14, symbol="star")))
fig.add_hline(y=cfg.target, line_dash="dot", line_color="grey", annotation_text="target τ")
fig.update_xaxes(title="fraction of the pool labelled")
fig.update_yaxes(title="system accuracy")
charts.show(charts.themed(fig, "System accuracy of the hybrid table (stars: where the rule stops)", 420),
            key="sa")


def frame(tr, name):
    return pd.DataFrame({"agent": name, "round": np.arange(len(tr.frac)), "frac_labelled": tr.frac,
                         "system_acc": tr.sa, "hidden_acc": tr.hidden_acc, "test_acc": tr.test_acc,
                         "frac_after_batch": tr.frac_next, "batch_acc": tr.batch_acc,
                         "certified_sa_lb": tr.sa_lb, "delivered_sa": tr.sa_delivered,
                         "naive_confidence_sa": tr.sa_naive, "hard_share_in_batch": tr.batch_hard,
                         "is_stop": np.arange(len(tr.frac)) == tr.stop_round})


table = pd.concat([frame(act, "active"), frame(rnd, "random")], ignore_index=True)
download.download_csv(table, "inference_set_design_rounds.csv", label="Download per-round numbers (CSV)")

c1, c2 = st.columns(2)
with c1:
    charts.show(charts.lines({"active: inference set": act.frac, "random: inference set": rnd.frac,
                              "active: test": act.frac, "random: test": rnd.frac},
                             {"active: inference set": act.hidden_acc, "random: inference set": rnd.hidden_acc,
                              "active: test": act.test_acc, "random: test": rnd.test_acc},
                             title="Accuracy on the inference set vs on a held-out test set",
                             xlabel="fraction of the pool labelled", ylabel="accuracy", mode="lines+markers"),
                key="acc")
with c2:
    charts.show(charts.lines({"active": act.frac, "random": rnd.frac},
                             {"active": act.batch_hard, "random": rnd.batch_hard},
                             title="Share of corrupted examples in each acquired batch",
                             xlabel="fraction labelled before the batch", ylabel="share corrupted",
                             mode="lines+markers"), key="hard")

if len(res.grid_images):
    st.markdown("**The 16 least-confident unlabelled images at round 2 (active agent)**: "
                "oracle label / model prediction, then the model's confidence.")
    # compact titles: eight images side by side leave about 50 px each on a phone
    titles = [f"{int(lab)}/{int(p)} {c:.2f}".replace(" 0.", " .") for lab, p, c in
              zip(res.grid_labels, res.grid_preds, res.grid_conf)]
    charts.show(charts.image_grid(list(res.grid_images), titles, cols=8, diverging=False, height_per_row=140), key="grid")
    download.download_json({"images": res.grid_images, "labels": res.grid_labels, "preds": res.grid_preds,
                            "confidence": res.grid_conf}, "least_confident_round2.json",
                           label="Download the image grid (JSON)")

layout.how_it_works(r"""
**Pool and split.** Pool $\mathcal X$ of $N$ candidates; after round $t$ the observed set $O_t$ has oracle
labels, the inference set $H_t=\mathcal X\setminus O_t$ gets the predictions of a model $f_t$ trained from
scratch on $O_t$.

**Objective (system accuracy).**
$$\mathrm{SA}_t=\frac{|O_t|+\sum_{x\in H_t}\mathbf 1[\arg\max_k p_k(x)=y(x)]}{N}.$$
The test accuracy of $f_t$ is logged for comparison only.

**Acquisition.** Normalised least confidence $u(x)=\tfrac{K}{K-1}\bigl(1-\max_k p_k(x)\bigr)$; the active agent
labels the $b$ examples of $H_t$ with the largest $u$ (a share $\rho$ of the batch may be drawn at random);
the random agent draws $b$ uniformly.

**Stopping rule.** When the labels of batch $B_t$ arrive, count the $k$ that $f_t$ got right. For the active agent $B_t$ held
the hardest remaining examples, so $k/b$ is a pessimistic estimate of $f_t$'s accuracy on what is left; for the
random agent $B_t$ is a uniform draw and $k/b$ is unbiased (the same rule is applied to both). Its one-sided Clopper–Pearson bound $a^{\rm LB}_t=\mathrm{Beta}^{-1}(\delta;\,k,\,b-k+1)$ gives a certified
$$\mathrm{SA}^{\rm LB}_t=\frac{|O_{t+1}|+|H_{t+1}|\,a^{\rm LB}_t}{N},$$
and the campaign stops at the first $t$ with $\mathrm{SA}^{\rm LB}_t\ge\tau$, delivering $O_{t+1}$ plus
$f_t$'s predictions on $H_{t+1}$. Only labels of acquired batches are used; the engine keeps going to the end so
that the curves can be drawn past the stop.

**Difficulty.** `label689`: digits 6, 8 and 9 carry a label drawn at random from {6, 8, 9} (about 30% of the pool,
irreducible for any model); `hide_bottom`: 30% of the images lose their lower half.
""")
