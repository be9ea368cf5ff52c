import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from components import charts, download, layout, state
from components.runner import run_or_stop
from engine import qnn_ansatz as eng

SLUG = "qnn-ansatz"
layout.paper_header(
    SLUG,
    idea=(
        "Quantum circuit ansatzes are often ranked by how close their random parameter settings come to a "
        "unitary 2-design, i.e. how evenly they spread over all unitaries. That measures spread, not what "
        "the circuit can actually reach: the finite Clifford group is an exact 2-design but cannot build "
        "the T gate, while a one-qubit Euler circuit reaches every unitary and is *not* a 2-design. The "
        "paper asks a local question instead: after a small parameter update δ, how well can the new "
        "circuit be told apart from the old one, as a quantum channel? For rotation-gate circuits the "
        "answer is bounded by ½Σ|δⱼ|, so a circuit with few parameters hardly changes per update. Here "
        "every distance is computed exactly from the eigenvalues of U(θ)†U(θ+δ), on a statevector "
        "simulator written in torch."
    ),
    caveat=(
        "Exact channel distances on at most 6 qubits (the paper studies small HEAs; 7–8 qubits would not fit the time budget of a live page). The "
        "parameter-count sweep is fixed at 4 qubits and uses η from the sidebar; the 2-design panel "
        "uses 1 or 2 qubits."
    ),
)
cfg = state.bind_config(eng.Config, SLUG)
state.share_link(cfg)
layout.device_indicator()
res = run_or_stop("engine.qnn_ansatz", cfg, label="Simulating circuits")
st.sidebar.caption(f"This HEA has P = 2·n·L = {res.n_params} parameters.")
layout.claims_panel(eng.claims(res))

# 1. distance vs bounds
fig = go.Figure()
fig.add_trace(go.Scatter(x=res.b1, y=res.c, mode="markers", name="vs paper bound B₁ = ½Σ|δ|",
                         marker=dict(size=6, color=charts.COLORS[0])))
fig.add_trace(go.Scatter(x=res.b2, y=res.c, mode="markers", name="vs per-gate bound B₂ = Σ sin(|δ|/2)",
                         marker=dict(size=5, color=charts.COLORS[1], symbol="x")))
top = float(max(res.b1.max(), res.b2.max(), res.c.max()))
fig.add_trace(go.Scatter(x=[0, top], y=[0, top], mode="lines", name="c = bound",
                         line=dict(color="grey", dash="dash")))
fig.update_xaxes(title="bound")
fig.update_yaxes(title="measured distance c")
c1, c2 = st.columns(2)
with c1:
    charts.show(charts.themed(fig, f"Distance after a {cfg.perturbation} update vs its bounds", 400),
                key="scatter")
    gap = res.metrics["max_b2_shortfall"]
    st.caption(f"Each θ sample is drawn twice, once against each bound. B₂ is at most {100 * gap:.2g} % below B₁ in this "
               "run" + (", so the crosses sit on the dots; the two bounds separate only for larger updates (sin x "
                        "falls below x as x grows)." if gap < 0.02 else "."))
with c2:
    # counts on the left axis; each sample's Helstrom probability (from the engine) on the right one
    hist = make_subplots(specs=[[{"secondary_y": True}]])
    hist.add_trace(go.Histogram(x=res.c, nbinsx=30, marker_color=charts.COLORS[0],
                                name="θ samples per bin of c (left axis)"), secondary_y=False)
    order = np.argsort(res.c)
    hist.add_trace(go.Scatter(x=res.c[order], y=res.helstrom[order], mode="lines+markers",
                              marker=dict(size=4, color=charts.COLORS[1]), line=dict(color=charts.COLORS[1]),
                              name="Helstrom success probability ½(1 + c) (right axis)"), secondary_y=True)
    hist.update_xaxes(title="distance c")
    hist.update_yaxes(title="count of θ samples", secondary_y=False)
    # its own round ticks: ticks synced to the count axis' gridlines read 0.5308, 0.5386, ...
    hist.update_yaxes(title="Helstrom success probability", showgrid=False, tickmode="auto", secondary_y=True)
    charts.show(charts.themed(hist, f"Spread over θ (median Helstrom probability "
                                    f"{res.metrics['median_helstrom']:.3f})", 400), key="hist")
download.download_csv(pd.DataFrame({"c": res.c, "bound_b1": res.b1, "bound_b2": res.b2,
                                    "helstrom_p": res.helstrom}), "qnn_distances.csv",
                      label="Download per-sample distances (CSV)")

# 3. sweep over parameter count
q = np.quantile(res.sweep_c, [0.1, 0.5, 0.9], axis=1)
fig3 = charts.lines(res.sweep_p, {"median c": q[1]}, bands={"median c": (q[0], q[2])}, mode="lines+markers",
                    title=f"Gradient step η = {cfg.eta:g} on 4 qubits: distance vs parameter count "
                          "(band: 10–90%)", xlabel="parameters P", ylabel="distance c", log_x=True)
charts.show(fig3, key="sweep")
download.download_csv(pd.DataFrame({"P": np.repeat(res.sweep_p, res.sweep_c.shape[1]),
                                    "c": res.sweep_c.ravel()}), "qnn_gradient_sweep.csv",
                      label="Download the sweep (CSV)")

# 4. 2-design vs expressivity
c3, c4 = st.columns(2)
with c3:
    fb = charts.bars(res.design_names, res.frame_potential, title="Frame potential F² (Haar value 2)",
                     ylabel="F²", text_fmt=".3f")
    fb.add_hline(y=2.0, line_dash="dash", line_color="grey")
    fb.update_yaxes(range=[0, max(2.6, float(res.frame_potential.max()) * 1.1)])
    charts.show(fb, key="frame")
with c4:
    ok = ~np.isnan(res.t_distance)
    names = [n for n, k in zip(res.design_names, ok) if k]
    charts.show(charts.bars(names, res.t_distance[ok], title="Closest distance to the T gate",
                            ylabel="channel distance", text_fmt=".3g"), key="tdist")
    if not ok.all():
        st.caption("No bar for " + ", ".join(n for n, k in zip(res.design_names, ok) if not k) + ": over a "
                   "finite sample of a continuous ensemble the closest distance says more about the sample size "
                   "than about the ensemble (for Haar, whose support contains T, it tends to 0 as samples grow).")
download.download_csv(pd.DataFrame({"ensemble": res.design_names, "frame_potential": res.frame_potential,
                                    "distance_to_T": res.t_distance}), "qnn_design_panel.csv",
                      label="Download the 2-design panel (CSV)")

layout.how_it_works(r"""
**Circuit.** Rotations $R_P(\theta)=e^{-i\theta P/2}$, $P\in\{X,Y,Z\}$. One HEA layer applies $R_Y$ then $R_Z$
to every qubit, then CZ (or CNOT) on neighbours $(q,q+1)$; $L$ layers give $P=2nL$ parameters. The simulator
applies each 2×2 gate to one tensor axis of a batch of states; the full unitary is the circuit applied to all
$2^n$ basis columns at once. Qubit 0 is the most significant bit.

**Distance between unitary channels.** With $W=U(\theta)^\dagger U(\theta+\delta)$ and $\Theta$ the width of the
smallest arc of the unit circle holding all eigenvalues of $W$ ($2\pi$ minus the largest circular gap between
eigenphases),

$$
c_U(\theta,\delta)=\tfrac12\bigl\|U(\theta)\cdot U(\theta)^\dagger-U(\theta+\delta)\cdot U(\theta+\delta)^\dagger
\bigr\|_\diamond=\begin{cases}\sin(\Theta/2)&\Theta<\pi\\1&\text{otherwise.}\end{cases}
$$

A single-shot measurement tells the two channels apart with probability at most $\tfrac12(1+c)$.

**Bounds.** $c\le B_2=\sum_j\sin(|\delta_j|/2)\le B_1=\tfrac12\sum_j|\delta_j|$ (each rotation contributes at most
$\sin(|\delta_j|/2)$ and distances add up along a circuit).

**Updates.** Uniform $\delta_j\sim U[-\varepsilon,\varepsilon]$, or a gradient step $\delta=-\eta\nabla_\theta C$ for
$C(\theta)=\langle0|U^\dagger Z_0U|0\rangle$, with the exact parameter-shift rule
$\partial_jC=\tfrac12[C(\theta+\tfrac\pi2e_j)-C(\theta-\tfrac\pi2e_j)]$.

**2-design measure.** Frame potential $F^{(2)}=\mathbb E_{U,V}|\mathrm{tr}\,U^\dagger V|^4$, equal to 2 for Haar
unitaries (and for any exact 2-design); for a group $F^{(2)}=\frac1{|G|}\sum_g|\mathrm{tr}\,g|^4$, for samples the
average over pairs $i\ne j$. The Clifford group is enumerated by breadth-first search from H, S and CNOT,
modulo global phase (24 elements on one qubit, 11,520 on two). The Euler circuit reaches
$T=\mathrm{diag}(1,e^{i\pi/4})$ through an analytic Z-Y-Z decomposition.
""")
