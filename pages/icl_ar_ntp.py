import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from components import charts, download, layout, state
from components.runner import run_or_stop
from engine import icl_ar_ntp as eng
from engine.core import Int

SLUG = "icl-ar-ntp"

layout.paper_header(
    SLUG,
    idea=(
        "Why does a model trained only to predict the next token end up able to learn from its prompt? "
        "The paper's answer: pre-training text comes from many *topics*, each producing many sequences, "
        "and next-token prediction on an unseen topic is a generalization problem at the topic level. "
        "Its PAC-Bayesian bound has a term that shrinks with the total number of training tokens and a "
        "second term that shrinks only with the number of topics K, so more topics, not just more text, "
        "should be what makes in-context learning (ICL) work on new topics. Here each topic is a small "
        "linear dynamical system x_{t+1} = W x_t + noise with its own random rotation-like matrix W. A "
        "tiny causal transformer is pre-trained on K topics, always with the same number of sequences in "
        "total, and then asked to continue sequences from systems it has never seen. To do that it has to "
        "work out W from the prompt. We compare it with closed-form predictors: the oracle that knows W, "
        "the zero guess, least-squares (ridge) regression fitted on the prompt (the \"generalizing\" "
        "algorithm) and the Bayes mixture over the K training matrices (the \"memorizing\" one)."
    ),
    caveat=(
        f"Scale: d = {eng.D}, a {eng.LAYERS}-layer, {eng.HEADS}-head transformer of width {eng.WIDTH} (about 27 k "
        "parameters), "
        f"T = {eng.T_SHIP}, {eng.SHIP_STEPS} AdamW steps at learning rate {eng.LR:g} (the spec: 3 000 steps at "
        "0.001), K ∈ {list(eng.GRID_K)} with K·N = {eng.TOTAL_SEQ} "
        f"sequences, {len(eng.SHIP_SEEDS)} seeds, instead of the paper's GPT-2 models, GINC and real text. "
        "To make in-context regression learnable in 1 000 CPU steps, each token is embedded together with "
        "its predecessor (x_t, x_{t−1}), a shortcut for the previous-token head a bigger model learns itself; "
        "no topic identity is ever given to the model. "
        "The numeric PAC-Bayesian bound is our own two-level version (K i.i.d. topics, then independent "
        "sequences given the topics, Gaussian prior at the initial weights, Gaussian posterior at the trained "
        "ones, loss clipped at C). It treats a whole sequence as one sample, so its sequence term shrinks with "
        "K·N, not with K·N·T as the paper's token-level term does. It is computed honestly and is far too "
        "large to be informative (vacuous): see the gap section."
    ),
)

cfg = state.bind_config(eng.Config, SLUG, views=("prompt_t",))
state.share_link(cfg)
layout.device_indicator()
res = run_or_stop("engine.icl_ar_ntp", cfg, label="Evaluating in-context prediction")
layout.claims_panel(eng.claims(res))
live = res.source != eng.SOURCES[0]

# --- 1. error vs prompt length -------------------------------------------------------------------
st.subheader(f"ICL error vs prompt length (K = {res.K})")
st.caption("Per-dimension squared error of predicting the next state from the first t states. Zero "
           "predictor = 1 (the stationary variance), oracle = σ². Unseen topics are systems the model never "
           "saw; seen topics are fresh sequences of its training systems.")
names = {"unseen": "transformer, unseen topics", "seen": "transformer, seen topics",
         "ridge": "ridge on the prompt (unseen)", "mixture": "Bayes mixture of training topics (unseen)",
         "oracle": "oracle (knows W)", "zero": "zero predictor"}
curves = {names[k]: v for k, v in res.curves.items()}
charts.show(charts.lines(res.t_axis, curves, xlabel="prompt length t", ylabel="next-token MSE / dim",
                         mode="lines+markers"), key="icl-prompt")
download.download_csv(pd.DataFrame({"t": res.t_axis, **res.curves}), "icl_vs_prompt_length.csv")

if not live:
    ks = res.grid_k
    # --- 2. error vs K ---------------------------------------------------------------------------
    st.subheader("Error vs number of pre-training topics K (compute-matched"
                 + (f"; long dashes: fixed N = {eng.FIXED_N})" if res.fixed_n_grid else ")"))
    st.caption(f"Last prompt position; K·N = {eng.TOTAL_SEQ} sequences for every K; mean ± spread over "
               f"{res.grid_unseen.shape[0]} seeds.")
    fig = go.Figure()
    for i, (lab, arr) in enumerate((("transformer, unseen topics", res.grid_unseen),
                                    ("transformer, seen topics", res.grid_seen),
                                    ("ridge on the prompt", res.grid_ridge_last),
                                    ("Bayes mixture of training topics", res.grid_mixture_last))):
        fig.add_trace(go.Scatter(x=ks, y=arr.mean(0), name=lab, mode="lines+markers",
                                 line=dict(color=charts.COLORS[i], dash="dot" if i >= 2 else None),
                                 error_y=dict(type="data", array=arr.std(0)) if i < 2 else None))
    # the same unseen-topic error after fewer prompt tokens: how much of the prompt the model uses, per K
    t_shown = state.bind_view(SLUG, "prompt_t", Int(1, eng.T_SHIP - 1, "Also show the unseen error after t prompt tokens",
                                                    help="a view setting: adds the unseen-topic error at prompt "
                                                         "position t (the curves above end at the last position)"),
                              default=1)
    at_t = res.grid_curves_unseen[:, :, t_shown - 1]
    fig.add_trace(go.Scatter(x=ks, y=at_t.mean(0), name=f"transformer, unseen topics, after t = {t_shown}",
                             mode="lines+markers", line=dict(color=charts.COLORS[4], dash="dash"),
                             error_y=dict(type="data", array=at_t.std(0))))
    fx = res.fixed_n_grid
    if fx:
        fig.add_trace(go.Scatter(x=ks, y=fx["unseen"].mean(0), name=f"transformer, unseen topics, fixed N = {eng.FIXED_N}",
                                 mode="lines+markers", line=dict(color=charts.COLORS[0], dash="longdash"),
                                 marker=dict(symbol="diamond"), error_y=dict(type="data", array=fx["unseen"].std(0))))
    fig.update_xaxes(type="log", title="K topics")
    fig.update_yaxes(title="next-token MSE / dim")
    charts.show(charts.themed(fig, height=380), key="icl-vs-k")
    if fx:
        i64 = list(eng.GRID_K).index(eng.TOTAL_SEQ // eng.FIXED_N)
        st.caption(f"Fixed-N grid: N = {eng.FIXED_N} sequences per topic at every K, so the data grow with K "
                   f"({eng.FIXED_N} sequences at K = 1, {eng.FIXED_N * int(ks[-1]):,} at K = {int(ks[-1])}); at "
                   f"K = {int(ks[i64])} both grids are the same model. Unseen-topic error at K = {int(ks[-1])}: "
                   f"{res.metrics['fixed_unseen_Kmax']:.3f} with fixed N vs "
                   f"{res.metrics['unseen_Kmax']:.3f} compute-matched; "
                   f"training error {res.metrics['fixed_train_Kmax']:.3f} vs "
                   f"{res.metrics['train_Kmax']:.3f}.")
        download.download_csv(pd.DataFrame({"K": ks, "N": eng.FIXED_N, "unseen_mean": fx["unseen"].mean(0),
                                            "seen_mean": fx["seen"].mean(0), "train_mean": fx["train"].mean(0)}),
                              "icl_fixed_n_grid.csv", key="dl-icl-fixed-n")
    download.download_csv(pd.DataFrame({"K": ks, **{f"unseen_t{t + 1}_mean": res.grid_curves_unseen[:, :, t].mean(0)
                                                    for t in range(res.grid_curves_unseen.shape[2])}}),
                          "icl_unseen_error_by_prompt_position.csv", key="dl-icl-by-position")

    # --- 3. gap, bound-term shapes and the numeric bound --------------------------------------------
    st.subheader("Generalization gap and the shapes of the bound's terms")
    a, b = res.gap_fit["a"], res.gap_fit["b"]
    kk = np.geomspace(ks.min(), ks.max(), 60)
    token_scale = b / np.sqrt(ks.min())  # constant in K at fixed K·N·T; drawn to meet the topic shape at min K
    fit_curve, topic_shape, token_shape = a + b / np.sqrt(kk), b / np.sqrt(kk), np.full_like(kk, token_scale)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=ks, y=res.grid_gap.mean(0), name="measured gap", mode="markers",
                             error_y=dict(type="data", array=res.grid_gap.std(0)),
                             marker=dict(size=9, color=charts.COLORS[0])))
    fig.add_trace(go.Scatter(x=kk, y=fit_curve, name=f"fit a + b/√K (a={a:.2f}, b={b:.2f})",
                             line=dict(color=charts.COLORS[1])))
    fig.add_trace(go.Scatter(x=kk, y=topic_shape, name="topic-term shape b/√K",
                             line=dict(color=charts.COLORS[2], dash="dash")))
    fig.add_trace(go.Scatter(x=kk, y=token_shape, name="token-term shape ∝ 1/√(K·N·T)",
                             line=dict(color=charts.COLORS[3], dash="dot")))
    fig.update_xaxes(type="log", title="K topics")
    fig.update_yaxes(title="unseen error − training error")
    charts.show(charts.themed(fig, height=380), key="icl-gap")
    download.download_csv(pd.DataFrame({"K": kk, "fit_a_plus_b_over_sqrt_K": fit_curve, "topic_term_shape": topic_shape,
                                        "token_term_shape": token_shape, "fit_a": a, "fit_b": b}),
                          "icl_ar_ntp_gap_fit.csv", key="dl-icl-ar-ntp-gap-fit")
    st.caption("With K·N·T fixed, the token term cannot change with K (flat line): the whole decline of the "
               "gap has to come from the topic term. The token-term line uses the same constant b, scaled "
               "so the two shapes meet at the smallest K; only the shapes are meaningful.")
    st.subheader("The numeric PAC-Bayesian bound beside the measured gap")
    bd = res.bound
    fig = go.Figure()
    for i, (lab, key, dash) in enumerate((("bound = topic term + sequence term", "bound", None),
                                          ("topic term (n = K topics)", "b_topic", "dash"),
                                          ("sequence term (n = K·N sequences)", "b_seq", "dot"))):
        fig.add_trace(go.Scatter(x=ks, y=bd[key], name=lab, mode="lines+markers",
                                 line=dict(color=charts.COLORS[(i + 1) % len(charts.COLORS)], dash=dash)))
    fig.add_trace(go.Scatter(x=ks, y=np.maximum(bd["q_gap"], 1e-3), name="measured gap, Gaussian posterior",
                             mode="markers", marker=dict(size=10, color=charts.COLORS[0])))
    fig.add_trace(go.Scatter(x=ks, y=np.maximum(bd["det_gap"], 1e-3), name="measured gap, trained model",
                             mode="markers", marker=dict(size=7, symbol="x", color=charts.COLORS[4])))
    fig.add_trace(go.Scatter(x=[ks.min(), ks.max()], y=[eng.CLIP] * 2, name=f"clip level C = {eng.CLIP:g}",
                             mode="lines", line=dict(color="gray", dash="dashdot")))
    fig.update_xaxes(type="log", title="K topics")
    fig.update_yaxes(type="log", title="gap / bound (per-dimension MSE, log scale)", dtick=1)  # decades only
    charts.show(charts.themed(fig, height=400), key="icl-bound")
    m = res.metrics
    holds = "lies above every measured gap" if m["bound_margin_min"] >= 0 else "is BELOW a measured gap (a failure)"
    vac = "and is vacuous" if m["bound_over_clip_min"] > 1 else "and is non-vacuous"
    st.info(f"The bound {holds} {vac}. At K = {res.K} it is {m['bound_sel']:.1f} (topic term "
            f"{m['bound_topic_sel']:.1f} + sequence term {m['bound_seq_sel']:.1f}), while the measured gap of the "
            f"Gaussian posterior is {m['q_gap_sel']:.3f} and no gap of a loss clipped at C = {eng.CLIP:g} can exceed "
            f"{eng.CLIP:g}. The reason is the KL term: {m['kl_sel']:.3g} nats for {int(bd['n_params'][0]):,} weights that moved "
            f"far from their initial values, against only K topics at the topic level. What the numbers do "
            f"show is the paper's structure: with K·N fixed the sequence term stays flat, and the whole decline "
            f"comes from the topic term. Gaps ≤ 0 are drawn at 0.001.", icon=":material/info:")
    download.download_csv(pd.DataFrame({
        "K": ks, "bound": bd["bound"], "topic_term": bd["b_topic"], "sequence_term": bd["b_seq"], "kl": bd["kl"],
        "posterior_std": bd["sigma"], "prior_std": bd["sigma_prior"], "gap_posterior": bd["q_gap"],
        "gap_trained_model": bd["det_gap"], "clip_level": eng.CLIP}), "pac_bayes_bound.csv")
    download.download_csv(pd.DataFrame({
        "K": ks, "unseen_last_mean": res.grid_unseen.mean(0), "unseen_last_std": res.grid_unseen.std(0),
        "seen_last_mean": res.grid_seen.mean(0), "seen_last_std": res.grid_seen.std(0), "train_mse_mean": res.grid_train.mean(0),
        "gap_mean": res.grid_gap.mean(0), "gap_std": res.grid_gap.std(0),
        "ridge_last": res.grid_ridge_last.mean(0), "mixture_last": res.grid_mixture_last.mean(0),
        "dist_to_ridge": res.grid_dist_ridge.mean(0), "dist_to_mixture": res.grid_dist_mix.mean(0)}),
        "icl_vs_K.csv")

    # --- 4. which algorithm ----------------------------------------------------------------------
    st.subheader("Which algorithm does the transformer run?")
    st.caption("Mean squared distance between the transformer's predictions on unseen topics and those of "
               "the two closed-form predictors. Few topics: it behaves like the mixture of its training "
               "systems (memorizing). Many topics: it tracks ridge regression on the prompt (generalizing).")
    charts.show(charts.lines(ks, {"distance to ridge": res.grid_dist_ridge.mean(0),
                                  "distance to training-topic mixture": res.grid_dist_mix.mean(0)},
                             xlabel="K topics", ylabel="mean squared distance", log_x=True, mode="lines+markers"),
                key="icl-which")
else:
    m = res.metrics
    st.info(f"Live model: K = {res.K}, final training error {res.grid_train[0, 0]:.3f}, unseen-topic gap "
            f"{res.grid_gap[0, 0]:.3f}, distance to ridge {res.grid_dist_ridge[0, 0]:.3f} vs to the mixture "
            f"{res.grid_dist_mix[0, 0]:.3f}. PAC-Bayesian bound on the gap: {m['bound_sel']:.1f} (topic term "
            f"{m['bound_topic_sel']:.1f} + sequence term {m['bound_seq_sel']:.1f}), against a measured posterior gap "
            f"of {m['q_gap_sel']:.3f}. Switch to the shipped grid for the sweeps over K.",
            icon=":material/science:")

# --- 5. training loss ----------------------------------------------------------------------------
st.subheader(f"Training loss of the K = {res.K} model (next-token MSE on its pre-training set)")
charts.show(charts.lines(res.loss_steps, {"training loss": res.loss}, xlabel="step", ylabel="MSE / dim",
                         log_y=True), key="icl-loss")
download.download_csv(pd.DataFrame({"step": res.loss_steps, "loss": res.loss}), "training_loss.csv")

layout.how_it_works(r"""
**Topics and sequences.** A topic is a matrix $W_k=\rho\,O_k$ with $O_k$ a Haar-random orthogonal
$d\times d$ matrix. A sequence of topic $k$ starts at $x_1\sim\mathcal N(0,I)$ and runs
$x_{t+1}=W_k x_t+\sigma\xi_t$ with $\sigma^2=1-\rho^2$, so $\mathrm{Cov}(x_t)=I$ at every step.
Pre-training data: $K$ topics $\times$ $N$ sequences of length $T$ (here $K\cdot N$ is held fixed).

**Auto-regressive next-token prediction.** The causal transformer $f$ is trained on
$\frac{1}{T-1}\sum_{t=1}^{T-1}\lVert f(x_{1:t})-x_{t+1}\rVert^2/d$. The ICL risk on unseen topics at
prompt length $t$ is $e_{\text{unseen}}(t)=\mathbb E\,\lVert f(x_{1:t})-x_{t+1}\rVert^2/d$ with $W$ drawn fresh;
the gap is $\bar e_{\text{unseen}}-\bar e_{\text{train}}$.

**Reference predictors.** Oracle $Wx_t$ (error $\sigma^2$); zero (error 1); in-context ridge
$\hat W_t=\big(\sum_{i<t}x_{i+1}x_i^\top\big)\big(\sum_{i<t}x_ix_i^\top+\alpha I\big)^{-1}$, predicting
$\hat W_t x_t$; Bayes mixture over training topics
$p(k\mid x_{1:t})\propto\prod_{i<t}\mathcal N(x_{i+1};W_kx_i,\sigma^2I)$, predicting $\sum_k p(k\mid\cdot)W_kx_t$.

**The bound's shape.** The paper's PAC-Bayesian bound has a sequence-level term of order
$1/\sqrt{KNT}$ and a topic-level term of order $1/\sqrt K$ (plus a KL term from the optimisation
trajectory). At fixed $K N T$ only the topic term varies, so the page fits $a+b/\sqrt K$ to the measured gap.

**The numeric bound.** Per-sequence loss $\ell(w,x)=\min\big(C,\ \tfrac{1}{T-1}\sum_t\lVert f_w(x_{1:t})-x_{t+1}\rVert^2/d\big)$,
$C=4$. Prior $P=\mathcal N(w_0,s_p^2I)$ at the initial weights (drawn before the data), posterior
$Q=\mathcal N(\hat w,s^2I)$ at the trained weights, with closed-form
$\mathrm{KL}=n\big(\ln\tfrac{s_p}{s}+\tfrac{s^2}{2s_p^2}-\tfrac12\big)+\tfrac{\lVert\hat w-w_0\rVert^2}{2s_p^2}$.
Topics are i.i.d., and given the topics the $KN$ sequences are independent, so Hoeffding's lemma and the
Donsker–Varadhan inequality give, with probability $\ge 1-\delta$ ($\delta=0.05$, half per level),

$$
R(Q)-\hat R(Q)\le \underbrace{\min_\lambda \tfrac{\mathrm{KL}+\ln(G/\delta_2)}{\lambda}+\tfrac{\lambda C^2}{8K}}_{\text{topic term}}
+\underbrace{\min_\lambda \tfrac{\mathrm{KL}+\ln(G/\delta_1)}{\lambda}+\tfrac{\lambda C^2}{8KN}}_{\text{sequence term}},
$$

where $R$ is the risk on new topics, $\hat R$ the training risk and $G$ the number of $(s,s_p,\lambda)$ grid
points (union bound, so all three may be chosen after seeing the data). $s$ comes from an upward scan of the grid:
the last value before the first whose noisy weights raise the training loss by more than 10 %; $s_p$ is the grid
value with the smallest KL. The measured gap of $Q$ uses a few posterior draws; the bound itself needs no sampling.
""")
