import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from components import charts, download, layout, state
from components.runner import run_or_stop
from engine import mup_local_learning as eng

SLUG = "mup-local-learning"
NAMES = {"SP": "SP", "muP": "μP", "muP-GN": "μP-GN (γ ∝ M)"}
layout.paper_header(
    SLUG,
    idea=(
        "Predictive coding (PC) trains each layer on a local error: hidden 'value' states are first relaxed "
        "so that they both follow the layer below and explain the target, and each weight then moves along "
        "its own layer's mismatch. Such rules have extra knobs (inference steps, step size, the weight γ of "
        "the output loss) and their best learning rate usually changes with width. The paper works out the "
        "maximal-update parameterisation (μP) for PC: how initial weights and per-layer learning rates must "
        "scale with width so that every layer keeps learning. Under μP a learning rate tuned on a narrow "
        "network stays good on a wide one. It also shows that, in linear networks, the PC update sits between "
        "the ordinary gradient and a Gauss–Newton step, and that how γ scales with width decides where."
    ),
    caveat=(
        "Small scale: digits regression with widths up to 512 and a few PC inference steps rather than full "
        "convergence; the first-order / Gauss–Newton study is exact but for a two-layer linear network. "
        "Target propagation, which the paper also treats, is not implemented here."
    ),
)
cfg = state.bind_config(eng.Config, SLUG)
state.share_link(cfg)
layout.device_indicator()
res = run_or_stop("engine.mup_local_learning", cfg, label="Training PC networks")
for note in res.notes:
    st.warning(note, icon=":material/timer:")
layout.claims_panel(eng.claims(res))
if eng.unmeasured(res):
    st.info("Not measured on this run, because the parameterisation they need was not chosen: "
            + "; ".join(eng.unmeasured(res)) + ". Add it under Parameterisations (sidebar) to measure them.",
            icon=":material/info:")

# 1. loss vs learning rate per parameterisation
log_lr = np.log2(res.lrs)
fig = make_subplots(rows=1, cols=len(res.param_names), subplot_titles=[NAMES[p] for p in res.param_names],
                    shared_yaxes=True)
for p, _name in enumerate(res.param_names):
    for w, width in enumerate(res.widths):
        y = np.where(np.isfinite(res.final_loss[p, w]), res.final_loss[p, w], np.nan)
        color = charts.COLORS[w % len(charts.COLORS)]
        fig.add_trace(go.Scatter(x=log_lr, y=y, mode="lines+markers", name=f"width {width}",
                                 line=dict(color=color), legendgroup=str(width), showlegend=(p == 0)),
                      row=1, col=p + 1)
        if np.isfinite(res.lr_star[p, w]):
            i = int(np.argmin(np.abs(res.lrs - res.lr_star[p, w])))
            fig.add_trace(go.Scatter(x=[log_lr[i]], y=[y[i]], mode="markers", showlegend=False,
                                     marker=dict(symbol="star", size=14, color=color)), row=1, col=p + 1)
    fig.update_xaxes(title_text="log₂ learning rate", row=1, col=p + 1)
fig.update_yaxes(title_text="final loss (all digits); gaps = diverged", type="log", row=1, col=1)
charts.show(charts.themed(fig, f"Loss after {res.steps_used} PC steps vs learning rate (stars: best per width)",
                          420), key="transfer")
rows = [{"param": p, "width": int(w), "lr": float(lr), "final_loss": float(res.final_loss[i, j, k])}
        for i, p in enumerate(res.param_names) for j, w in enumerate(res.widths) for k, lr in enumerate(res.lrs)]
download.download_csv(pd.DataFrame(rows), "mup_pc_sweep.csv", label="Download the sweep (CSV)")

c1, c2 = st.columns(2)
with c1:
    charts.show(charts.lines(res.widths, {NAMES[p]: np.log2(res.lr_star[i]) for i, p in enumerate(res.param_names)},
                             title="Best learning rate vs width", xlabel="width M", ylabel="log₂ lr*",
                             log_x=True, mode="lines+markers"), key="lrstar")
with c2:
    # the training curves of μP when it ran, else of the first chosen parameterisation
    curve_p = "muP" if "muP" in res.param_names else res.param_names[0]
    i_cur = res.param_names.index(curve_p)
    series = {f"width {w}": np.where(np.isfinite(res.curves[i_cur, j]), res.curves[i_cur, j], np.nan)
              for j, w in enumerate(res.widths)}
    charts.show(charts.lines(res.curve_steps, series, title=f"{NAMES[curve_p]}: training loss at the learning "
                             f"rate tuned at width {int(res.widths[0])}", xlabel="PC step", ylabel="loss",
                             log_y=True, mode="lines+markers"), key="curves")
download.download_csv(pd.DataFrame({"param": np.repeat(res.param_names, len(res.widths)),
                                    "width": np.tile(res.widths, len(res.param_names)),
                                    "lr_star": res.lr_star.ravel()}), "mup_lr_star.csv",
                      label="Download lr* per width (CSV)")
download.download_csv(pd.DataFrame({"step": res.curve_steps, **series}), f"mup_{curve_p}_training_curves.csv",
                      label=f"Download the {NAMES[curve_p]} training curves (CSV)", key="dl-mup-curves")

# 3. experiment B
c3, c4 = st.columns(2)
for col, pname in ((c3, "muP"), (c4, "SP")):
    with col:
        ys = {}
        for sch in eng.B_SCHEDULES:
            ys[f"cos(PC, first-order), {sch}"] = res.b_cos_fo[(pname, sch)]
            ys[f"cos(PC, Gauss–Newton), {sch}"] = res.b_cos_gn[(pname, sch)]
        f3 = charts.lines(res.b_widths, ys, title=f"Linear net, {NAMES[pname]}: what the PC update resembles",
                          xlabel="width M", ylabel="cosine similarity", log_x=True, mode="lines+markers",
                          height=440)
        f3.add_trace(go.Scatter(x=res.b_widths, y=res.b_cos_fo_gn[pname], name="cos(first-order, GN)", mode="lines",
                                line=dict(color="grey", dash="dot")))
        charts.show(f3, key=f"b-{pname}")
brows = [{"param": p, "schedule": s, "width": int(m), "cos_pc_first_order": float(res.b_cos_fo[(p, s)][i]),
          "cos_pc_gauss_newton": float(res.b_cos_gn[(p, s)][i]),
          "cos_first_order_gauss_newton": float(res.b_cos_fo_gn[p][i])}
         for (p, s) in res.b_cos_fo for i, m in enumerate(res.b_widths)]
download.download_csv(pd.DataFrame(brows), "mup_pc_linear_directions.csv",
                      label="Download the linear-net cosines (CSV)")

layout.how_it_works(r"""
**PC energy** (values $u_0=x$ clamped, $u_1\dots u_{L-1}$ free, $h_l=W_l\,\phi(u_{l-1})$, $\phi=\mathrm{id}$ for the
input and $\tanh$ otherwise):
$$E=\sum_{l<L}\tfrac12\|u_l-h_l\|^2+\gamma\,\tfrac12\|y-h_L\|^2,\qquad \varepsilon_l=u_l-h_l,\;\;\varepsilon_L=\gamma(y-h_L).$$
**Inference** from the feed-forward state, $T$ steps: $u_l\leftarrow u_l-\kappa\bigl(\varepsilon_l-\tanh'(u_l)\odot
W_{l+1}^\top\varepsilon_{l+1}\bigr)$. **Learning** (local): $W_l\leftarrow W_l+\eta_l\,\varepsilon_l\,\phi(u_{l-1})^\top/B$.

**Parameterisations** (width $M$, base width $M_0=32$):

| | input | hidden | output | γ |
|---|---|---|---|---|
| SP | $\mathcal N(0,1/d_{in})$, $\eta$ | $\mathcal N(0,1/M)$, $\eta$ | $\mathcal N(0,1/M)$, $\eta$ | γ |
| μP | $\mathcal N(0,1/d_{in})$, $\eta M/M_0$ | $\mathcal N(0,1/M)$, $\eta$ | $\mathcal N(0,M_0/M^2)$, $\eta M_0/M$ | γ |
| μP-GN | as μP | as μP | as μP | $\gamma M/M_0$ |

At $M=M_0$ all coincide, so any difference at larger width comes from the scaling. The transfer regret is
$L_{\rm large}(\eta^*_{\rm small})/\min_\eta L_{\rm large}(\eta)$.

**Linear study.** For $\hat y=W_2W_1x$ the PC equilibrium is $h^*=(I+\gamma W_2^\top W_2)^{-1}(W_1x+\gamma W_2^\top y)$, so
$$\Delta W_1\propto (h^*-W_1x)\,x^\top=\gamma\,W_2^\top(I+\gamma W_2W_2^\top)^{-1}e\,x^\top,\quad e=y-W_2W_1x.$$
When $\gamma W_2W_2^\top\to0$ this is the first-order gradient $W_2^\top e\,x^\top$; when it is large it becomes the
Gauss–Newton-like $W_2^{+}e\,x^\top$. Under μP $W_2W_2^\top\sim1/M$, so γ fixed gives first order, and γ ∝ M keeps a
width-independent mix. Under SP $W_2W_2^\top\sim1$: a fixed mix that is not first order. With an isotropic output
layer (condition number 1) the two directions coincide as the width grows (they already point alike at
moderate width).
""")
