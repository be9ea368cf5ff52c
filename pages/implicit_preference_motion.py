"""DPA-OMF: align a motion token model with DPO on pairs ranked by occupancy matching to the demo."""

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from components import charts, download, layout, state
from components.runner import run_or_stop
from engine import implicit_preference_motion as eng
from engine.core import Int

SLUG = "implicit-preference-motion"

layout.paper_header(
    SLUG,
    idea=(
        "A traffic simulator built like a language model predicts one discrete action token per vehicle and "
        "time step, and is pre-trained to imitate logged human driving. Likelihood training does not directly "
        "punish what makes a rollout look wrong (rear-ending, drifting off the road), and asking people to "
        "rank multi-agent rollouts is expensive. The idea here: the demonstration of a scene already says "
        "what good looks like. Sample several rollouts of the pre-trained model for the same scene, measure "
        "how far the set of states each rollout visits (its *occupancy measure*) is from the states of the "
        "expert log with an optimal-transport distance, and rank the rollouts by it. The best and worst "
        "rollouts become preferred / rejected pairs for DPO. No labels, no reward model, no RL loop. The "
        "comparison is the adversarial construction, where the expert log always wins against any generated "
        "rollout."
    ),
    caveat="Toy scale: a synthetic three-lane highway with 8 IDM-driven cars replaces Waymo scenes, a "
           "≈2.7 k-parameter MLP token policy (agents act independently each step) replaces a 1 M-parameter "
           "transformer, occupancy features are hand-chosen, and the occupancy cloud uses every second time "
           "step (64 points per rollout) to keep the optimal-transport work live. Held-out evaluation uses 64 "
           "scenes × 2 rollouts. At the default settings seeds 0, 1, 3 and 4 reproduce every claim but the last "
           "(tested); seed 2 does not reproduce the realism claims either (DPO destabilises the policy there). The "
           "last badge is the spec's negative control for the preference claim: it expects a distance to another "
           "scene's log to fall toward chance, and here it does not.",
)

cfg = state.bind_config(eng.Config, SLUG, views=("scene",))
scene = state.bind_view(SLUG, "scene", Int(0, eng.N_HELD - 1, "Held-out scene shown"), st.sidebar, default=0)
state.share_link(cfg)
layout.device_indicator()
res = run_or_stop("engine.implicit_preference_motion", cfg, label="Sampling, ranking and aligning")
layout.claims_panel(eng.claims(res))
m = res.metrics
st.caption(f"Preference data: {int(cfg.n_scenes)} scenes × {int(cfg.k_samples)} reference rollouts; "
           f"{m['pref_fail_rate']:.0%} of these rollouts contain a collision or off-road event.")

COL = {"expert": "#222222", "reference": "#3b6fd8", "DPA-OMF": "#29a36a", "adversarial": "#e08a1e"}


def road(n_panels):
    """Road edges and lane markings of every panel, as one list of shapes (add_hline per line is slow)."""
    out = []
    for k in range(1, n_panels + 1):
        ax = "" if k == 1 else str(k)
        for yv, style in ((eng.EDGE_LO, {"color": "black", "width": 2}), (eng.EDGE_HI, {"color": "black", "width": 2}),
                          (1.75, {"color": "#aaaaaa", "dash": "dash", "width": 1}),
                          (5.25, {"color": "#aaaaaa", "dash": "dash", "width": 1})):
            out.append(dict(type="line", xref=f"x{ax} domain", x0=0, x1=1, yref=f"y{ax}", y0=yv, y1=yv, line=style,
                            layer="below"))
    return out


def draw(fig, states, ev, row, col, color, legend):
    """All cars of one rollout as a single trace (NaN breaks the line between cars), events as a second."""
    gap = np.full((1, states.shape[1]), np.nan)
    xs = np.concatenate([states[:, :, 0], gap]).T.ravel()
    ys = np.concatenate([states[:, :, 1], gap]).T.ravel()
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", line=dict(color=color, width=1.5),
                             marker=dict(size=3), showlegend=False, hoverinfo="skip"), row=row, col=col)
    if ev.any():
        fig.add_trace(go.Scatter(x=states[..., 0][ev], y=states[..., 1][ev], mode="markers",
                                 marker=dict(color="red", size=8, symbol="x"), name="collision / off-road",
                                 showlegend=legend), row=row, col=col)


st.subheader("1 · One held-out scene, top-down")
names = [n for n in ("expert", "reference", "DPA-OMF", "adversarial") if n in res.view_states]
fig = make_subplots(rows=len(names), cols=1, shared_xaxes=True, subplot_titles=names, vertical_spacing=0.06)
for i, n in enumerate(names):
    draw(fig, res.view_states[n][scene], res.view_events[n][scene], i + 1, 1, COL[n], i == 0)
charts.themed(fig, f"Held-out scene {scene}: 8 s of driving (x right, lanes up); red × = event", 170 * len(names),
              shapes=road(len(names)))
fig.update_xaxes(title="x (m)", row=len(names), col=1)
charts.show(fig, key="scene")
download.download_csv(pd.DataFrame([{"model": n, "t": t, "agent": a, "x": s[t, a, 0], "y": s[t, a, 1],
                                     "v": s[t, a, 2], "event": bool(res.view_events[n][scene][t, a])}
                                    for n in names for s in [res.view_states[n][scene]]
                                    for t in range(s.shape[0]) for a in range(s.shape[1])]),
                      "ipm_scene.csv", key="dl_scene")

st.subheader("2 · The implicit preference: one training scene's rollouts ranked by OMF distance")
K = len(res.rank_dist)
cols = 4
rows = int(np.ceil(K / cols))
# short titles: four panels side by side leave little room in a narrow column; the colours mark chosen / rejected
titles = [f"#{i + 1} d={d:.2f}" for i, d in enumerate(res.rank_dist)]
fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles, shared_yaxes=True, vertical_spacing=0.12,
                    horizontal_spacing=0.04)
for i in range(K):
    r, c = i // cols + 1, i % cols + 1
    draw(fig, res.rank_expert, np.zeros(res.rank_expert.shape[:2], bool), r, c, "#bbbbbb", False)
    color = "#29a36a" if i < 2 else "#e4572e" if i >= K - 2 else "#3b6fd8"
    draw(fig, res.rank_states[i], res.rank_events[i], r, c, color, False)
charts.themed(fig, "Grey: the scene's expert log; green: preferred; orange: rejected; blue: in no pair", 200 * rows + 60,
              showlegend=False, shapes=road(K))
charts.mark_grid(fig, K, rows, cols, mode="flow", hs=0.04, vs=0.12)     # on a phone: two per row, still in rank order
charts.show(fig, key="ranked")
_ctrl_fails = m["agreement_control"] >= eng.AGREE_BAR      # the last badge's verdict (it asks for < the bar)
st.caption("Negative control for the preference claim (last badge): scored against a *different* scene's expert "
           f"log, the distance still prefers the clean rollout in {m['agreement_control']:.0%} of mixed pairs "
           f"(vs {m['agreement']:.0%} with the scene's own log)."
           + ((" Another scene's log clears the same bar, so the collision / off-road occupancy features, which "
               "every expert log lacks, carry most of that agreement; the scene-specific part of the distance "
               "mainly orders rollouts without events. Set the event feature weight to 0 to see the distance "
               "without them.") if _ctrl_fails and cfg.event_weight > 0 else
              " Another scene's log clears the same bar even with the event features weighted 0." if _ctrl_fails
              else " Another scene's log stays below the bar, while the scene's own log "
              + ("clears it: the scene-specific part of the distance carries the preference here."
                 if m["agreement"] >= eng.AGREE_BAR else "does not clear it either on this run.")))
download.download_csv(pd.DataFrame({"rank": np.arange(1, K + 1), "omf_distance": res.rank_dist,
                                    "has_event": res.rank_events.any((1, 2))}), "ipm_ranking.csv",
                      key="dl_rank")


def _rollout_frame(name, states, events):
    """One drawn rollout (time × agent) as rows of a long table."""
    t, a = np.indices(states.shape[:2])
    return pd.DataFrame({"rollout": name, "t": t.ravel(), "agent": a.ravel(), "x": states[:, :, 0].ravel(),
                         "y": states[:, :, 1].ravel(), "event": np.asarray(events, bool).ravel()})


download.download_csv(lambda r=res: pd.concat([_rollout_frame("expert", r.rank_expert, np.zeros(r.rank_expert.shape[:2]))]
                                              + [_rollout_frame(f"rank {i + 1}", s, e)
                                                 for i, (s, e) in enumerate(zip(r.rank_states, r.rank_events))],
                                              ignore_index=True),
                      "ipm_ranked_rollouts.csv", key="dl_rank_rollouts")

st.subheader("3 · Realism on held-out scenes")
methods = list(res.table)
labels = {"collision": "collision rate", "offroad": "off-road rate", "omf": "OMF distance to expert",
          "w1_speed": "W1 speed (m/s)", "w1_accel": "W1 acceleration (m/s²)"}
# rows of at most three charts: five in a row leave each about 140 px in a laptop window, too narrow for a bar chart
items = list(labels.items())
cells = [c for start in range(0, len(items), 3) for c in st.columns(3)][:len(items)]
for col, (k, lab) in zip(cells, items):
    with col:
        charts.show(charts.bars(methods, [res.table[n][k] for n in methods], title=lab,
                                errors=[res.errors[n][k] for n in methods],
                                colors=[COL[n] for n in methods], height=320), key=f"bar_{k}")
# where alignment made a metric worse than the pre-trained reference, the engine lists it; say so
aligned = "DPA-OMF"
worse = [f"{labels[k]} {res.table[aligned][k]:.3g} vs the reference's {res.table['reference'][k]:.3g}"
         for k in res.worse_than_reference]
st.caption("Error bars: bootstrap standard deviation over held-out scenes (none for the pooled W1 distances). "
           "Collision/off-road rates and W1 distances are computed without the preference distance."
           + (f" Not every metric improves on this run: {aligned} is more than "
              f"{100 * (eng.WORSE_FACTOR - 1):.0f} % worse than the pre-trained "
              "reference on " + "; ".join(worse) + ". The badges measure failures and the occupancy distance, as "
              "the spec asks; this is a cost they do not see." if worse else ""))
download.download_csv(pd.DataFrame([{"method": n, **res.table[n], **{f"{k}_se": v for k, v in res.errors[n].items()}}
                                    for n in methods]), "ipm_realism.csv", key="dl_real")

st.subheader("4 · DPO training")
left, right = st.columns(2)
with left:
    if any(len(v) for v in res.loss_curves.values()):
        fig = charts.lines({k: np.arange(1, len(v) + 1) for k, v in res.loss_curves.items()},
                           {k: pd.Series(v).rolling(10, min_periods=1).mean().to_numpy()
                            for k, v in res.loss_curves.items()},
                           title="DPO loss (rolling mean of 10; log 2 at the start)", xlabel="step", ylabel="DPO loss")
        fig.for_each_trace(lambda t: t.update(line_color=COL.get(t.name, t.line.color)))  # the page's colours
        charts.show(fig, key="loss")
        download.download_csv(pd.DataFrame({k: pd.Series(v) for k, v in res.loss_curves.items()}),
                              "ipm_dpo_loss.csv", key="dl_loss")
    else:
        st.caption("0 DPO steps: the aligned policy is the reference.")
with right:
    fig = charts.lines(res.curve_steps, res.curve_omf, title="Held-out OMF distance during DPO (16 scenes)",
                       xlabel="DPO step", ylabel="OMF distance", mode="lines+markers")
    fig.for_each_trace(lambda t: t.update(line_color=COL.get(t.name, t.line.color),
                                          marker_color=COL.get(t.name, t.marker.color)))
    charts.show(fig, key="curve")
download.download_csv(pd.DataFrame({"step": res.curve_steps, **{k: v for k, v in res.curve_omf.items()}}),
                      "ipm_dpo_curve.csv", key="dl_curve")
if "curve_best_step" in m and m["curve_best_step"] < res.curve_steps[-1] \
        and m["curve_last_omf"] > m["curve_best_omf"] + 0.1 * (m["curve_first_omf"] - m["curve_best_omf"] + 1e-9):
    st.info(f"Over-optimisation on this run: DPA-OMF's held-out OMF distance was lowest at DPO step "
            f"{m['curve_best_step']:.0f} ({m['curve_best_omf']:.2f}, from {m['curve_first_omf']:.2f} for the reference) "
            f"and is {m['curve_last_omf']:.2f} at the last step. With {cfg.n_scenes} scenes there are "
            f"{2 * cfg.n_scenes} preference pairs, and DPO keeps pushing their log-ratios apart after the policy has "
            "stopped improving. Fewer DPO steps or more preference scenes (sliders) move the result; the badges above "
            "are measured at the last step, with no early stopping picked on held-out scenes.",
            icon=":material/info:")

if len(res.sweep_m):
    st.subheader("5 · More preference scenes")
    fig = charts.lines(res.sweep_m, {"held-out OMF distance": res.sweep_omf, "failure rate": res.sweep_fail},
                       title="DPA-OMF vs number of preference scenes M", xlabel="M", log_x=True,
                       mode="lines+markers")
    charts.show(fig, key="sweep")
    download.download_csv(pd.DataFrame({"M": res.sweep_m, "omf": res.sweep_omf, "failure": res.sweep_fail}),
                          "ipm_sweep.csv", key="dl_sweep")
else:
    st.caption("Tick *Scaling sweep* under Advanced to rerun DPA-OMF on subsets of the preference scenes.")

layout.how_it_works(r"""
**Token model.** Each car picks one of 30 tokens (6 accelerations × 5 lateral speeds) from
$\pi(a\mid s_i)$, with features $s_i$ of its own state and its neighbours; all cars act at once, so
$\log \pi(\xi\mid c) = \sum_{t}\sum_{i} \log \pi(a_{t,i}\mid s_{t,i})$, evaluated on the stored states of the rollout.

**Occupancy measure.** A rollout becomes the uniform distribution over its points
$\phi = (x/10,\ y/1.75,\ v/5,\ t/4,\ w\cdot\text{collision},\ w\cdot\text{off-road})$.

**Occupancy-matching distance.** $d(\xi,\xi_E) = \langle P_\varepsilon, C\rangle$ with
$C_{jk} = \lVert\phi_j - \phi^E_k\rVert^2$ and $P_\varepsilon = \arg\min_{P\in U(a,b)} \langle P, C\rangle - \varepsilon H(P)$,
found by Sinkhorn scaling, $\varepsilon = 0.05\cdot\operatorname{median}(C)$.

**Preference pairs.** Rank the $K$ rollouts of a scene by $d$; pairs (1st, $K$-th) and (2nd, $(K{-}1)$-th).
Adversarial baseline: the expert log is preferred over the two worst rollouts.

**DPO.** $\mathcal L = -\log\sigma\big(\beta[(\log\pi_\theta(\xi_w) - \log\pi_{\text{ref}}(\xi_w)) -
(\log\pi_\theta(\xi_l) - \log\pi_{\text{ref}}(\xi_l))]\big)$, with $\pi_{\text{ref}}$ frozen and $\pi_\theta$ starting at
$\pi_{\text{ref}}$ (so the loss starts at $\log 2$).

**Realism, measured independently.** Share of car trajectories with a box overlap or leaving the road, and the
1-D Wasserstein distance between the pooled speed and acceleration distributions of model and expert on
held-out scenes.
""")
