"""DP-BandMF: banded matrix-factorisation noise for DP training, optimised in O(n·b)."""

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from components import charts, download, layout, state
from components.runner import run_or_stop
from engine import dp_bandmf as eng

SLUG = "dp-bandmf"

layout.paper_header(
    SLUG,
    idea=(
        "A differentially private learner effectively publishes noisy running sums of clipped gradients. "
        "DP-SGD adds fresh, independent noise at every step, so the error in the running sum grows like the "
        "number of steps. *Matrix-factorisation* mechanisms instead add **correlated** noise that partly "
        "cancels in the running sum. Correlating over many steps breaks privacy amplification by "
        "subsampling, though. The **banded** variant correlates only over $b$ consecutive steps. That keeps "
        "each example's contributions separate, so amplification survives, and the best $b$ lies between "
        "DP-SGD ($b = 1$) and full correlation. This paper makes the search for good banded strategies cheap. "
        "With a banded *Toeplitz* strategy, the error and its gradient cost $O(n\\,b)$ instead of $O(n^3)$. "
        "Below we optimise one strategy per band count and calibrate each one's noise to the same "
        "$(\\varepsilon, \\delta)$. We then compare their errors and time the fast path against the dense "
        "formula."
    ),
    caveat=(
        "We measure error on the prefix-sum workload (the paper's RMSE proxy) and train no model. Our privacy "
        "accountant is Rényi-DP, which is looser than the PLD accountant used in practice: it shifts σ but "
        "not the shape of the trade-off. The largest n here is 262 144, not the paper's 10⁶ and more: at "
        "n = 2²⁰ only band counts up to 16 fit the time budget (one evaluation costs about n·b), far below the "
        "b ≈ ε√n/k the band-count badges look for, so those badges would fail by our cap, not by the method."
    ),
)

cfg = state.bind_config(eng.Config, SLUG)
state.share_link(cfg)
layout.device_indicator()
res = run_or_stop("engine.dp_bandmf", cfg, label="Optimising banded strategies")
for note in res.notes:
    st.info(note, icon=":material/schedule:")

layout.claims_panel(eng.claims(res))

m = res.metrics
c1, c2, c3, c4 = st.columns(4)
c1.metric("Best band count b*", f"{m['b_best']:.0f}")
c2.metric("Rule of thumb ε√n/k", f"{m['heuristic']:.1f}")
c3.metric("RMSE gain over DP-SGD", f"{1 / m['rmse_ratio']:.2f}×")
c4.metric("Epochs k", f"{m['epochs']:.2f}")

bands = res.bands
st.subheader("The trade-off: error against band count")
left, right = st.columns(2)
with left:
    fig = charts.lines(bands, {f"ε = {cfg.epsilon:g}": res.rmse, f"ε = {res.eps_low:g}": res.rmse_low},
                       title="RMSE of the noisy prefix sums", xlabel="bands b", ylabel="RMSE",
                       log_x=True, log_y=True, mode="lines+markers")
    charts.ref_line(fig, y=float(res.rmse[0]), text="DP-SGD (b = 1)", line_dash="dash", line_color="gray")
    fig.add_trace(go.Scatter(x=[m["b_best"]], y=[m["rmse_best"]], mode="markers", name="b*",
                             marker=dict(size=14, symbol="star", color="black")))
    charts.ref_line(fig, x=m["heuristic"], text="ε√n/k", line_dash="dot", line_color=charts.COLORS[0],
                    annotation_position="bottom right")   # clear of the DP-SGD label
    charts.show(fig, key="rmse")
with right:
    fig = charts.lines(bands, {f"ε = {cfg.epsilon:g}": res.sigma, f"ε = {res.eps_low:g}": res.sigma_low},
                       title="Noise multiplier σ needed for (ε, δ)", xlabel="bands b", ylabel="σ",
                       log_x=True, log_y=True, mode="lines+markers")
    charts.show(fig, key="sigma")
st.caption("More bands mean stronger noise cancellation (lower error per unit of noise) but less "
           "amplification: each example sits in a group sampled with the larger rate q = b·B/N, so σ must grow. "
           "The RMSE is σ times the square root of the mean error per unit of noise.")
download.download_csv(pd.DataFrame({"bands": bands, "sigma": res.sigma, "mean_error_unit_noise": res.mean_err,
                                    "mean_error_sqrt_init": res.init_err, "rmse": res.rmse,
                                    "sigma_eps_low": res.sigma_low, "rmse_eps_low": res.rmse_low}),
                      "bandmf_sweep.csv")

st.subheader(f"The strategy at b = {res.view_b}")
i_view = int(np.nonzero(bands == res.view_b)[0][0])
left, right = st.columns(2)
with left:
    c = res.coefs[i_view]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=np.arange(len(c)), y=c, name="optimised c", marker_color=charts.COLORS[0]))
    c_init = eng.sqrt_init(len(c))
    fig.add_trace(go.Scatter(x=np.arange(len(c)), y=c_init, mode="markers",
                             name="square-root init", marker=dict(color=charts.COLORS[1], size=7)))
    charts.themed(fig, "Band coefficients c (one column of C)", 340)
    fig.update_xaxes(title="lag r")
    charts.show(fig, key="coefs")
with right:
    g = res.gammas[i_view]
    charts.show(charts.lines(np.arange(len(g)), {"γ (C⁻¹)": g}, title="Noise correlation: coefficients of C⁻¹",
                             xlabel="lag", mode="lines+markers"), key="gamma")
download.download_csv(pd.DataFrame({"lag": np.arange(len(c)), "c": c, "sqrt_init": c_init}), "bandmf_coefficients.csv")
download.download_csv(pd.DataFrame({"lag": np.arange(len(g)), "gamma": g}), "bandmf_gamma.csv")

perstep = charts.lines(res.step_idx + 1, res.step_err, title="Squared error of the running sum at each step",
                       xlabel="step i", ylabel="eᵢ (with σ)", log_y=True)
perstep.update_yaxes(dtick=1)   # label the decades only: plotly's in-between "2", "5" read as a second scale
charts.show(perstep, key="perstep")
download.download_csv(pd.DataFrame({"step": res.step_idx + 1, **res.step_err}), "bandmf_per_step_error.csv")

st.subheader("Why it scales")
fig = charts.lines({"fast O(n·b) path": res.timing_n_fast, "dense O(n³) path": res.timing_n_dense},
                   {"fast O(n·b) path": res.timing_fast, "dense O(n³) path": res.timing_dense},
                   title="Seconds per error + gradient evaluation", xlabel="steps n", ylabel="seconds",
                   log_x=True, log_y=True, mode="lines+markers")
# decades only, as powers of ten (plotly's default labelled 2 and 5 between decades and wrote 100 µs as "100μ")
fig.update_xaxes(dtick=1, exponentformat="power")
fig.update_yaxes(dtick=1, exponentformat="power")
charts.show(fig, key="timing")
st.caption(f"Measured on this server when these settings were computed (b = {min(64, int(bands.max()))}). The dense path builds and "
           "inverts n×n matrices, so it stops at n = 512 here. The whole sweep above took "
           f"{m['opt_seconds']:.2f} s to optimise at n = {cfg.n:,}. The 'It scales' badge times the paper's large-n "
           f"regime on every run: one whole optimisation of a {m['scale_b']:.0f}-banded strategy at "
           f"n = {m['scale_n']:,.0f} took {m['scale_seconds']:.2f} s"
           + (" (that band count of the sweep itself)." if m["scale_reused"] else ", run beside the sweep."))
download.download_csv(pd.concat([
    pd.DataFrame({"path": "fast", "n": res.timing_n_fast, "seconds": res.timing_fast}),
    pd.DataFrame({"path": "dense", "n": res.timing_n_dense, "seconds": res.timing_dense})]), "bandmf_timing.csv")

if res.dense_cmp:
    d = res.dense_cmp
    st.subheader("Toeplitz against a general banded strategy")
    a, b, c_ = st.columns(3)
    a.metric("mean error, banded Toeplitz", f"{d['toeplitz_err']:.4f}")
    b.metric("mean error, general banded", f"{d['general_err']:.4f}")
    c_.metric("RMSE ratio", f"{d['rmse_ratio']:.4f}")
    st.caption(f"n = {d['n']}, b = {d['b']}; the general strategy has n·b free entries, normalised per column, "
               "and starts from the Toeplitz optimum.")
    download.download_json(d, "bandmf_general_vs_toeplitz.json")

layout.how_it_works(r"""
**Workload and factorisation.** The running sums of gradients are $A g$ with $A$ the $n\times n$
lower-triangular matrix of ones. Write $A = B C$ and release $B(Cg + z) = Ag + A C^{-1} z$,
$z \sim \mathcal N(0, \sigma^2 I)$. The error of step $i$ is $e_i = \sigma^2 \lVert (A C^{-1})_{i,:}\rVert^2$,
and the RMSE is $\sqrt{\tfrac1n\sum_i e_i}$.

**Banded Toeplitz strategy.** $C_{ij} = c_{i-j}$ for $0 \le i-j < b$, with $\lVert c\rVert_2 = 1$.
$C^{-1}$ is lower-triangular Toeplitz with coefficients $\gamma$: $\gamma_0 = 1/c_0$ and
$\gamma_i = -\tfrac1{c_0}\sum_{r=1}^{\min(i,b-1)} c_r\gamma_{i-r}$. This is one IIR filter pass, $O(nb)$.
$A C^{-1}$ is Toeplitz with $\beta = \operatorname{cumsum}(\gamma)$, so
$\tfrac1n\lVert A C^{-1}\rVert_F^2 = \tfrac1n\sum_k (n-k)\beta_k^2$ and $e_i = \sigma^2\sum_{k\le i}\beta_k^2$.

**Gradient (adjoint).** With $w_k = (n-k)/n$, let $g = \text{reverse-cumsum}(2 w\odot\beta)$ (that is
$\partial L/\partial\gamma$) and $u = C^{-\top} g$ (the same filter, run backwards). Then
$\partial L/\partial c_r = -\sum_i u_{i+r}\gamma_i$. We optimise with L-BFGS over
$c_r = \prod_{j\le r}\operatorname{sigmoid}(z_j)$ (then normalised). This keeps $c$ positive and
non-increasing, so $\gamma$ cannot blow up. The search starts from the truncated square-root factor of $A$.

**Sensitivity and amplification.** An example that participates at most once every $b$ steps touches
disjoint columns of $C$, so its sensitivity is 1 per participation. The $N$ examples are split into $b$
groups; step $i$ Poisson-samples group $i \bmod b$ at rate $q = bB/N$. Each example then faces
$\lceil n/b\rceil$ compositions of a subsampled Gaussian mechanism, and $b=1$ is DP-SGD.

**Accountant.** For integer orders $\alpha$,
$\mathrm{RDP}_\alpha = \tfrac1{\alpha-1}\log\sum_{j=0}^{\alpha}\binom{\alpha}{j}(1-q)^{\alpha-j}q^j
e^{(j^2-j)/(2\sigma^2)}$, and
$\varepsilon = \min_\alpha\big[T\,\mathrm{RDP}_\alpha + \log\tfrac{\alpha-1}{\alpha} -
\tfrac{\log\delta + \log\alpha}{\alpha-1}\big]$ with $T = \lceil n/b\rceil$. For each $b$ we bisect on $\log\sigma$ to hit the target $\varepsilon$.

**Rule of thumb.** The best band count is about $b^* \approx \varepsilon\sqrt n / k$ with $k = nB/N$ epochs.
""")
