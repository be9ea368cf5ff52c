import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from components import charts, download, layout, state
from components.runner import run_or_stop
from engine import safety_representations as eng

SLUG = "safety-representations"
layout.paper_header(
    SLUG,
    idea="An agent that is punished for its first mistakes can learn to fear a whole region instead of the "
         "few states that are actually dangerous, and then stops exploring. SRPL gives the agent an extra, "
         "learned input: for the current state, a predicted histogram of *how many steps remain until the next "
         "constraint violation*. The histogram comes from a small network trained by plain maximum likelihood "
         "on the agent's own finished episodes, and it is appended to the state that the value network sees "
         "(without passing gradients back). Here the agent walks a slippery island (water = cost) and we compare "
         "the plain agent, the SRPL agent and, optionally, an agent given the true distance to water.",
    caveat="Small-scale stand-in: a 7 × 10 gridworld and online Q(λ) with a failure penalty, written in numpy "
           "(one hidden layer of 64 ReLU units), instead of Safety Gym / MetaDrive with PPO-Lagrangian, CPO or CSC. "
           "The S2C buffer holds the last 4 000 labelled states (not 20 000) so that it tracks the current policy "
           "in a run this short.",
)
cfg = state.bind_config(eng.Config, SLUG)
state.share_link(cfg)
layout.device_indicator()
res = run_or_stop("engine.safety_representations", cfg, label="Training agents")
cl = eng.claims(res)
layout.claims_panel(cl)
if not cl[0].passed:
    per_seed = ", ".join(f"{s:.0f} vs {b:.0f}" for s, b in zip(res.final_cost["srpl"], res.final_cost["baseline"]))
    st.info(
        "Fewer violations with SRPL is **not reproduced** at this scale. Both agents use the same environment "
        f"random numbers and the same number of steps for each seed; water entries, SRPL vs plain, per seed: "
        f"{per_seed}. Greedy success after training: SRPL {res.eval_success['srpl'].mean():.2f}, plain "
        f"{res.eval_success['baseline'].mean():.2f}. Whether an agent learns to reach the goal at all varies a lot "
        "between seeds, and that swamps any effect of the extra input: an agent that learns to cross the narrow, "
        "slippery bridge keeps entering the water now and then, while one that never finds the goal and dawdles "
        "near the start collects fewer violations. The steps-to-cost model itself is learned well (last badge)."
    )

names = {v: eng.LABELS[v] for v in res.variants}
mean = {names[v]: res.cum_cost[v].mean(0) for v in res.variants}
bands = {names[v]: (res.cum_cost[v].min(0), res.cum_cost[v].max(0)) for v in res.variants}
charts.show(charts.lines(res.steps, mean, bands=bands, title="Cumulative constraint violations (water entries)",
                         xlabel="environment steps", ylabel="violations (seed mean, band = range)"), key="cost")
succ = {names[v]: np.nanmean(res.succ_rate[v], 0) for v in res.variants}
charts.show(charts.lines(res.succ_x, succ, title="Share of episodes that reach the goal, per 1 000 steps",
                         xlabel="environment steps", ylabel="success rate (seed mean)", mode="lines+markers"),
            key="succ")
df = pd.DataFrame({"step": res.steps, **{f"cum_cost_{v}": res.cum_cost[v].mean(0) for v in res.variants}})
download.download_csv(df, "cumulative_cost.csv", key="dl_cost")
st.caption("Greedy success after training (200 episodes, seed mean): " + ", ".join(
    f"{names[v]} {res.eval_success[v].mean():.2f}" for v in res.variants))

st.subheader("What the safety representation sees (SRPL, seed 1)")
near = lambda d: np.where(res.water, np.nan, d[..., : max(1, min(d.shape[-1] - 1, 2 // cfg.bin_size))].sum(-1))  # noqa: E731
c1, c2 = st.columns(2)
with c1:
    charts.show(charts.heatmap(near(res.pred_dist), title="S2C prediction: P(cost within ~2 steps)",
                               zmin=0, zmax=1, square=True), key="pred")
with c2:
    charts.show(charts.heatmap(near(res.exact_dist), title="Exact, final ε-greedy policy",
                               zmin=0, zmax=1, square=True), key="exact")

cols = st.columns(len(res.variants))
for col, v in zip(cols, res.variants):
    with col:
        fig = charts.heatmap(res.water.astype(float), title=f"Greedy policy: {names[v]}", height=260, square=True)
        fig.update_traces(text=res.arrows[v], texttemplate="%{text}", showscale=False, colorscale="Blues")
        charts.show(fig, key=f"pol_{v}")

R, C = res.water.shape
land = [(i, j) for i in range(R) for j in range(C) if not res.water[i, j]]
cell = st.selectbox("Cell for the steps-to-cost histogram (row, column)", land, index=0,
                    format_func=lambda c: f"row {c[0]}, col {c[1]}", key="srpl_cell")
K = res.pred_dist.shape[-1]
bins = [f"{k * cfg.bin_size + 1}–{min((k + 1) * cfg.bin_size, cfg.horizon)}" for k in range(K)]
bins[-1] += "+"
fig = go.Figure([go.Bar(x=bins, y=res.pred_dist[cell], name="S2C prediction"),
                 go.Bar(x=bins, y=res.exact_dist[cell], name="exact")])
charts.show(charts.themed(fig, f"Steps to the next cost from row {cell[0]}, col {cell[1]} "
                               f"(visited {int(res.visits[cell])} times)", 320,
                          xaxis_title="steps δ (bin)", yaxis_title="probability"), key="hist")
charts.show(charts.bars(bins, res.label_hist, title="Labels in the S2C buffer (plain maximum likelihood, no "
                        "reweighting)", ylabel="count"), key="labels")
rows = [{"row": i, "col": j, "bin": bins[k], "pred": res.pred_dist[i, j, k], "exact": res.exact_dist[i, j, k]}
        for i, j in land for k in range(K)]
download.download_csv(pd.DataFrame(rows), "steps_to_cost.csv", key="dl_s2c")

layout.how_it_works(r"""
**Labels.** For a finished episode $s_0,\dots,s_T$ with costs $c_t$, the steps to the next cost are
$\delta_t=\min\{j-t : j>t,\ c_j=1\}$, clipped to the safety horizon $H_s$ ($\delta_t=H_s$ when no cost follows).
With bin size $b$ the class is $\min(\lfloor(\delta_t-1)/b\rfloor, K-1)$, $K=\lceil H_s/b\rceil$.

**Steps-to-cost model.** A network $P_\phi(k\mid s)$ with $K$ softmax outputs minimises the cross-entropy
$-\log P_\phi(k_t\mid s_t)$ on recently labelled states.

**Augmented input.** The agent's value network receives $[\,s,\ P_\phi(\cdot\mid s)\,]$; the second part is treated
as a constant (no gradient of the value loss reaches $\phi$).

**Learner.** Parallel environments, rollouts of 8 steps, Q($\lambda$) targets
$G_t=r_t+\gamma\big[\lambda G_{t+1}+(1-\lambda)\max_a Q(s_{t+1},a)\big]$ ($\gamma=0.97$, $\lambda=0.6$),
squared error on the taken action, ε-greedy from 1 to 0.05 over the first 40 % of training.

**Exact check.** For the final ε-greedy policy $\pi$, push the state distribution forward with water and goal
absorbing: $P(\delta=k\mid s)$ is the mass that enters water at step $k$; what stays safe for $H_s-1$ steps goes to the
last bin. The badge compares it with $P_\phi$ by the total-variation distance $\tfrac12\sum_k|P_\phi-P|$.
""")
