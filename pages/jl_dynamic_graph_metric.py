"""JL-Metric: one random-projection number comparing two continuous-time dynamic graphs."""

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from components import charts, download, layout, state
from components.runner import run_on_upload, run_or_stop
from engine import jl_dynamic_graph_metric as eng

SLUG = "jl-dynamic-graph-metric"
layout.paper_header(
    SLUG,
    idea=(
        "How close is a generated dynamic graph to a real one? The usual answer cuts both event streams "
        "into snapshots, builds every snapshot graph and compares degree, clustering and spectrum "
        "statistics window by window: several numbers, blind to event features unless a feature statistic is "
        "added (the baseline here adds a feature-histogram distance), and slow. The paper "
        "instead writes each node's time-ordered history of events (features, time, source or "
        "destination) as one long vector and squeezes all of them with two shared Gaussian random "
        "projections into a small sketch per graph. Comparing sketches gives a single score that "
        "reacts to topology, features and timing, costs one sparse matrix product, and, by the "
        "Johnson–Lindenstrauss lemma, keeps the distances between the raw event streams. Below, a "
        "synthetic temporal block-model stream is perturbed step by step (rewired edges, noisy "
        "features, shuffled timestamps) and both kinds of metric are watched and timed."
    ),
    caveat=(
        "Small scale: synthetic streams of a few thousand events stand in for the paper's Reddit / "
        "Wikipedia / MOOC data, and the snapshot baselines are degree, clustering, Laplacian-spectrum "
        "and feature-histogram MMDs (no orbit counts, no learned GNN features). Nodes are matched by "
        "id between the two graphs, which holds here because every perturbed graph keeps the node set."
    ),
)
cfg = state.bind_config(eng.Config, SLUG, views=("snapshot_kind",))
state.share_link(cfg)
layout.device_indicator()

with st.expander("Use your own event stream (CSV)", icon=":material/upload_file:"):
    st.caption(f"Up to {eng.MAX_UPLOAD_BYTES // 2**20} MB. One event per row: source, destination, time, then any "
               f"numeric feature columns (up to {eng.MAX_UPLOAD_FEATURES}); comma, tab or semicolon separated, a "
               "header row optional, node ids may be any text, times numbers or dates. Your stream becomes the "
               f"reference that is perturbed and sketched; at most {eng.MAX_UPLOAD_NODES} nodes (the most active) "
               f"and {eng.MAX_UPLOAD_EVENTS:,} events (the earliest) are used, so the snapshot metrics stay within "
               "the time budget. The Nodes and Events settings then have no effect and the feature dimension applies only "
               "to the runtime race; a shared link cannot carry the file: it opens on the synthetic stream.")
    upload = st.file_uploader("Event stream", type=["csv", "tsv", "txt"], key=f"{SLUG}:upload")

res = run_on_upload("engine.jl_dynamic_graph_metric", cfg, upload, eng.MAX_UPLOAD_BYTES,
                    label="Reading, perturbing and sketching your stream",
                    fallback="The synthetic stream is used instead until the file is replaced or removed.")
if res is None:
    res = run_or_stop("engine.jl_dynamic_graph_metric", cfg, label="Perturbing, sketching and timing")
if res.source == "upload":
    st.caption(f":material/dataset: Reference stream: {layout.literal(upload.name)} — "
               + layout.error_text("; ".join(res.notes)) + ".")   # the notes quote the file's header row
else:
    st.caption(f":material/dataset: Reference stream: synthetic temporal block model, {cfg.n_nodes} nodes, "
               f"{cfg.n_events:,} events, {cfg.feat_dim} feature(s).")
layout.claims_panel(eng.claims(res))

st.subheader("The metric against perturbation strength")
x = res.strengths
charts.show(charts.lines(x, {k: res.jl[k] for k in res.kinds},
                         bands={k: (res.jl[k] - res.jl_sd[k], res.jl[k] + res.jl_sd[k]) for k in res.kinds},
                         title="JL distance to the reference stream (mean ± sd over repeats)",
                         xlabel="perturbation strength", ylabel="1 − mean column cosine", mode="lines+markers"),
            key="jl-sweep")
st.caption("A strength of 0 gives exactly 0: the same stream gives the same sketch."
           + (" On the default stream feature noise moves the metric less than rewiring, but it moves it "
              "monotonically — the snapshot topology metrics below do not see it at all."
              if "feature noise" in res.kinds else " This stream has no features, so there is no feature noise."))

tabs = state.bind_tabs(SLUG, "snapshot_kind", list(res.kinds))
for tab, kind in zip(tabs, res.kinds):
    with tab:
        charts.show(charts.lines(x, {f"{n} MMD²": v for n, v in res.snap[kind].items()},
                                 title=f"Snapshot metrics under {kind} ({cfg.n_snapshots} windows)",
                                 xlabel="perturbation strength", ylabel="MMD² over snapshots",
                                 mode="lines+markers"), key=f"snap-{kind}")

rho_fig = charts.heatmap(res.rho_table, x=list(res.kinds), y=res.rho_names, zmin=-1, zmax=1, diverging=True,
                         title="Does each metric rise with the perturbation? Spearman ρ(strength, metric)",
                         colorbar_title="ρ", height=330)
rho_fig.update_traces(texttemplate="%{z:.2f}")   # the value in each cell: a flat metric (ρ = 0) reads as white
charts.show(rho_fig, key="rho")
download.download_csv(pd.DataFrame(res.rho_table, index=res.rho_names, columns=list(res.kinds))
                      .rename_axis("metric").reset_index(), "jl_metric_spearman.csv", key="dl-jl-spearman")
st.caption("ρ = 0 marks a metric that stays flat. Read off which single number tracks every kind of damage; on "
           "the default stream only the JL score tracks all three. The monotonicity badge asks for ρ ≥ 0.9, which "
           "at the default 5 levels still lets one pair of neighbouring levels swap, and more pairs with more levels; "
           "strictly monotone is ρ = 1.")

rows = []
for kind in res.kinds:
    for i, p in enumerate(x):
        row = {"perturbation": kind, "strength": p, "jl_distance": res.jl[kind][i], "jl_sd": res.jl_sd[kind][i]}
        row.update({f"snapshot_{n}_mmd2": v[i] for n, v in res.snap[kind].items()})
        rows.append(row)
download.download_csv(pd.DataFrame(rows), "jl_metric_sweep.csv")

st.subheader("Runtime, side by side")
fig = charts.lines({"JL metric": res.timing_events, "snapshot metrics": res.timing_events},
                   {"JL metric": res.time_jl * 1e3, "snapshot metrics": res.time_snap * 1e3},
                   title="Time to score one generated graph against cached reference statistics (median)",
                   xlabel="events in the stream", ylabel="milliseconds", log_y=True, log_x=True,
                   mode="lines+markers")
charts.show(fig, key="runtime")
st.caption("Timed with time.perf_counter during this run (medians of 5 JL / 2–3 snapshot repeats). Snapshot "
           "metrics build every window's graph and diagonalise its Laplacian, a cost cubic in the nodes; "
           "the JL sketch is one pass over the events.")
download.download_csv(pd.DataFrame({"nodes": res.timing_nodes, "events": res.timing_events,
                                    "jl_seconds": res.time_jl, "snapshot_seconds": res.time_snap}),
                      "jl_metric_runtime.csv")

st.subheader("Distances kept by the projection")
eps = res.jl_eps
fig = charts.scatter(res.exact_dist, res.proj_dist, title="Every pair of graphs in the sweep: raw vs sketched distance",
                     xlabel="‖M_a − M_b‖ (raw event-history matrices)", ylabel="‖G_a − G_b‖ (sketches)",
                     name="graph pairs")
if len(res.exact_dist):
    lim = np.array([0.0, float(res.exact_dist.max()) * 1.05])
    fig.add_trace(go.Scatter(x=lim, y=lim, mode="lines", name="equal", line=dict(color="gray", dash="dot")))
    if eps < 1:
        for sgn, nm in ((1, "JL bound (1 ± ε)"), (-1, None)):
            fig.add_trace(go.Scatter(x=lim, y=lim * np.sqrt(1 + sgn * eps), mode="lines", name=nm or "",
                                     showlegend=nm is not None, line=dict(color=charts.COLORS[1], dash="dash")))
charts.show(fig, key="jl-bound")
download.download_csv(pd.DataFrame({"exact": res.exact_dist, "projected": res.proj_dist, "jl_eps": eps}),
                      "jl_metric_distances.csv")

layout.how_it_works(r"""
**Events to vectors.** A stream is a list of events $(u_i, v_i, t_i, \mathbf{x}_i)$. With features and
times min–max normalised, event $i$ contributes $[\mathbf{x}_i, t_i, 0]$ to its source and
$[\mathbf{x}_i, t_i, 1]$ to its destination. Node $v$'s vectors, in time order, are concatenated into one
row $M_v$ of a sparse matrix $M \in \mathbb{R}^{n \times s}$ (short histories are padded with zeros).

**Two random projections.** With $R_1 \in \mathbb{R}^{s\times d_1}$, $R_2 \in \mathbb{R}^{n\times d_2}$ and
i.i.d. entries $\mathcal{N}(0, 1/d_1)$ and $\mathcal{N}(0, 1/d_2)$, shared by all graphs of a comparison:

$$H = M R_1 \;(n \times d_1), \qquad G = H^\top R_2 \;(d_1 \times d_2).$$

**The score.** $\mathrm{JL}(A, B) = 1 - \frac{1}{d_2}\sum_k \cos\big(G_A[:,k],\, G_B[:,k]\big)$: a single
number, 0 for identical streams.

**Why distances survive.** $M \mapsto G$ is linear, so $G_A - G_B$ is the sketch of $M_A - M_B$, and
$\mathbb{E}\,\|G_A - G_B\|_F^2 = \|M_A - M_B\|_F^2$. The JL lemma says a Gaussian projection to $k$
dimensions keeps all pairwise squared distances of $N$ points within a factor $1 \pm \varepsilon$ with high
probability once $k \ge 4\ln N / (\varepsilon^2/2 - \varepsilon^3/3)$. For the two-stage sketch we use
the conservative effective dimension $k = d_1 d_2 / (d_1 + d_2)$ (the spread of a rank-one difference)
and check the worst pair against that $\varepsilon$.

**The baselines.** Snapshot metrics cut time into $T$ windows, build each window's graph, and compare the
reference and generated windows as two samples with a Gaussian-kernel MMD on degree, clustering,
normalised-Laplacian-spectrum and feature histograms. Each window costs a graph build and an
$O(n^3)$ eigendecomposition; the sketch costs $O(|E|\,(f+2)\,d_1 + n\,d_1 d_2)$.
""")
