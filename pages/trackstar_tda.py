"""TrackStar: tracing facts to training passages with corrected, projected, whitened gradients."""

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from components import charts, download, layout, state
from components.runner import run_or_stop
from engine import trackstar_tda as eng

SLUG = "trackstar-tda"
NAMES = {"bm25": "BM25", "grad_dot": "grad·grad", "grad_cos": "grad cosine", "adam_cos": "+ Adam correction",
         "trackstar": "TrackStar (+ Hessian)", "custom": "your combination"}

layout.paper_header(
    SLUG,
    idea=(
        "Which training passages taught a language model a fact? A gradient-based answer compares the loss "
        "gradient of the query (\"the capital of s12 is\" → city13) with the loss gradient of every training "
        "passage. Raw dot products are swamped by a few passages with huge gradients and by directions that "
        "every query shares. TrackStar fixes this one step at a time: divide by the optimizer's second "
        "moment, random-project to a fixed size, whiten with a task-specific Hessian approximation, and "
        "unit-normalise so the score is a cosine. The paper then separates two questions. *Attribution*: "
        "does the list contain a passage that states the fact? Lexical BM25 is strong here. *Influence*: does "
        "one training step on a listed passage actually raise the model's probability of the answer "
        "(tail-patch)? Here we rebuild both tests on a synthetic world of 240 facts and ~1 250 passages, "
        "with a small language model trained on them, and we measure where each rung of the ladder helps."
    ),
    caveat=(
        "Small scale: a 26 k-parameter causal MLP language model (context of 6 tokens) instead of an 8B "
        "transformer (an offline check with the spec's 2-layer, 123 k-parameter transformer gave the same verdicts: "
        "TrackStar's tail-patch gain a third of BM25's, whitening the rung that lowers it most), a synthetic world "
        "instead of T-REx and C4, and projections of about 2 000 dimensions "
        "instead of 65 536 (or none: 'Projection dim d' goes from 64 to 8 192, or the full gradients). "
        "Influence is measured by tail-patching (one AdamW step on a passage from the saved "
        "checkpoint and optimizer state) and, when you switch it on, by leave-some-out retraining that continues "
        "training from the checkpoint for a few hundred steps without the removed passages (not a retraining "
        "from scratch). The Hessian approximation R "
        "uses the gradients of the same 240 query prompts that are then evaluated (no labels of which "
        "passage is the source, but the same prompts). Gradients here are nearly orthogonal, so at d ≤ 2 048 "
        "the projection noise is about as large as a typical cosine: lists move with the projection seed "
        "(choose 'none' for the exact scores). "
        "Claims that fail at this scale are shown as not reproduced, not tuned away."
    ),
)

cfg = state.bind_config(eng.Config, SLUG)
state.share_link(cfg)
layout.device_indicator()
res = run_or_stop("engine.trackstar_tda", cfg, label="Encoding gradients and tail-patching")
m = res.metrics

layout.claims_panel(eng.claims(res))
if m["tp_trackstar"] < m["tp_adam_cos"]:
    rungs = "; ".join(f"{lbl} {m[f'tp_rung_{k}']:+.3f} ± {m[f'tp_rung_se_{k}']:.3f}" for lbl, k in
                      (("unit norm", "grad_cos"), ("Adam correction", "adam_cos"), ("whitening", "trackstar")))
    vs = "less" if m["tp_sources"] < m["tp_grad_dot"] else "not less"
    lam_note = (f"λ follows the paper's rule (λ = {m['lam_used']:.4f} on this run). Our first version fixed λ at 0.9; "
                f"because the query term is {m['trace_ratio_query_train']:.0f} times larger in trace than the training "
                "term here, the query term then dominated most query directions; tail-patch was no better (within "
                "about one standard error of the rule's value, on either side depending on the seed; switch the rule "
                "off to compare)." if cfg.lam_auto else
                f"λ comes from the slider ({m['lam_used']:.2f}); switch \"λ by the paper's rule\" on for the paper's "
                "calibration.")
    st.info(f"Not reproduced at this scale: the Hessian whitening *lowers* tail-patch influence (Δ "
            f"{m['tp_adam_cos']:.3f} without it, {m['tp_trackstar']:.3f} with it) while attribution MRR goes from "
            f"{m['mrr_adam_cos']:.2f} to {m['mrr_trackstar']:.2f}. Each rung as a paired difference over the same "
            f"queries (± one standard error): {rungs}; a rung within about two standard errors of zero is noise.",
            icon=":material/science:")
    with st.expander("Why, as far as we measured"):
        st.markdown(
            "To first order, a single small AdamW step changes log p(answer) by "
            "η(1−β₁)/bc₁ · g_q·(g_z/√v̂), a dot product with the optimizer correction on one side, no R and no "
            "normalisation. Over every patched (query, passage) pair on this run, that prediction and the measured Δ "
            f"correlate at r = {m['tp_first_order_r']:.2f}; the plain dot product g_q·g_z, without the optimizer "
            f"correction, at r = {m['tp_plain_dot_r']:.2f}"
            + (" (closer: at the real step size the passage gradients are not small next to √v̂, so Adam's step is "
               "not linear in them)" if m["tp_plain_dot_r"] > m["tp_first_order_r"] else "")
            + ". So at this scale the passages that a step on moves "
            "log p(answer) most are those with the largest gradient along the query's, and every "
            "transformation away from that score (R^(-1/2) in particular) ranks them lower. The model has seen each "
            f"fact's passages about {m['epochs']:.0f} times, so they are memorised and their gradients are small: one "
            f"step on the passages that state the fact raises log p(answer) by {m['tp_sources']:.3f} ± "
            f"{m['tp_sources_se']:.3f}, {vs} than a step on grad·grad's picks ({m['tp_grad_dot']:.3f}). The big gains "
            "come from high-loss passages that use the answer word in another sentence; a step on them raises the "
            "answer's prior. Share of the patched passages that contain the answer word: Adam-corrected cosine "
            f"{m['answer_share_adam_cos']:.0%}, TrackStar {m['answer_share_trackstar']:.0%}. Those passages have the "
            f"largest gradients, so they dominate R_train, and R^(-1/2) turns exactly their directions down. {lam_note} "
            "We checked the pipeline against independent computations (per-example gradients vs a backward loop, the "
            "AdamW step and the tail-patch gain vs torch's optimizer, whitening vs numpy, BM25 by hand) and found no "
            "bug. The tail-patch step uses the checkpoint's AdamW state, not plain SGD.")
if m["mrr_bm25"] <= m["mrr_trackstar"]:
    st.info("No misalignment at this scale: TrackStar finds the stating passages as well as BM25 does.")

c1, c2, c3, c4, c5 = st.columns(5)
# a short label: the long one was cut off in a fifth-width column; the tooltip says how it is measured
c1.metric("LM fact recall", f"{m['fact_recall']:.2f}",
          help="greedy top-1 answer of the LM. At most 0.76 by memorising: 57 of the 240 facts are never written "
               "in the query's own wording "
               "(the first template), only in the other two")
c2.metric("Parameters", f"{int(m['n_params']):,}")
c3.metric("Training passages", f"{int(m['n_passages']):,}")
c4.metric("Projected dimension", f"{int(m['proj_dim_actual']):,}" + (" (none)" if cfg.proj_dim == 0 else ""))
c5.metric("Hessian mix λ used", f"{m['lam_used']:.4f}", help="from the paper's rule" if cfg.lam_auto else "from the slider")

switches = [n for n, on in (("Adam", cfg.use_adam), ("Hessian", cfg.use_hessian), ("unit", cfg.use_unit)) if on]
NAMES["custom"] = "yours: " + ("+".join(switches) if switches else "raw dot")
names = [NAMES[k] for k in res.methods]
st.caption("The ladder adds one correction per bar (grad·grad → unit norm → Adam correction → Hessian "
           "whitening); the last bar is the combination of switches chosen under \"Your combination\" in "
           "the sidebar. The ladder badge asks that each rung raises tail-patch; the rung-by-rung paired "
           "differences and their standard errors are in its detail.")
st.subheader("Attribution: does the list contain a passage that states the fact?")
st.caption("Averaged over all 240 queries. MRR uses the rank of the first passage that states the query's fact; "
           "recall@10 is the share of those passages found in the top 10, precision@10 the share of the top 10 "
           "that state the fact.")
fig = go.Figure()
for label, vals in (("MRR", res.mrr), ("recall@10", res.recall10), ("precision@10", res.precision10)):
    fig.add_trace(go.Bar(x=names, y=vals, name=label, text=[f"{v:.2f}" for v in vals], textposition="outside"))
charts.themed(fig, "Attribution quality per method", 380, barmode="group")
charts.show(fig, key="attr")
download.download_csv(pd.DataFrame({"method": res.methods, "mrr": res.mrr, "recall10": res.recall10,
                                    "precision10": res.precision10}), "trackstar_attribution.csv")

st.subheader("Influence: does a training step on the retrieved passages raise log p(answer)?")
st.caption(f"Tail-patch over {len(res.tp_query_ids)} sampled queries: for each of a method's top {cfg.tp_k} "
           "passages, one AdamW step from the final checkpoint and optimizer state, then the change in "
           "log p(answer | prompt), averaged. The change is measured against the same step with a zero gradient: "
           "the saved momentum and weight decay alone move log p(answer) by "
           f"{m['tp_drift']:+.3f} on these queries whatever passage is patched, so that drift is taken out and 0 "
           "means no influence. Error bars: one standard error over queries.")
fig = charts.bars(names, res.tp_mean, title="Mean tail-patch Δ log p per method", ylabel="Δ log p(answer)",
                  errors=res.tp_se, height=400, text_fmt=".3f")
# the reference lines are named in the legend: the random and the fact-stating passages are too close for labels
# inside the plot, and labels in the right margin left a phone about 110 px of plot
fig.data[0].showlegend = False
for y_ref, dash, color, label in ((res.tp_self, "dot", "#444444", "step on the query itself"),
                                  (m["tp_sources"], "dashdot", "green", "passages that state the fact"),
                                  (res.tp_random, "dash", "gray", "random passages")):
    fig.add_hline(y=y_ref, line_dash=dash, line_color=color)
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=label, line=dict(dash=dash, color=color)))
charts.show(fig, key="tailpatch")
download.download_csv(pd.DataFrame({"method": res.methods, "tail_patch_mean": res.tp_mean, "tail_patch_se": res.tp_se,
                                    "query_self": res.tp_self, "random": res.tp_random,
                                    "true_sources": m["tp_sources"]}), "trackstar_tailpatch.csv")

st.subheader("True influence: leave-some-out retraining")
if res.loo is None:
    st.info("Leave-some-out retraining is off (it takes about 5–20 s). Switch it on under \"Leave-some-out "
            "retraining\" in the sidebar to measure the issue's proxy of true influence: for a group of queries, "
            "remove each method's top-k passages from the training set, continue training from the checkpoint "
            "without them, and measure how much log p(answer) drops.")
else:
    lo = res.loo
    st.caption(f"{len(lo['query_ids'])} queries; each method's top {lo['k']} passages for all of them are removed "
               f"together, then training continues from the checkpoint and its AdamW state for {lo['steps']} steps "
               "(batch 64). A control copy keeps every passage and sees the same minibatches, so the bar is the "
               "drop log p_control(answer) − log p_removed(answer), averaged over the queries. References: "
               "removing the true sources (every passage that states the fact) and removing random passages. "
               "Error bars: one standard error over queries.")
    arms = [a for a in lo["arms"] if a != "control"]
    ix = [lo["arms"].index(a) for a in arms]
    labels = [NAMES.get(a, {"random": "random passages", "proponents": "true sources"}.get(a, a)) for a in arms]
    fig = charts.bars(labels, lo["mean"][ix], title="Drop of log p(answer) after retraining without the passages",
                      ylabel="log p_control − log p_removed", errors=lo["se"][ix], height=400, text_fmt=".3f")
    charts.show(fig, key="loo")
    ladder = [m[f"loo_{k}"] for k in eng.GRAD_METHODS]
    best = max(("bm25", *eng.GRAD_METHODS), key=lambda k: m[f"loo_{k}"])
    heavy = lo["heavy_tailed"]      # the engine's verdict: medians well below the means for most of these arms
    st.info(f"Measured on this run: the largest drop comes from removing {NAMES[best]}'s passages "
            f"({m[f'loo_{best}']:.3f}); the ladder reads " + " → ".join(f"{x:.3f}" for x in ladder) +
            f" (grad·grad → cosine → + Adam → TrackStar), BM25 {m['loo_bm25']:.3f}, true sources "
            f"{m['loo_proponents']:.3f}, random {m['loo_random']:.3f}. "
            + ("The drops are heavy-tailed (medians: " if heavy else "Medians: ")
            + ", ".join(f"{NAMES.get(a, a)} {v:.3f}" for a, v in zip(lo['arms'], lo['median']) if a in
                        eng.TAIL_ARMS)
            + ("): a few facts the model barely knows carry most of the mean, so with tens of queries the order of "
               "the gradient methods changes with the query group (try the seed). " if heavy else
               ". With tens of queries the order of the gradient methods can change with the query group (try the "
               "seed). ")
            + "Rung by rung, paired over the same "
            "queries: " + ", ".join(f"{lbl} {m[f'loo_rung_{k}']:+.3f} ± {m[f'loo_rung_se_{k}']:.3f}" for lbl, k in
                                    (("unit norm", "grad_cos"), ("Adam correction", "adam_cos"),
                                     ("whitening", "trackstar")))
            + "; a rung within about two standard errors of zero is not resolved by this many queries, so the "
              "rung-count badge can flip either way on it. Failing badges above are left failing.",
            icon=":material/science:")
    download.download_csv(pd.DataFrame({"arm": lo["arms"], "mean_drop": lo["mean"], "se": lo["se"],
                                        "median_drop": lo["median"], "passages_removed": lo["n_removed"],
                                        "fact_recall_after": lo["recall"]}), "trackstar_leave_some_out.csv")

st.subheader("Attribution vs influence, query by query")
st.caption("Each point is a tail-patched query: x is the rank of the first passage that states the fact, y is the "
           "tail-patch gain of the method's top passages. Points far right but high are influential lists that "
           "do not contain the stating passage.")
fig = go.Figure()
for i, k in enumerate(("bm25", cfg.method)):
    fig.add_trace(go.Scatter(x=res.first_rank[k], y=res.tp_per_query[k], mode="markers", name=NAMES[k],
                             marker=dict(size=7, color=charts.COLORS[i], opacity=0.75)))
charts.themed(fig, "Rank of first stating passage vs tail-patch Δ", 380)
fig.update_xaxes(title="rank of first stating passage (log)", type="log")
fig.update_yaxes(title="tail-patch Δ log p")
charts.show(fig, key="misalign")
download.download_csv(pd.DataFrame({"query": res.tp_query_ids,
                                    **{f"first_rank_{k}": res.first_rank[k] for k in res.methods},
                                    **{f"tail_patch_{k}": res.tp_per_query[k] for k in res.methods}}),
                      "trackstar_per_query.csv")

st.subheader(f"Top 10 for query #{cfg.query}: “{res.query_text}” → {res.answer_text}")
st.caption("✓ marks a passage that states this query's fact. Sentences repeat in the corpus (distractors are drawn at "
           "random with replacement, and a fact stated four times reuses one of its three templates), so one "
           "sentence can fill neighbouring ranks.")
rows = []
for r in res.table:
    rows.append({"rank": r["rank"],
                 "BM25": ("✓ " if r["bm25 proponent"] else "") + r["bm25 passage"],
                 "BM25 score": round(r["bm25 score"], 3),
                 NAMES[cfg.method]: ("✓ " if r[f"{cfg.method} proponent"] else "") + r[f"{cfg.method} passage"],
                 f"{NAMES[cfg.method]} score": round(r[f"{cfg.method} score"], 4)})
table = pd.DataFrame(rows)
# a fixed number of decimals per score column, so the scores line up (rounding alone prints 11.01 under 11.707)
st.dataframe(table, hide_index=True, width="stretch",
             column_config={"BM25 score": st.column_config.NumberColumn(format="%.3f"),
                            f"{NAMES[cfg.method]} score": st.column_config.NumberColumn(format="%.4f")})
download.download_csv(pd.DataFrame(res.table), "trackstar_top10.csv")

st.subheader("Why normalisation matters: gradient norms of the passages")
st.caption("The red marks are the 10 passages that grad·grad puts into the most top-10 lists (the count is in "
           "the hover). They sit in the long right tail: raw dot products favour big gradients over relevant ones.")
fig = go.Figure(go.Histogram(x=res.grad_norms, nbinsx=60, name="all passages", marker_color=charts.COLORS[0]))
fig.add_trace(go.Scatter(x=res.grad_norms[res.frequent_dot], y=np.zeros(len(res.frequent_dot)), mode="markers",
                         marker=dict(color=charts.COLORS[1], size=11, symbol="triangle-up"),
                         name="most frequent in grad·grad top-10",
                         text=[f"in {c} top-10 lists" for c in res.frequent_dot_count]))
charts.themed(fig, "Histogram of per-passage gradient norms ‖∇θ L(z)‖", 360)
fig.update_xaxes(title="gradient norm")
fig.update_yaxes(title="passages")
charts.show(fig, key="norms")
norms_df = pd.DataFrame({"passage": np.arange(len(res.grad_norms)), "grad_norm": res.grad_norms,
                         "frequent_in_grad_dot_top10": np.isin(np.arange(len(res.grad_norms)), res.frequent_dot),
                         "grad_dot_top10_lists": 0})
norms_df.loc[np.asarray(res.frequent_dot, dtype=int), "grad_dot_top10_lists"] = res.frequent_dot_count
download.download_csv(norms_df, "trackstar_grad_norms.csv")

layout.how_it_works(r"""
**Gradients.** For a passage $z$, $g(z) = \nabla_\theta \tfrac1T\sum_t -\log p(z_{t}\mid z_{<t})$ at the final
weights; for a query, $g(q) = \nabla_\theta -\log p(\text{answer}\mid\text{prompt})$ (answer token only).

**The ladder.** grad·grad: $s = g(q)\cdot g(z)$. grad cosine: the same after unit normalisation.
+ Adam correction: $\tilde g = g / \sqrt{\hat v + \epsilon}$ with the bias-corrected second moment
$\hat v = v / (1-\beta_2^t)$ saved with the checkpoint. TrackStar adds whitening.

**Projection.** Each weight matrix gradient $G$ (size $o\times i$) becomes $P_o G P_i^\top$ with seeded Gaussian
factors ($N(0, 1/k)$ entries); bias vectors get a dense Gaussian. Sizes are shared in proportion to block size.
"none" keeps the full gradients ($d$ = 25 647).

**Whitening.** $R = \lambda\,\overline{\phi_q\phi_q^\top} + (1-\lambda)\,\overline{\phi_z\phi_z^\top} + \delta I$,
$\delta = 0.01\,\mathrm{tr}(R)/d$. By default $\lambda$ follows the paper's appendix: with both spectra sorted
in decreasing order, $\lambda\,\mathrm{eig}_k(R_q) = (1-\lambda)\,\mathrm{eig}_k(R_z)$ at $k \approx m\cdot 1000/65536$,
so the query term dominates only the top ~1.5 % of directions (those the queries share); $m = \min(d, n)$, the
number of directions that the $n$ = 1 488 gradients can span. The encoding is
$\hat\phi = R^{-1/2}\phi / \lVert R^{-1/2}\phi\rVert$ and the score $\hat\phi_q\cdot\hat\phi_z$. When $d > n$,
$R^{-1/2}$ is applied through the $n\times n$ Gram matrix of the stacked, scaled gradients $F$ ($R - \delta I = F^\top F$):
$R$ has eigenvalues $w + \delta$ on the row space of $F$ and $\delta$ elsewhere, which gives the same result as the
$d\times d$ eigendecomposition without forming it.

**BM25.** $\sum_{w\in q} \mathrm{idf}(w)\,\frac{f(w,z)(k_1+1)}{f(w,z) + k_1(1-b+b\,|z|/\overline{|z|})}$ with
$k_1=1.5$, $b=0.75$, $\mathrm{idf}=\ln\frac{N-n_w+0.5}{n_w+0.5}$ (negative values floored at $0.25\times$ the mean
idf). The query is prompt + answer.

**Tail-patch.** From $\theta$ and the saved AdamW moments $(m, v)$, one step on passage $z$:
$m' = \beta_1 m + (1-\beta_1) g$, $v' = \beta_2 v + (1-\beta_2) g^2$,
$\theta' = \theta(1-\eta\lambda_{wd}) - \eta\,\frac{m'/(1-\beta_1^{t+1})}{\sqrt{v'/(1-\beta_2^{t+1})}+\epsilon}$; the
influence is $\log p_{\theta'}(\text{answer}\mid\text{prompt}) - \log p_{\theta'_0}(\cdot)$, where $\theta'_0$ is the
same step taken with $g = 0$ (only the saved momentum and weight decay act), so a passage without influence scores 0.
Every pair restarts from the same state. To first order the gain is
$\eta(1-\beta_1)/(1-\beta_1^{t+1})\; g_q\cdot(g_z/\sqrt{\hat v+\epsilon})$ (shown on the page as a correlation).

**Leave-some-out retraining (opt-in).** For a query group $G$ and a method, remove
$S = \bigcup_{q\in G} \text{top-}k(q)$ from the training set, continue AdamW from the checkpoint for $T$ steps
(the same minibatch indices for every copy, removed passages simply left out), and report
$\log p_{\text{control}}(\text{answer}_q) - \log p_{-S}(\text{answer}_q)$ averaged over $q\in G$. All copies train
side by side as one stacked model (AdamW acts elementwise, so this equals separate runs).

**Concentration.** The share of all queries' top-10 slots held by the 10 passages that appear most often.
""")
