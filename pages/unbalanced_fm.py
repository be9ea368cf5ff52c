"""Unbalanced flow matching: short kept pairs, the price in marginals, and a relaxation flow on top."""

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from components import charts, download, layout, state
from components.runner import run_or_stop
from engine import unbalanced_fm as eng

SLUG = "unbalanced-fm"
_q = eng.QUOTED_SEED_GAINS   # measured per seed, re-measured by a test
_w = eng.QUOTED_SEED_W2      # the same, for the W2^2 numbers

layout.paper_header(
    SLUG,
    idea=(
        "Flow matching learns a velocity field by regressing on straight lines between paired points of a "
        "source and a target distribution. If every pairing must respect both distributions exactly, many "
        "lines are long and cross each other, and a small network integrated with few steps lands imprecisely. "
        "**Unbalanced** flow matching simply throws away candidate pairs that are farther apart than a cutoff "
        "τ. The surviving pairs are short and easy to learn, but they no longer have the exact source and "
        "target as marginals: the cutoff trades *how many candidates are usable* and *how faithful the "
        "marginals are* against *how precise the flow is*. FlexDock uses this twice: a coarse flow gets the "
        "overall picture right, and a short-range relaxation flow, trained only on nearby pairs of "
        "(coarse output, true target), polishes each output. Here the protein conformations are four "
        "Gaussian modes in the plane: a broad 'apo' source and a slightly rotated, sharp "
        "'holo' target, re-weighted by default."
    ),
    caveat="Toy scale: 2-D Gaussian mixtures replace protein structures, a Euclidean cutoff replaces the RMSD "
           "filter, and 'physically valid' becomes 'within 3σ₁ of a target mode'. Flows are small MLPs "
           "trained live for a few hundred steps. The budget matters for the composition badges: trained "
           "longer (the *Training steps per flow* slider), the standard flow A catches up and the relaxation's "
           "gain in precision shrinks below the badge's bar, while the unbalanced flow's gain over A grows. "
           "At the default budget both precision badges pass at seeds 0 and 1 and fail at seed 2 (gains "
           f"{_q[2][0]:.2f} and {_q[2][1]:.2f}). The negative control (under Advanced), a second flow with no "
           "cutoff, gains " + " / ".join(f"+{_q[s][2]:.2f}" for s in _q) + " at seeds 0 / 1 / 2 against the "
           "relaxation flow's " + " / ".join(f"+{_q[s][1]:.2f}" for s in _q) + ": at seeds 0 and 2 the "
           "relaxation's gain is mostly the extra training, at seed 1 the cutoff helps. The Wasserstein badge "
           f"compares each flow's output with a fresh target sample by exact optimal transport ({eng.N_W2} points, "
           "POT) and fails at the default settings: by that one number the unbalanced flow is much farther from the "
           "target (W₂² " + " / ".join(f"{_w[s][1]:.2f}" for s in _w) + " against standard FM's "
           + " / ".join(f"{_w[s][0]:.2f}" for s in _w) + " at seeds 0 / 1 / 2). It lands more precisely but "
           "reproduces the source's mode weights, and W₂² adds the cost of carrying mass between modes to the "
           "spread around each mode that the valid share counts. The relaxation, which keeps A's weights, "
           "leaves W₂² near A's (" + " / ".join(f"{_w[s][2]:.2f}" for s in _w) + ": higher at seed 0, "
           "slightly lower at seeds 1 and 2).",
)

cfg = state.bind_config(eng.Config, SLUG)
state.share_link(cfg)
layout.device_indicator()
res = run_or_stop("engine.unbalanced_fm", cfg, label="Training the flows")
layout.claims_panel(eng.claims(res))
m = res.metrics
tl = eng._tau_label(res.tau)

c1, c2, c3, c4 = st.columns(4)
# "(measured)" went into the help: with it the label was cut off with an ellipsis on a tablet (768 px)
c1.metric("Acceptance Z at τ", f"{m['z_train']:.3f}", help=f"measured; closed form {m['z_closed_form']:.3f}")
c2.metric("Valid: standard FM", f"{m['valid_standard']:.2f}")
c3.metric(f"Valid: unbalanced τ={tl}", f"{m['valid_unbalanced']:.2f}")
c4.metric("Valid: A + relaxation B", f"{m['valid_relax']:.2f}")

# W2^2 of each flow's output to the target, next to a floor: two samples of the target itself
w2_rows = [("standard FM", "standard"), (f"unbalanced τ={tl}", "unbalanced"), ("A + relaxation B", "relax")]
if "w2_control" in m:
    w2_rows.append(("A + B, τ_B = ∞", "control"))
w2_rows.append(("two target samples", "floor"))
for col, (name, tag) in zip(st.columns(len(w2_rows)), w2_rows):
    col.metric(f"W₂²: {name}", f"{m['w2_' + tag]:.3f}",
               help=(f"exact squared 2-Wasserstein distance (POT) between two {eng.N_W2}-point target samples: "
                     "about what a perfect flow would score here" if tag == "floor" else
                     f"exact squared 2-Wasserstein distance (POT) between the first {eng.N_W2} outputs and "
                     f"{eng.N_W2} fresh target points; lower is closer"))
st.caption("W₂² charges both for points that land off a mode (what the valid share counts) and for mass sitting "
           "on the wrong mode (what the mode-weight TV counts), so a flow can be more precise and still farther "
           "away.")

if "valid_control" in m:
    below = m["valid_gain_control"] < eng.VALID_GAIN_BAR
    st.info(f"Negative control: a relaxation flow with no cutoff (τ_B = ∞) raises the valid fraction by "
            f"{m['valid_gain_control']:+.2f}, {'below' if below else 'NOT below'} the "
            f"+{eng.VALID_GAIN_BAR:.2f} that the cutoff flow must reach ({m['valid_gain_relax']:+.2f})."
            + ("" if below else " So on this run the gain of B∘A comes from training a second flow at all, not "
               "from its cutoff: the relaxation claim is not supported here."), icon=":material/science:")

theta = np.linspace(0, 2 * np.pi, 60)


def _mode_circles(fig, mu, r, color, name):
    for k, c in enumerate(mu):
        fig.add_trace(go.Scatter(x=c[0] + r * np.cos(theta), y=c[1] + r * np.sin(theta), mode="lines",
                                 line=dict(color=color, width=1, dash="dot"), name=name, showlegend=k == 0,
                                 hoverinfo="skip"))


st.subheader("1 · The coupling at the current cutoff")
left, right = st.columns(2)
with left:
    fig = go.Figure()
    n_seg = min(150, len(res.pair_x0))
    xs, ys = [], []
    for a, b in zip(res.pair_x0[:n_seg], res.pair_x1[:n_seg]):
        xs += [a[0], b[0], None]
        ys += [a[1], b[1], None]
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line=dict(color="#bbbbbb", width=1), name="kept pair"))
    fig.add_trace(go.Scatter(x=res.pair_x0[:, 0], y=res.pair_x0[:, 1], mode="markers", marker=dict(size=4),
                             name="x₀ ~ source"))
    fig.add_trace(go.Scatter(x=res.pair_x1[:, 0], y=res.pair_x1[:, 1], mode="markers", marker=dict(size=4),
                             name="x₁ ~ target"))
    charts.themed(fig, f"One training batch of kept pairs, τ = {tl}", 420)
    fig.update_yaxes(scaleanchor="x", scaleratio=1)
    charts.show(fig, key="pairs")
    download.download_csv(pd.DataFrame({"x0": res.pair_x0[:, 0], "y0": res.pair_x0[:, 1],
                                        "x1": res.pair_x1[:, 0], "y1": res.pair_x1[:, 1]}), "ufm_pairs.csv")
with right:
    tau_plot = np.where(np.isinf(res.curve_tau), 5.0, res.curve_tau)
    fig = charts.lines(tau_plot, {"acceptance Z(τ)": res.curve_z, "TV(q₁, p₁)": res.curve_tv1,
                                  "TV(q₀, p₀)": res.curve_tv0, "mean kept ‖x₁−x₀‖² / 4": res.curve_len2 / 4},
                       title="Trade-off vs cutoff (closed form; kept length from 20 000 sampled pairs; "
                             "τ = ∞ drawn at 5)", xlabel="τ", height=420)
    fig.add_trace(go.Scatter(x=np.where(np.isinf(res.mc_tau), 5.0, res.mc_tau), y=res.mc_z, mode="markers",
                             name="Z measured by the sampler", marker=dict(symbol="x", size=9)))
    fig.add_trace(go.Scatter(x=np.where(np.isinf(res.mc_tau), 5.0, res.mc_tau), y=res.mc_tv1, mode="markers",
                             name="TV(q₁,p₁) measured", marker=dict(symbol="x", size=9)))
    if np.isfinite(res.tau):
        fig.add_vline(x=res.tau, line_dash="dot", line_color="gray")
    charts.show(fig, key="tradeoff")
    download.download_csv(pd.DataFrame({"tau": res.curve_tau, "Z": res.curve_z, "tv_q1_p1": res.curve_tv1,
                                        "tv_q0_p0": res.curve_tv0, "mean_len2": res.curve_len2}),
                          "ufm_tradeoff.csv")
    download.download_csv(pd.DataFrame({"tau": res.mc_tau, "Z_measured": res.mc_z, "tv_q1_p1_measured": res.mc_tv1}),
                          "ufm_tradeoff_measured.csv", key="dl-ufm-tradeoff-measured")

st.subheader("2 · Where each flow lands")
names = list(res.outputs)
cols = st.columns(len(names))
for i, (col, name) in enumerate(zip(cols, names)):
    with col:
        y, v = res.outputs[name][:1500], res.valid[name][:1500]
        fig = go.Figure()
        fig.add_trace(go.Scatter(x=y[~v, 0], y=y[~v, 1], mode="markers", marker=dict(size=3, color="#e4572e"),
                                 name="not valid"))
        fig.add_trace(go.Scatter(x=y[v, 0], y=y[v, 1], mode="markers", marker=dict(size=3, color="#29a36a"),
                                 name="valid"))
        _mode_circles(fig, res.mu1, 3 * res.sigma1, "black", "3σ₁")
        charts.themed(fig, name, 330, showlegend=i == 0)
        fig.update_yaxes(scaleanchor="x", scaleratio=1)
        charts.show(fig, key=f"out{i}")

fig = go.Figure()
fig.add_trace(go.Bar(x=[f"mode {k + 1}" for k in range(len(res.w1))], y=res.w1, name="target weights w₁",
                     marker_color="black"))
for name in names:
    fig.add_trace(go.Bar(x=[f"mode {k + 1}" for k in range(len(res.w1))], y=res.mode_hist[name], name=name))
charts.themed(fig, "Share of outputs nearest to each target mode", 340, barmode="group")
fig.update_yaxes(title="share of outputs")
charts.show(fig, key="modes")
download.download_csv(pd.DataFrame({"mode": np.arange(1, len(res.w1) + 1), "target": res.w1,
                                    **{n: res.mode_hist[n] for n in names},
                                    "centre_x": res.mu1[:, 0], "centre_y": res.mu1[:, 1],
                                    "valid_radius_3sigma1": 3 * res.sigma1}), "ufm_mode_weights.csv")
download.download_csv(pd.DataFrame([{"flow": n, "x": p[0], "y": p[1], "valid": bool(v)}
                                    for n in names for p, v in zip(res.outputs[n][:1500], res.valid[n][:1500])]),
                      "ufm_outputs.csv")

st.subheader("3 · Trajectories")
left, right = st.columns(2)
for col, traj, title, key in ((left, res.traj_standard, "standard FM", "trajs"),
                              (right, res.traj_unbalanced, f"unbalanced τ={tl}", "traju")):
    with col:
        fig = go.Figure()
        xs, ys = [], []
        for p in range(traj.shape[1]):
            xs += list(traj[:, p, 0]) + [None]
            ys += list(traj[:, p, 1]) + [None]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line=dict(width=1, color="#3b6fd8"), name="path"))
        fig.add_trace(go.Scatter(x=traj[-1, :, 0], y=traj[-1, :, 1], mode="markers", marker=dict(size=3,
                                 color="black"), name="end"))
        charts.themed(fig, f"200 particles, {cfg.n_euler} Euler steps: {title}", 380)
        fig.update_yaxes(scaleanchor="x", scaleratio=1)
        charts.show(fig, key=key)
download.download_json({"standard": res.traj_standard, "unbalanced": res.traj_unbalanced}, "ufm_trajectories.json")

fig = charts.lines({k: np.arange(len(v)) for k, v in res.losses.items()},
                   {k: pd.Series(v).rolling(20, min_periods=1).mean().to_numpy() for k, v in res.losses.items()},
                   title="Training loss (rolling mean of 20)", xlabel="step", ylabel="mean ‖v − (x₁ − x₀)‖²",
                   log_y=True)
charts.show(fig, key="loss")
download.download_csv(pd.DataFrame({k: pd.Series(v) for k, v in res.losses.items()}), "ufm_losses.csv")

if len(res.sweep_tau):
    st.subheader("4 · τ sweep: one unbalanced flow per cutoff")
    labels = [eng._tau_label(t) for t in res.sweep_tau]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=labels, y=res.sweep_valid, mode="lines+markers", name="valid fraction"))
    fig.add_trace(go.Scatter(x=labels, y=res.sweep_tv, mode="lines+markers", name="mode-weight TV"))
    best = labels[int(np.argmax(res.sweep_valid))]
    charts.themed(fig, f"Valid fraction and mode-weight TV against τ (valid fraction highest at τ = {best})", 360)
    fig.update_xaxes(title="τ")
    charts.show(fig, key="sweep")
    if best != labels[0]:
        st.caption(f"The spec expects the valid fraction to rise as τ shrinks; in this run it is highest at "
                   f"τ = {best}, not at the smallest cutoff τ = {labels[0]}, so the precision side of the "
                   "trade-off is not monotone here.")
    download.download_csv(pd.DataFrame({"tau": res.sweep_tau, "valid": res.sweep_valid, "tv": res.sweep_tv}),
                          "ufm_sweep.csv")
else:
    st.caption("Tick *τ sweep* under Advanced to train one flow per cutoff and plot the trade-off it produces.")

layout.how_it_works(r"""
**Conditional flow matching.** For pairs $(x_0, x_1) \sim q$, $t \sim U(0,1)$ and
$x_t = (1-t)x_0 + t x_1$, minimise $\;\mathbb E\,\|v_\theta(x_t, t) - (x_1 - x_0)\|^2$. Sampling integrates
$\dot x = v_\theta(x, t)$ from $t=0$ to $1$ with explicit Euler steps.

**Unbalanced coupling.** Draw candidates from $p_0 \otimes p_1$ and keep one with probability
$a(x_0,x_1) = \mathbb 1[\|x_1 - x_0\| \le \tau]$:
$$q(x_0,x_1) = \frac{p_0(x_0)\,p_1(x_1)\,a(x_0,x_1)}{Z},\qquad Z = \mathbb E_{p_0\otimes p_1}[a].$$
$Z$ is the **sample efficiency** (one usable pair per $1/Z$ candidates). The marginals
$q_1(x_1) = p_1(x_1)\,\mathbb E_{p_0}[a(\cdot, x_1)]/Z$ (and likewise $q_0$) differ from $p_1$, $p_0$: that is the
**approximation error**. $\tau=\infty$ gives $Z = 1$ and standard FM.

**Closed form for Gaussian modes.** For source mode $k$ and target mode $m$ with
$\Delta = \mu_{1m} - \mu_{0k}$ and $v = \sigma_0^2 + \sigma_1^2$, $\|x_1 - x_0\|^2 / v$ is noncentral
$\chi^2$ with 2 degrees of freedom and non-centrality $\|\Delta\|^2/v$, so
$P_{km}(\tau) = F_{\chi^2_2(\|\Delta\|^2/v)}(\tau^2/v)$, $Z = \sum_{km} w_{0k} w_{1m} P_{km}$ and the kept-pair
target weights are $\propto w_{1m}\sum_k w_{0k} P_{km}$.

**Composition.** Flow A is standard FM $p_0 \to p_1$. Flow B is unbalanced FM with a small cutoff
$\tau_B$ from a pool of A's outputs to $p_1$; the final sample is $B(A(x_0))$.

**Metrics.** *Valid*: within $3\sigma_1$ of a target mode centre. *Mode-weight TV*: assign each output to the
nearest target mode and take $\tfrac12\sum_m |\hat w_m - w_{1m}|$. *W₂²*: with $n$ outputs $y_i$ and $n$
fresh target points $z_j$, $\min_\pi \frac1n\sum_i \|y_i - z_{\pi(i)}\|^2$ over permutations $\pi$ (exact optimal
transport with uniform weights); two independent target samples give its floor.
""")
