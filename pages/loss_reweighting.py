import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from components import charts, download, layout, state
from components.runner import run_or_stop
from engine import loss_reweighting as eng
from engine.core import Choice, Multi

SLUG = "loss-reweighting"
layout.paper_header(
    SLUG,
    idea=(
        "Late in pretraining many sequences are already fitted: their loss is low and their gradient adds "
        "little. The paper reweights the samples of every mini-batch from their current losses alone: the "
        "losses are rescaled to [−1, 1] inside the batch, passed through a shape function, and turned into "
        "weights by a tempered softmax (the weights that best trade the score against staying close to "
        "uniform). **LinUpper** pushes weight away from the lowest-loss samples while capping the highest; "
        "**Quadratic** damps both ends. Here the same weighting function drives a toy regression with many "
        "easy, redundant rows and a minority of slow, informative ones; every strategy sees the same batches."
    ),
    caveat=(
        "A linear-regression stand-in for LLM pretraining (the paper's own toy setting), not a language model. "
        "The test error is the exact distance ‖θ − θ*‖². We also measured a confound: with plain SGD and a "
        "learning rate tuned per strategy the advantage disappears (tuned LinUpper ends slightly behind uniform; "
        "weighting towards high-loss rows partly acts like a bigger step); the gain that survives tuning is the "
        "Adam + cosine setting. Switch the optimiser to see it. With outliers (high-loss noise rows) turned on, "
        "LinUpper chases the noise and loses clearly to uniform; Extremes stays about level with uniform "
        "(slightly worse at 1 % outliers, slightly better from 5 %). The MLP setting (a one-hidden-layer tanh network fitting a teacher, "
        "with most rows copies of 16 easy inputs) is a second small stand-in, not an LM; its gains are smaller "
        "than the linear toy's, and they are a speed-up: with long runs (about 1000 steps or more) both reach "
        "the same floor and the speed-up measured against uniform's final loss disappears. The bound-shape "
        "check uses plain SGD at a constant step and uniform weights, "
        "where a linear-rate bound applies; it tests the bound's shape (rate ∝ smallest curvature), not the "
        "paper's constants. It is a generic bound for SGD on least squares, not the paper's bound for "
        "loss-reweighted SGD: no reweighting takes part in that check, so it tests the toy's convergence, not "
        "the weighting."
    ),
)
cfg = state.bind_config(eng.Config, SLUG, views=("strategies", "share_strategy", "share_smooth", "hist_strategy", "hist_at"))
state.share_link(cfg)
layout.device_indicator()
res = run_or_stop("engine.loss_reweighting", cfg, label="Training")
layout.claims_panel(eng.claims(res))

lab = eng.STRATEGY_LABELS
mlp = res.setting == "mlp"
# every strategy is always run (the claims compare them); this picks the curves and bars drawn
shown = state.bind_view(SLUG, "strategies", Multi(eng.STRATEGIES, "Strategies shown", labels=tuple(
    lab[s] for s in eng.STRATEGIES), help="Which strategies the plots draw; all five are always trained (the "
    "claims compare them) and every download holds all five (a view setting: no retraining)"))
ys = {lab[s]: res.log_err_mean[s] for s in shown}
bands = {lab[s]: (res.log_err_mean[s] - res.log_err_sd[s], res.log_err_mean[s] + res.log_err_sd[s])
         for s in shown}
n_seeds = int(res.metrics.get("n_seeds", cfg.seeds))
title = (f"MLP test loss (Adam, lr {eng.MLP_LR:g}, cosine), mean ± 1 sd over {n_seeds} seeds" if mlp else
         f"Test error at a shared learning rate ({cfg.lr:g}), mean ± 1 sd over {cfg.seeds} seeds")
charts.show(charts.lines(res.steps, ys, bands=bands, title=title, xlabel="step",
                         ylabel="log10 test loss" if mlp else "log10 ‖θ − θ*‖²"), key="curves")
download.download_csv(pd.DataFrame({"step": res.steps, **{f"{s}_mean": res.log_err_mean[s] for s in eng.STRATEGIES},
                                    **{f"{s}_sd": res.log_err_sd[s] for s in eng.STRATEGIES}}),
                      "reweighting_test_error.csv")

c1, c2 = st.columns(2)
with c1:
    charts.show(charts.lines(res.h_grid, {lab[s]: res.shapes[s] for s in shown},
                             title="Shape functions f(ℓ̂)", xlabel="normalised loss ℓ̂ in the batch",
                             ylabel="score f"), key="shapes")
    download.download_csv(pd.DataFrame({"h": res.h_grid, **res.shapes}), "reweighting_shapes.csv")
with c2:
    order = np.argsort(res.sample_losses)
    xs = res.sample_losses[order]
    charts.show(charts.lines(xs, {lab[s]: res.sample_weights[s][order] * len(xs) for s in shown},
                             title=f"Each strategy's weights on one batch (r = {cfg.temperature:g}): the uniform run's last "
                                   "batch losses",
                             xlabel="per-sample loss", ylabel="weight × batch size", log_x=True,
                             mode="lines+markers"), key="weights")
    download.download_csv(pd.DataFrame({"loss": res.sample_losses, "group": res.sample_groups,
                                        **res.sample_weights}), "reweighting_batch_weights.csv")

# where each strategy's batch weight goes, step by step: the three group shares stack up to 1
group_names = eng.GROUPS_MLP if mlp else eng.GROUPS
groups = [(i, g) for i, g in enumerate(group_names) if g != "-"]
ws = res.share_steps
a, b = st.columns(2)
with a:
    area_strat = state.bind_view(SLUG, "share_strategy", Choice(eng.STRATEGIES, "Weight shares over training of",
                                                                 labels=tuple(lab[s] for s in eng.STRATEGIES),
                                                                 help="strategy drawn in the stacked-area chart "
                                                                      "(a view setting: no retraining)"),
                                 default="linupper")
with b:
    smooth_pct = state.bind_view(SLUG, "share_smooth", Choice((0, 2, 5, 10), "Smoothing of the weight shares", labels=(
        "none", "2 % of the run", "5 % of the run", "10 % of the run"), help="centred moving average applied to "
        "both weight-share-over-training charts; the bars and the raw columns of the download are unsmoothed"),
                                 default=2)
win = eng.share_window(len(ws), smooth_pct)
smoothed = {s: eng.moving_average(res.weight_share[s], win) for s in eng.STRATEGIES}
fig = go.Figure([go.Scatter(x=ws, y=smoothed[area_strat][:, i], name=g, stackgroup="share", mode="lines",
                            line=dict(width=0.5, color=charts.COLORS[i]), hovertemplate="%{y:.3f}")
                 for i, g in groups if res.data_share[i] > 0])
fig.update_xaxes(title="step")
fig.update_yaxes(title="share of the batch weight", range=[0, 1])
for edge in np.cumsum(res.data_share)[:-1]:      # boundaries between the groups' shares of the training rows
    if 1e-9 < edge < 1 - 1e-9:
        charts.ref_line(fig, y=float(edge), line_dash="dot", line_color="#333", line_width=1.5)
if 0 < cfg.warmup < len(ws):
    charts.ref_line(fig, x=cfg.warmup + 0.5, text="end of uniform warm-up", line_dash="dash", line_color="#777",
                    annotation_position="top right")
charts.show(charts.themed(fig, f"{lab[area_strat]}: where the batch weight goes, step by step (mean over "
                               f"{n_seeds} seeds)", 360), key="share-area")
st.caption(
    "At every step the weights of the batch sum to 1; the bands are the parts landing on each group of rows, so "
    "they stack to exactly 1. "
    + (f"Smoothed with a centred moving average over {win} steps (shortened to the steps that exist at both ends). "
       if win > 1 else "Not smoothed: each step's own batch. ")
    + "Dotted lines: the groups' shares of the training rows, i.e. where uniform weighting sits on average. "
    + (f"Steps 1–{cfg.warmup} use uniform weights. " if cfg.warmup else "")
    + ("There are no outlier rows at this setting (outlier fraction 0), so that band is absent. " if not mlp
       and res.data_share[2] == 0 else "")
    + f"Over the last 10 % of steps {lab[area_strat]} puts {res.late_share[area_strat][0]:.2f} of the weight on the "
    f"{group_names[0]} rows, against their {res.data_share[0]:.2f} share of the data; a lower temperature r sharpens "
    "the weights (in the linear setting at the other defaults LinUpper's share was 0.70 at r = 1, 0.41 at r = 0.2 and "
    "0.19 at r = 0.1).")

red = {lab[s]: smoothed[s][:, 0] for s in eng.STRATEGIES}
shown_red = {lab[s]: red[lab[s]] for s in shown}
shown_red["share of redundant rows in the data"] = np.full(len(ws), res.data_share[0])
charts.show(charts.lines(ws, shown_red, title="Share of the batch weight that goes to "
                         f"{'duplicated easy' if mlp else 'redundant'} rows, all strategies"
                         + (f" (moving average over {win} steps)" if win > 1 else ""),
                         xlabel="step", ylabel="weight share"), key="share")
download.download_csv(pd.DataFrame({"step": ws, **{f"{s}_{g}": res.weight_share[s][:, i]
                                                   for s in eng.STRATEGIES for i, g in enumerate(eng.GROUPS)},
                                    **{f"{s}_{g}_smoothed": smoothed[s][:, i]
                                       for s in eng.STRATEGIES for i, g in enumerate(eng.GROUPS)},
                                    "smoothing_window_steps": win,
                                    **{f"data_share_{g}": res.data_share[i] for i, g in enumerate(eng.GROUPS)}}),
                      "reweighting_weight_share.csv")
# all three groups at once: where each strategy's batch weight goes late in training, against the rows' own shares
late = res.late_share
bar_names = ["data (row shares)"] + [lab[s] for s in shown]
fig = go.Figure([go.Bar(x=bar_names, y=[res.data_share[i]] + [late[s][i] for s in shown], name=g)
                 for i, g in groups])
fig.update_layout(barmode="stack")
fig.update_yaxes(title="share of the batch weight", range=[0, 1])
charts.show(charts.themed(fig, "Weight share per group over the last 10 % of steps (seed mean)", 340),
            key="share-stack")
download.download_csv(pd.DataFrame([{"bar": "data", **{g: res.data_share[i] for i, g in groups}}]
                                   + [{"bar": s, **{g: late[s][i] for i, g in groups}}
                                      for s in eng.STRATEGIES]), "reweighting_late_group_shares.csv",
                      key="dl-reweighting-late-shares")

if len(res.snap_steps):
    st.subheader("Where the loss sits: every training row's loss by group")
    a, b = st.columns(2)
    with a:
        h_strat = state.bind_view(SLUG, "hist_strategy", Choice(eng.STRATEGIES, "Strategy of the histogram",
                                                              labels=tuple(lab[s] for s in eng.STRATEGIES)))
    with b:
        # snapshots by share of the run, so a link stays valid whatever the step count
        shares = tuple(range(len(res.snap_steps)))
        snap = state.bind_view(SLUG, "hist_at", Choice(shares, "After", labels=tuple(
            f"{round(100 * i / (len(shares) - 1))} % of training" for i in shares)), default=shares[-1])
    h_step = int(res.snap_steps[snap])
    L = res.snap_log_loss[snap, eng.STRATEGIES.index(h_strat)]
    fig = go.Figure([go.Histogram(x=L[res.row_groups == i], name=f"{g} ({int((res.row_groups == i).sum())} rows)",
                                  opacity=0.6, nbinsx=60) for i, g in enumerate(eng.GROUPS)
                     if (res.row_groups == i).any()])
    fig.update_layout(barmode="overlay")
    fig.update_xaxes(title="log10 per-row loss ½(xᵀθ − y)²")
    fig.update_yaxes(title="rows")
    charts.show(charts.themed(fig, f"{lab[h_strat]}, first seed of the run, after {h_step} steps: all {len(L)} training rows", 340),
                key="loss-hist")
    download.download_csv(pd.DataFrame({"group": np.asarray(eng.GROUPS)[res.row_groups], "log10_loss": L}),
                          f"reweighting_row_losses_{h_strat}_step{h_step}.csv", key="dl-reweighting-row-losses")

if res.sweep_final:
    swept_shown = {lab[s]: v for s, v in res.sweep_final.items() if s in shown}
    if not swept_shown:
        st.caption("The learning-rate sweep ran for " + ", ".join(lab[s] for s in res.sweep_final)
                   + "; pick one of them under *Strategies shown* to draw it (its numbers are in the download).")
    else:
        charts.show(charts.lines(res.sweep_lrs, swept_shown,
                                 title="Final test error vs learning rate (mean over seeds; 12 = diverged)",
                                 xlabel="learning rate", ylabel="log10 ‖θ − θ*‖²", log_x=True,
                                 mode="lines+markers"), key="sweep")
    download.download_csv(pd.DataFrame({"lr": res.sweep_lrs, **res.sweep_final}), "reweighting_lr_sweep.csv")

if res.bound_curves:
    bc = res.bound_curves
    by = {}
    for f, sl, pr in zip(eng.BOUND_FRACS, bc["slopes"], bc["predicted"]):
        by[f"measured, f = {f:g}"] = bc[f"measured_{f:g}"]
        # rates per 100 steps read better than 1e-3 floats; the fit's slope is the measured rate, the bound's is
        # the prediction it is compared with
        by[f"straight-line fit, f = {f:g}: {100 * sl:.3f} per 100 steps (bound {100 * pr:.3f})"] = bc[f"fit_{f:g}"]
    fig = charts.lines(bc["steps"], by, title="Bound shape: SGD, constant lr, uniform weights, two redundant "
                       "fractions (mean over 6 seeds)", xlabel="step", ylabel="log10 ‖θ − θ*‖²")
    for i, tr in enumerate(fig.data):    # one colour per fraction; the fit dashed so the measured curve shows under it
        tr.line.color = charts.COLORS[i // 2]
        tr.line.dash = "dash" if i % 2 else None
    charts.show(fig, key="bound")
    download.download_csv(pd.DataFrame({"step": bc["steps"], **{k: bc[k] for k in bc if k.startswith(("measured",
                                                                                                     "fit"))},
                                        **{f"rate_measured_{f:g}": sl for f, sl in zip(eng.BOUND_FRACS, bc["slopes"])},
                                        **{f"rate_bound_{f:g}": pr for f, pr in zip(eng.BOUND_FRACS, bc["predicted"])}}),
                          "reweighting_bound_shape.csv")

layout.how_it_works(r"""
For a batch with per-sample losses $\ell_1,\dots,\ell_B$:

1. **Normalise inside the batch:** $\hat\ell_i = 2\delta\,\dfrac{\ell_i - \ell_{\min}}{\max(\ell_{\max}-\ell_{\min},\,10^{-6})} - \delta \in [-\delta,\delta]$ (here $\delta = 1$).
2. **Shape:** uniform $f=0$; LinUpper $f=\min(\hat\ell+\delta,\,\delta)$; Quadratic $f = 1-\hat\ell^2/\delta^2$;
   Extremes $f=|\hat\ell|$; our control "low-loss first" $f=-\hat\ell$.
3. **Weights:** $w = \arg\max_{w\in\Delta}\ \sum_i w_i f_i - r\,\mathrm{KL}(w\,\|\,\text{uniform})$, i.e.
   $w_i = \dfrac{e^{f_i/r}}{\sum_j e^{f_j/r}}$ (computed after subtracting $\max f$). Large $r$ gives uniform weights.
4. **Loss:** $L = \sum_i w_i\,\ell_i$ with $w$ treated as a constant (no gradient through the weights). Since
   $\sum_i w_i = 1$ the scale matches the ordinary batch mean.
5. **Warm-up:** the first steps use uniform weights.

The toy: $y = x^\top\theta^* + \varepsilon$; redundant rows $x = 3Qz$ with $Q\in\mathbb R^{32\times 4}$ (fast, high curvature),
informative rows $x\sim\mathcal N(0, s^2 I)$ with small $s$ (slow). Test inputs are isotropic, so the test error
is exactly $\lVert\theta-\theta^*\rVert^2$.

**Bound shape.** For SGD with a constant step $\eta$ on this least-squares problem, a linear-rate bound gives
$\mathbb E\lVert\theta_t-\theta^*\rVert^2 \lesssim (1-\eta\mu)^{2t}\lVert\theta_0-\theta^*\rVert^2$, where $\mu$ is the
smallest curvature of the objective, here $\mu = (1-f)\,s^2$ (only informative rows act outside the redundant
subspace). So $\log_{10}$ error is a straight line in $t$ whose slope scales with $1-f$; the page fits the slopes
for two fractions and compares their ratio with the predicted one. Reweighting changes the weighted curvature, which is
how such bounds register a gain.

**MLP setting.** A one-hidden-layer tanh network fits a random teacher; most training rows are copies of 16 easy inputs
that are memorised early. The same weighting function is applied to the per-sample squared errors of each batch.
The claim measures how many steps LinUpper needs to reach the test loss uniform has at the last step.
""")
