"""CalNF: a failure distribution from a handful of samples, calibrated inside one conditional flow."""

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from components import charts, download, layout, state
from components.runner import run_or_stop
from engine import calnf as eng

SLUG = "calnf"

layout.paper_header(
    SLUG,
    idea=(
        "A system that fails rarely leaves thousands of nominal examples and only a few failure examples. "
        "A density model fitted to the few failures memorises them; one fitted to everything drowns them in "
        "nominal data; tying the two with a penalty needs a hand-tuned weight. CalNF trains **one** "
        "conditional normalizing flow $q(x; c)$ for a whole family of distributions: label $c = 0$ is the "
        "nominal data, each one-hot label $e_j$ is a fit to a bootstrap resample of the failure points, and a free "
        "*calibrated* label $c^*$, optimised on its own with the flow held fixed, explains the full failure "
        "set. Because the same smooth network must serve every label, the failure model borrows shape from "
        "the nominal model and from the subsample fits instead of collapsing onto the training points. "
        "Below, the flow is a small RealNVP trained live on two interleaved moons: nominal (top) and failure "
        "(bottom)."
    ),
    caveat="Toy scale: a 2-D density-estimation problem replaces the paper's posterior inference in air-traffic, "
           "UAV and seismic models, and a 6-layer RealNVP replaces neural spline flows. The paper's headline — "
           "CalNF beating every regularised and unregularised baseline — is measured in 'Compare all' and reported "
           "as measured, whichever way it comes out.",
)

cfg = state.bind_config(eng.Config, SLUG)
state.share_link(cfg)
layout.device_indicator()
res = run_or_stop("engine.calnf", cfg, label="Training the flows")
layout.claims_panel(eng.claims(res))
m = res.metrics

names = {"calnf": "CalNF q(·; c*)", "plain": "plain conditional flow", "failure_only": "failure points only",
         "pooled": "all points pooled", "betanf": f"β-NF (β = {cfg.beta:g})"}
# the shared prefix goes in a caption: repeated in each label it cut the method names off at four columns
st.caption("Held-out failure log-likelihood per method (nats per point, clipped at −10; higher is better):")
c1, c2, c3, c4 = st.columns(4)
for col, k in zip((c1, c2, c3, c4), ("calnf", "plain", "failure_only", "pooled")):
    col.metric(names[k], f"{m[f'held_fail_clip_{k}']:.2f}",
               help="mean log-likelihood per held-out failure point, each clipped at −10 nats")
st.caption("Energy distance from 2 000 samples of each method's failure model to the held-out failures (lower "
           "is better; 0 for the same distribution): " + "; ".join(
               f"{names[k]} {m[f'energy_{k}']:.3g}" for k in ("calnf", "plain", "failure_only", "pooled")) + ".")
others = {k: m[f"held_fail_clip_{k}"] for k in ("plain", "failure_only", "pooled")}
better = [names[k] for k, v in others.items() if v >= m["held_fail_clip_calnf"]]
if better:
    st.info("The paper's headline — CalNF beats every baseline on held-out failure likelihood — is **not "
               f"reproduced at this scale** on this run: {', '.join(better)} scored at least as high. "
               "(The same flow, data and number of steps for every method.)", icon=":material/science:")
else:
    st.success("On this run CalNF has the highest held-out failure likelihood of the four methods.")

st.subheader("1 · Densities learned by the one flow")
g = res.grid_x
# titles on two lines, y tick labels on the first panel only and no x tick at a panel's edge: three panels side by
# side leave about 100 px each on a phone, where one-line titles and the edge ticks ran into their neighbours'
fig = make_subplots(rows=1, cols=3, subplot_titles=("CalNF nominal<br>q(·;0)", "CalNF failure<br>q(·;c*)",
                                                    "plain flow<br>q(·;1)"),
                    horizontal_spacing=0.04, shared_yaxes=True)
for i, d in enumerate((res.dens_nominal, res.dens_cal, res.dens_plain)):
    fig.add_trace(go.Heatmap(z=d, x=g, y=g, colorscale=charts.SEQUENTIAL, showscale=False), row=1, col=i + 1)
    fig.add_trace(go.Scatter(x=res.nominal[:300, 0], y=res.nominal[:300, 1], mode="markers", name="nominal",
                             marker=dict(size=2, color="#d0d0d0"), showlegend=i == 0), row=1, col=i + 1)
    fig.add_trace(go.Scatter(x=res.held_failure[:200, 0], y=res.held_failure[:200, 1], mode="markers",
                             name="held-out failure", marker=dict(size=2, color="#f4a300"), showlegend=i == 0),
                  row=1, col=i + 1)
    fig.add_trace(go.Scatter(x=res.failure[:, 0], y=res.failure[:, 1], mode="markers", name="training failure",
                             marker=dict(size=8, color="#e4572e", symbol="x"), showlegend=i == 0), row=1, col=i + 1)
charts.themed(fig, None, 400, margin_t=84)       # room for the two-line panel titles under the legend
fig.update_layout(legend_itemsizing="constant")   # 2-px points would give invisible legend swatches
fig.update_xaxes(tickvals=[-1, 0, 1])
charts.show(fig, key="dens")
st.caption("Right: the failure model q(·;1) of the plain conditional flow, trained on the same nominal and failure "
           "data without the calibration.")
download.download_json({"grid": g, "nominal_density": res.dens_nominal, "calibrated_density": res.dens_cal,
                        "plain_failure_density": res.dens_plain, "nominal_points": res.nominal,
                        "failure_points": res.failure, "held_out_failure_points_shown": res.held_failure[:200]},
                       "calnf_densities.json")

st.subheader("2 · The family between nominal and each subsample fit")
K_show, L = res.dens_family.shape[:2]
titles = [f"e{j + 1}, λ={lam:g}" for j in range(K_show) for lam in res.family_lambdas]
fig = make_subplots(rows=K_show, cols=L, subplot_titles=titles, horizontal_spacing=0.02, vertical_spacing=0.08)
for j in range(K_show):
    for k in range(L):
        fig.add_trace(go.Heatmap(z=res.dens_family[j, k], x=g, y=g, colorscale=charts.SEQUENTIAL, showscale=False),
                      row=j + 1, col=k + 1)
fig.update_xaxes(showticklabels=False)
fig.update_yaxes(showticklabels=False)
charts.themed(fig, "q(·; λ·e_j) for the first subsample labels", 170 * K_show + 60)
charts.mark_grid(fig, K_show * L, K_show, L, mode="band", hs=0.02, vs=0.08)   # phone: λ columns in chunks
charts.show(fig, key="family")
download.download_json({"lambdas": res.family_lambdas, "densities": res.dens_family}, "calnf_family.json")

st.subheader("3 · Calibrated label and training curves")
left, right = st.columns([0.35, 0.65])
with left:
    K = len(res.c_star)
    fig = charts.bars([f"c*{j + 1}" for j in range(K)], res.c_star, title="Learned c* (start: 1/K each)")
    fig.add_hline(y=1.0 / K, line_dash="dot")
    charts.show(fig, key="cstar")
    download.download_csv(pd.DataFrame({"component": np.arange(1, K + 1), "c_star": res.c_star}), "calnf_cstar.csv")
with right:
    fig = charts.lines(res.curve_steps, {names[k]: v for k, v in res.curves.items()},
                       title="Failure LL during training: held-out points solid (clipped), the training failure "
                             "points dotted (plain mean)", xlabel="step", ylabel="nats")
    for i, k in enumerate(res.curves):   # each method's training curve, grouped with its held-out one
        if len(res.curves_train.get(k, [])):
            fig.data[i].legendgroup = names[k]
            fig.add_trace(go.Scatter(x=res.curve_steps, y=res.curves_train[k], name=f"{names[k]} (training)",
                                     legendgroup=names[k], showlegend=False, mode="lines",
                                     line=dict(color=fig.data[i].line.color, width=1.5, dash="dot")))
    charts.show(fig, key="curves")
    download.download_csv(pd.DataFrame({"step": res.curve_steps,
                                        **{f"heldout_{k}": v for k, v in res.curves.items()},
                                        **{f"train_{k}": v for k, v in res.curves_train.items()}}),
                          "calnf_curves.csv")

left, right = st.columns(2)
with left:
    fig = charts.lines(res.roc_fpr, {f"CalNF, log q(x; c*) − log q(x; 0) (AUC {m['auc']:.3f})": res.roc_tpr},
                       title="ROC: held-out failure vs nominal", xlabel="false-positive rate",
                       ylabel="true-positive rate")
    for k, (f, t) in res.roc_others.items():  # the conditional baselines' own score, log q(x; 1) − log q(x; 0)
        fig.add_trace(go.Scatter(x=f, y=t, mode="lines", name=f"{names[k]}, log q(x; 1) − log q(x; 0) "
                                                                f"(AUC {m[f'auc_{k}']:.3f})",
                                 line=dict(width=2, dash="dash")))
    charts.show(fig, key="roc")
    download.download_csv(pd.concat([pd.DataFrame({"method": "calnf", "fpr": res.roc_fpr, "tpr": res.roc_tpr})]
                                    + [pd.DataFrame({"method": k, "fpr": f, "tpr": t})
                                       for k, (f, t) in res.roc_others.items()], ignore_index=True), "calnf_roc.csv")
with right:
    if res.compare:
        keys = list(res.compare)
        means = [m[f"compare_mean_{k}"] for k in keys]
        errs = [m[f"compare_sd_{k}"] for k in keys]
        fig = charts.bars([names[k] for k in keys], means, errors=errs,
                          title="Held-out failure LL over 3 seeds (clipped; mean ± sd)", ylabel="nats")
        charts.show(fig, key="compare")
        download.download_csv(pd.DataFrame([{"method": k, "seed": i, "heldout_ll_clipped": v}
                                            for k in keys for i, v in enumerate(res.compare[k])]),
                              "calnf_compare.csv")
        best_other = max((k for k in keys if k != "calnf"), key=lambda k: m[f"compare_mean_{k}"])
        if m["compare_mean_calnf"] > m[f"compare_mean_{best_other}"]:
            st.success(f"CalNF has the best mean held-out failure likelihood of the {len(keys)} methods here.")
        else:
            st.info(f"Paper's advantage not reproduced at this scale: {names[best_other]} has a higher mean "
                       "held-out failure likelihood than CalNF over these three seeds.")
    else:
        st.caption("Tick *Compare all* under Advanced to add β-NF and average every method over three seeds "
                   f"(fifteen flows: with these failure points and K, at most {eng.most_steps(cfg, True):,} training "
                   "steps fit the page's time budget; the spec's comparison goes up to 1 000).")

layout.how_it_works(r"""
**Flow.** Six affine coupling layers alternate which coordinate they change:
$y_d = x_d\, e^{s(x_{\bar d}, c)} + t(x_{\bar d}, c)$ with $s = 2\tanh(\cdot)$ from a small MLP that also reads the
label $c \in \mathbb R^K$. The base is $\mathcal N(0, I)$, so
$\log q(x; c) = \log \mathcal N(f(x; c); 0, I) + \sum_{\text{layers}} s$.

**Training step (CalNF).** (1) Calibration: one Adam step on $c^*$ for
$-\tfrac1{n_t}\sum_{x \in D_t} \log q(x; c^*)$ with the flow fixed. (2) Flow: one Adam step on

$$
-\,\overline{\log q(x; 0)}_{D_0\text{ batch}} \;-\; \frac1K \sum_{j=1}^K \overline{\log q(x; e_j)}_{S_j}
\;-\; \overline{\log q(x; \operatorname{sg}[c^*])}_{D_t},
$$

where $S_j$ are bootstrap resamples of the failure set ($n_t$ draws with replacement each) and sg stops the
gradient, plus a self-regularisation term $\mathrm{KL}(q(\cdot; e_a)\,\|\,q(\cdot; e_b))$ for one random pair
$a \ne b$ per step (reparameterised Monte Carlo, 100 samples, weight 1), as in the authors' final code. Adam,
learning rate $10^{-3}$ at a constant rate for every method (the authors' two-moons setting). All likelihood terms
run in one batched forward pass. After training, 50 more calibration steps.

**Why the learning rate matters here.** An earlier version of this page trained every flow at $10^{-2}$ with cosine
decay and no KL term: all flows, CalNF included, overfitted the 20 failure points within about 50 steps, and the
comparison with the failures-only flow became a coin toss across seeds (that version lost at seeds 0, 1 and 2;
reverting just those three settings in today's code gives +0.73, +0.15 and −1.42 nats there on an x86_64
AVX512_SPR CPU, which a test re-measures; on the machine this page was first written on, whose CPU rounds some
float operations differently, +0.73, +0.48 and −1.34: a run that overfits amplifies last-digit differences). At
the authors' settings its shared, self-regularised family overfits more slowly than a flow on the failure points alone. The price at
300 steps: CalNF's nominal model $q(\cdot; 0)$ is still behind the plain flow's, at seeds 1 and 2 by more than the
first badge allows, so that badge fails there (the note under the badge gives the gaps `python -m tests.seeds`
measured at seeds 0, 1 and 2).

**Baselines.** *Plain*: nominal at $c = 0$, failure at $c = \mathbb 1$, no subsets. *β-NF*: plain
$+\;\beta\,\mathrm{KL}(q(\cdot;\mathbb 1)\,\|\,q(\cdot;0))$ by reparameterised Monte Carlo. *Failure only*: the same
flow on $D_t$ alone. *Pooled*: one density on $D_0 \cup D_t$.

**Anomaly score.** $\log q(x; c^*) - \log q(x; 0)$, ranked for held-out failure vs nominal points (ROC-AUC).
The ROC panel draws the same score for the plain flow, $\log q(x; \mathbb 1) - \log q(x; 0)$, and with
"compare all" for β-NF (its run on the page's data). On this toy the two moons barely overlap, so the conditional
flows separate them almost perfectly (AUC ≈ 1.00 for CalNF and for the plain flow at the defaults): the badge shows
that CalNF's failure model detects failures, not that it detects them better than the baselines.
""")
