"""Gap-dependent regret of UCB-Hoeffding, UCB-Advantage and Q-EarlySettled-Advantage on random tabular MDPs."""

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from components import charts, download, layout, state
from components.runner import run_or_stop
from engine import gap_dependent_q as eng
from engine.core import Multi

SLUG = "gap-dependent-q"

layout.paper_header(
    SLUG,
    idea=(
        "Optimistic Q-learning explores by adding a confidence bonus to its value estimates. In the worst case "
        "its regret grows like $\\sqrt{T}$. But if every bad action is worse than the best one by at least a "
        "gap $\\Delta$, a bad action only needs to be tried until its bonus shrinks below $\\Delta$, so the "
        "regret can grow like $\\log T/\\Delta$ instead. The paper proves such logarithmic bounds for two "
        "learners that split the value into a slowly-settled *reference* and a small *advantage* correction: "
        "**UCB-Advantage**, which updates only at the end of geometrically growing stages (and so also switches "
        "policy only logarithmically often), and **Q-EarlySettled-Advantage**. Here both of them and the classic "
        "**UCB-Hoeffding** learner run live on a batch of random MDPs with a gap you choose; regret is computed "
        "exactly by policy evaluation."
    ),
    caveat=("Tiny MDPs (a few states, actions and steps) and a bonus multiplier c < 1, the same c for every "
            "bonus of every learner: with the theory's constants (c = 1) the burn-in lasts far longer than a live "
            "run. All three learners run on the same MDPs with the same random numbers. The 1/Δ scaling need not "
            "hold exactly at this scale: burn-in exploration does not depend on Δ, so a learner with a long burn-in "
            "(UCB-Advantage, which updates only at stage ends) can show a late-regret ratio below the ratio of the "
            "gaps; the gap badges print each learner's measured ratio. Q-EarlySettled-Advantage (Li et al. "
            "2021: UCB + LCB + reference-advantage estimates updated every visit, reference frozen once "
            "V − V^LCB ≤ 1) updates after every visit, so it switches policy about as often as UCB-Hoeffding."),
)

cfg = state.bind_config(eng.Config, SLUG, views=("algorithms",))
state.share_link(cfg)
layout.device_indicator()
res = run_or_stop("engine.gap_dependent_q", cfg, label="Running the learners")

claims = eng.claims(res)
layout.claims_panel(claims)
_switch_badge = next(c for c in claims if c.label == "switches Advantage / Hoeffding")
m = res.metrics
if not (m["regret_ratio_adv"] <= 1.0 and m["regret_ratio_qes"] <= 1.0):
    parts = [
        "**Lower regret for the advantage methods is not reproduced here.** After "
        f"{int(m['K']):,} episodes the cumulative regret is {m['regret_hoef_0']:.0f} for UCB-Hoeffding, "
        f"{m['regret_adv_0']:.0f} for UCB-Advantage and {m['regret_qes_0']:.0f} for Q-EarlySettled-Advantage "
        "(first gap, seed mean)."
    ]
    if m["regret_ratio_adv"] > 1.0:
        role = ("its reference, and with it N₀, played no part in this run" if m["ref_active_adv_0"] == 0
                else "its reference shaped only those few updates")
        parts.append(
            f"In UCB-Advantage the reference-advantage estimate set Q in {m['ref_active_adv_0']:.1%} of the "
            "stage-end updates. Its bonus carries the lower-order terms 5c(Hι/n + Hι/ň + Hι^(3/4)/n^(3/4) + "
            "Hι^(3/4)/ň^(3/4)), and the ň^(-3/4) term alone stays above the plain bonus 2c√(H²ι/ň) until a single "
            f"stage holds more than 2.5⁴ι ≈ {m['adv_stage_visits_needed']:.0f} visits; c multiplies both, so a "
            "smaller c does not bring that point closer. Until then UCB-Advantage is a Hoeffding-style learner "
            "that uses only the last stage's samples (about 1/H of them) with a bonus constant of 2, and "
            f"{role}.")
    if m["regret_ratio_qes"] > 1.0:
        parts.append(
            f"Q-EarlySettled-Advantage's reference-advantage estimate set Q in {m['ref_active_qes_0']:.0%} of its "
            "updates, but that has not bought it a lower regret than UCB-Hoeffding's (compare the bars per "
            "doubling).")
    parts.append(
        ("The advantage that does show here is UCB-Advantage's far smaller number of policy switches "
         f"({m['switch_ratio']:.2f} of UCB-Hoeffding's). " if _switch_badge.passed else
         f"Even UCB-Advantage's policy switches are not far fewer on this run ({m['switch_ratio']:.2f} of "
         "UCB-Hoeffding's). ")
        + "The paper "
        "has no experiments: it compares the order of the bounds in T, H and 1/Δ (H⁵ against H⁶, in the table "
        "below), which needs far longer runs than a live page.")
    st.info(" ".join(parts))

names = list(eng.ALGOS)
# all three learners always run in one batch (the claims compare them); this picks the ones drawn
picked = state.bind_view(SLUG, "algorithms", Multi(eng.ALGOS, "Algorithms drawn",
                                                   help="a view setting: all three always run on the same MDPs, "
                                                        "and the downloads and the table hold all of them"))
shown = [(ai, n) for ai, n in enumerate(names) if n in picked]
groups = [f"Δ = {g:.2f}" if np.isfinite(g) else f"random draw {i + 1}" for i, g in enumerate(res.gaps)]
K = int(res.metrics["K"])
x = res.grid

st.subheader("Cumulative regret")
st.caption("Log-x axis: logarithmic regret is a straight line. Dashed: a·√k and a·k scaled to meet "
           "UCB-Hoeffding's curve at the first gap at K/8 (whether or not it is drawn), for comparison.")
fig = go.Figure()
for ai, name in shown:
    for gi, gname in enumerate(groups):
        fig.add_trace(go.Scatter(x=x, y=res.regret[ai, gi], name=f"{name}, {gname}", mode="lines",
                                 line=dict(color=charts.COLORS[ai], dash="solid" if gi == 0 else "dot", width=2)))
k8 = int(np.searchsorted(x, K // 8))
ref = res.regret[0, 0, k8]
ref_sqrt, ref_linear = ref * np.sqrt(x / x[k8]), ref * x / x[k8]
fig.add_trace(go.Scatter(x=x, y=ref_sqrt, name="∝ √k", mode="lines",
                         line=dict(color="gray", dash="dash", width=1)))
fig.add_trace(go.Scatter(x=x, y=ref_linear, name="∝ k", mode="lines",
                         line=dict(color="black", dash="dash", width=1)))
charts.themed(fig, "Cumulative expected regret (seed mean)", 420)
fig.update_xaxes(title="episode k", type="log")
fig.update_yaxes(title="regret", range=[0, 1.3 * float(np.max(res.regret))])
charts.show(fig, key="regret")
rows = {"episode": x}
for ai, name in enumerate(names):
    for gi, gname in enumerate(groups):
        rows[f"{name} {gname}"] = res.regret[ai, gi]
rows["reference ∝ √k"], rows["reference ∝ k"] = ref_sqrt, ref_linear
download.download_csv(pd.DataFrame(rows), "gap_q_regret.csv")

left, right = st.columns(2)
with left:
    fig = go.Figure()
    labels = [f"≤{int(e)}" for e in res.doublings]
    for ai, name in shown:
        for gi, gname in enumerate(groups):
            fig.add_trace(go.Bar(x=labels, y=res.per_doubling[ai, gi], name=f"{name}, {gname}",
                                 marker_color=charts.COLORS[ai], opacity=1.0 if gi == 0 else 0.5))
    charts.themed(fig, "Regret added per doubling of K", 380, barmode="group")
    fig.update_xaxes(title="episodes (K/2, K]")
    st.caption("Flat bars: log T growth. Bars growing by √2 each step: √T. Doubling: linear.")
    charts.show(fig, key="doubling")
    drows = {"episodes_up_to": res.doublings}
    for ai, name in enumerate(names):
        for gi, gname in enumerate(groups):
            drows[f"{name} {gname}"] = res.per_doubling[ai, gi]
    download.download_csv(pd.DataFrame(drows), "gap_q_per_doubling.csv")
with right:
    fig = go.Figure()
    for ai, name in shown:
        for gi, gname in enumerate(groups):
            fig.add_trace(go.Scatter(x=x, y=res.switches[ai, gi], name=f"{name}, {gname}", mode="lines",
                                     line=dict(color=charts.COLORS[ai], dash="solid" if gi == 0 else "dot")))
    charts.themed(fig, "Cumulative policy switches", 380)
    fig.update_xaxes(title="episode k", type="log")
    fig.update_yaxes(title="episodes whose policy changed")
    st.caption("A switch is an episode whose greedy policy differs from the previous episode's.")
    charts.show(fig, key="switches")
    srows = {"episode": x}
    for ai, name in enumerate(names):
        for gi, gname in enumerate(groups):
            srows[f"{name} {gname}"] = res.switches[ai, gi]
    download.download_csv(pd.DataFrame(srows), "gap_q_switches.csv")

st.subheader("Problem constants and final numbers")
scale_note = ("Here the smaller of the two already exceeds the trivial bound T = KH for every group, so these rows "
              "say how a bound moves with T, H and the gap, not how large the regret is."
              if res.metrics["bound_orders_above_T"] else "Without their constants they say how a bound moves with T, H and the gap, not how large the "
                   "regret is.")
st.caption("Δ_min and the maximal conditional variance Q* come from value iteration on the true MDPs. The paper "
           "is theoretical: it proves regret of order H⁵SA·log(SAT)/Δ_min for both advantage learners when Q* is at "
           "its worst case, Θ(H²), against H⁶SA·log(SAT)/Δ_min for Hoeffding-bonus Q-learning (Yang, Yang & Du "
           "2021), a factor H apart. The two 'order of' rows plug this run's S, A, H, T and Δ_min into those "
           "expressions with every constant left out (the exponents as the paper's public reviews quote them; its "
           "full bound, in which Q* replaces part of the H-dependence and which is smaller on low-variance MDPs, is "
           "not printed because we could not read its theorem). " + scale_note)
table = pd.DataFrame(res.table)
# one column per gap, one row per quantity (twelve columns ran off the page), each row at a precision that suits
# it; Q* of the gap-controlled family is 0 up to float round-off, which 3 decimals hide
raw_table = table.set_index("group").T
fmt = {"Δ_min (seed mean)": "{:.3f}", "max conditional variance Q*": "{:.3f}", "N_0": "{:.1f}", "ι": "{:.2f}",
       "log(SAT)/Δ_min": "{:.1f}"}        # the rest (regrets, switches): whole numbers
shown_table = pd.DataFrame({g: [fmt.get(q, "{:,.0f}").format(v) if pd.notna(v) else "–"
                                for q, v in raw_table[g].items()] for g in raw_table.columns},
                           index=raw_table.index)
st.dataframe(shown_table, width="stretch", height=35 * (len(shown_table) + 1) + 3)   # every row, no inner scroll
download.download_csv(table, "gap_q_table.csv")

st.subheader(f"Where the learners still err (last 10 % of episodes, {groups[0]})")
# one colour scale for the learners shown, topped at their largest share: a fixed 0-1 scale left shares of a few
# percent all the same dark colour
z_top = max([float(np.nanmax(res.subopt_visits[ai])) for ai, _ in shown
             if np.isfinite(res.subopt_visits[ai]).any()] + [0.01])
st.caption("Share of the visits to each state and step that took a suboptimal action; "
           + (f"one colour scale for all {len(shown)} maps, " if len(shown) > 1 else "")
           + f"topped at the largest share ({z_top:.1%}). Blank cells were not visited.")
cols = st.columns(len(shown))
for col, (ai, name) in zip(cols, shown):
    with col:
        z = res.subopt_visits[ai]
        charts.show(charts.heatmap(z, title=name, x=[f"s{i}" for i in range(z.shape[1])],
                                   y=[f"h{h + 1}" for h in range(z.shape[0])], xlabel="state", ylabel="step",
                                   colorbar_title="suboptimal", zmin=0.0, zmax=z_top, height=300),
                    key=f"subopt{ai}")
download.download_json({n: res.subopt_visits[i] for i, n in enumerate(names)}, "gap_q_suboptimal_visits.json")

layout.how_it_works(r"""
**Setting.** Episodic MDP, horizon $H$, $K$ episodes, $T = KH$. Ground truth by backward induction:
$Q^*_h(s,a) = r_h(s,a) + \sum_{s'} P_h(s'|s,a) V^*_{h+1}(s')$, $V^*_h = \max_a Q^*_h$. The gap is
$\Delta_h(s,a) = V^*_h(s) - Q^*_h(s,a)$; in the gap-controlled family the best action pays $\tfrac12 + \tfrac\Delta2$,
the others $\tfrac12 - \tfrac\Delta2$, and transitions do not depend on the action, so every positive gap is exactly $\Delta$.

**Regret.** $\mathrm{Regret}(K) = \sum_k V^*_1(s_1) - V^{\pi_k}_1(s_1)$, with $V^{\pi_k}$ from exact policy evaluation.

**UCB-Hoeffding.** After the $t$-th visit of $(h,s,a)$, with $\alpha_t = \frac{H+1}{H+t}$ and $\iota = \log(2SAT/p)$, $p = 0.1$:
$Q_h(s,a) \leftarrow (1-\alpha_t) Q_h(s,a) + \alpha_t\big[r + V_{h+1}(s') + c\sqrt{H^3\iota/t}\big]$, $V_h = \min(H, \max_a Q_h)$.

**UCB-Advantage.** $Q_h$ and $V_h$ start at $H-h+1$, the most reward left from step $h$ (Zhang et al.'s
initialisation; the other two learners start at $H$). Visits of $(h,s,a)$ are cut into stages of length $e_1 = H$,
$e_{j+1} = \lfloor (1+\frac1H) e_j\rfloor$.
At a stage end, with $\check n$ visits in the stage and $n$ in total,
$Q_h \leftarrow \min\{\, r + \tfrac{1}{\check n}\sum V_{h+1}(s') + b,\;
r + \tfrac1n \sum V^{\mathrm{ref}}_{h+1}(s') + \tfrac{1}{\check n}\sum (V_{h+1} - V^{\mathrm{ref}}_{h+1})(s') + \bar b,\; Q_h\}$,
where $b = 2c\sqrt{H^2\iota/\check n}$ and $\bar b$ is a Bernstein bonus built from the empirical variances of the
reference and of the advantage. $V_h$ changes only then, which is why the policy rarely switches.
The reference $V^{\mathrm{ref}}_h(s)$ is set to $V_h(s)$ once, when $(h,s)$ has been visited
$N_0 = (\text{multiplier})\cdot c\, SAH^2\iota$ times.

**Q-EarlySettled-Advantage.** Every visit updates, with the same $\eta_n = \frac{H+1}{H+n}$, an optimistic
Hoeffding estimate $Q^{\mathrm{UCB}}$, a pessimistic one $Q^{\mathrm{LCB}}$ (bonus subtracted) and a reference-advantage
estimate $Q^{\mathrm R}$ whose bonus is built from the running variances of the reference and of the advantage, plus a
term of order $c H^2\iota^{3/4}/n^{3/4}$; $Q_h = \min(Q^{\mathrm R}, Q^{\mathrm{UCB}}, Q_h)$. The reference follows
$V_h$ until $V_h - V^{\mathrm{LCB}}_h \le 1$ and is then frozen.

**Fair comparison.** All three learners run in one batch on the same MDPs, with the same random numbers for the
transitions, and every bonus is scaled by the same $c$.

**Reading the log-T claim.** If regret grows like $\log K$, each doubling of $K$ adds the same amount; like $\sqrt K$,
each doubling adds $\sqrt2$ times more; linearly, twice more. The badge measures that factor averaged over the last
two doublings,

$$\rho = \sqrt{\frac{R(K)-R(K/4)}{R(K/4)-R(K/16)}}.$$
""")
