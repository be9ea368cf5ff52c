import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from components import charts, download, layout, state
from components.runner import run_or_stop
from engine import integrative_decoding as eng

SLUG = "integrative-decoding"
layout.paper_header(
    SLUG,
    idea=(
        "Sampling a model several times and keeping the answer most samples agree on improves factuality, but "
        "for free-form text \"agree\" is hard to define. Integrative decoding avoids the definition: sample k "
        "answers, write k new prompts that each show the question plus *one* of those answers with an "
        "instruction to answer again, and decode a single new answer for all k prompts in lock-step — every "
        "next token is the one with the highest *sum* of the k log-probabilities. Facts that most conditioned "
        "copies agree on win, token by token, and the final answer can combine correct facts that came from "
        "different samples."
    ),
    caveat=(
        "No generative LM can be downloaded here, so the decoder runs on an *analytic language model* of a "
        "synthetic world (entities with 5 facts each; by default every value has several synonymous spellings, "
        "which is what traps greedy decoding). No small LM (such as a tiny GRU) is trained on text from this world "
        "either: the analytic model gives exactly the next-token distributions such an LM could only "
        "approximate, so no LM's own errors blur the comparison of decoders. The decoding functions are generic over any "
        "next-token function; the toy's facts are independent, so its absolute accuracies are not LLM numbers. The 'fact vote' and "
        "'USC-like' baselines need structured facts and are idealised upper references. The integration badge "
        "departs from the spec: at the default settings the spec's share (ID(4) beats each of its 4 inputs, bar "
        "0.10) is met by greedy decoding alone for more entities than by ID, so the badge also requires beating greedy and uses a "
        "lower bar, 0.04; the spec's share is in its detail."
    ),
)
cfg = state.bind_config(eng.Config, SLUG)
state.share_link(cfg)
layout.device_indicator()
res = run_or_stop("engine.integrative_decoding", cfg, label="Decoding")
layout.claims_panel(eng.claims(res))

k = res.k_values
ys = {"integrative decoding": res.acc_id, "USC-like selection": res.acc_usc, "fact-level vote": res.acc_vote,
      "greedy (k = 1 decode)": np.full(len(k), res.acc_greedy), "one sample": np.full(len(k), res.acc_sample)}
fig = charts.lines(k, ys, title="Fact accuracy vs number of sampled responses k", xlabel="k (log scale)",
                   ylabel="share of correct facts", log_x=True, mode="lines+markers")
fig.update_xaxes(tickvals=list(k), ticktext=[str(v) for v in k])
charts.show(fig, key="acc_k")
if 16 in set(int(v) for v in k):
    ar = res.all_right
    st.caption(f"Entities with every fact right: integrative decoding (k = 16) {ar['ID']:.0%}, greedy "
               f"{ar['greedy']:.0%}, one sample {ar['sample']:.0%}.")
download.download_csv(pd.DataFrame({"k": k, "id": res.acc_id, "usc_like": res.acc_usc, "fact_vote": res.acc_vote,
                                    "greedy": res.acc_greedy, "one_sample": res.acc_sample}),
                      "id_accuracy_vs_k.csv")

st.subheader(f"One entity in detail (entity {cfg.example % cfg.entities}, k = {cfg.k})")
F = res.detail_samples.shape[1]
z = np.vstack([res.detail_correct.astype(float), np.full((1, F), np.nan), res.detail_id_correct[None].astype(float),
               res.detail_greedy_correct[None].astype(float)])
text = np.vstack([res.detail_samples.astype(str), np.full((1, F), ""), res.detail_id[None].astype(str),
                  np.full((1, F), "")])
ylab = [f"sample {i + 1}" for i in range(res.detail_samples.shape[0])] + [" ", "ID answer", "greedy answer"]
hm = go.Figure(go.Heatmap(z=z, x=[f"fact {i + 1}" for i in range(F)], y=ylab, text=text, texttemplate="%{text}",
                          colorscale=[[0, "#e4572e"], [1, "#29a36a"]], zmin=0, zmax=1, showscale=False))
hm.update_yaxes(autorange="reversed")
charts.show(charts.themed(hm, "Sampled answers (value index; green = correct), the ID answer and whether "
                          "greedy's was correct",
                          height=160 + 22 * len(ylab)), key="detail_grid")
download.download_csv(pd.DataFrame([{"row": ylab[r], "fact": j + 1, "value_index": text[r, j], "correct": z[r, j]}
                                    for r in range(len(ylab)) if ylab[r].strip() for j in range(F)]),
                      "integrative_decoding_detail_answers.csv", key="dl-integrative-decoding-detail-answers")
# one y axis for all facts: the bars compare across panels, and on a narrow screen the inner panels' tick labels would
# be drawn over their left neighbours
sub = make_subplots(rows=1, cols=F, subplot_titles=[f"fact {i + 1}" for i in range(F)], horizontal_spacing=0.03,
                    shared_yaxes=True)
rows = []
for i, top in enumerate(res.detail_top):
    labels = [t[0] for t in top]
    vals = [t[1] for t in top]
    colors = ["#29a36a" if t[2] else "#e4572e" for t in top]
    sub.add_trace(go.Bar(x=labels, y=vals, marker_color=colors, showlegend=False), row=1, col=i + 1)
    rows += [{"fact": i + 1, "token": a, "summed_logprob": b, "true_value": c} for a, b, c in top]
sub.update_yaxes(title="summed log-prob", row=1, col=1)
charts.show(charts.themed(sub, "Summed log-probabilities of the top tokens at each step (v = value, s = spelling; "
                          "green = true value)", height=340), key="detail_bars")
download.download_csv(pd.DataFrame(rows), "id_detail_scores.csv")

c1, c2 = st.columns(2)
with c1:
    h = dict(sorted(res.integration_hist.items()))
    hist_fig = charts.bars([str(a) for a in h], list(h.values()),
                           title="ID(4) correct facts − best of its 4 inputs", ylabel="entities", text_fmt="d")
    hist_fig.update_xaxes(title="ID(4) − best input")
    charts.show(hist_fig, key="hist")
    download.download_csv(pd.DataFrame({"difference": list(h), "entities": list(h.values())}),
                          "id_integration_hist.csv")
with c2:
    charts.show(charts.lines(res.s_values, {"greedy": res.s_greedy, "integrative decoding (k = 8)": res.s_id},
                             title="Fact accuracy vs the number of spellings S (greedy and ID)", xlabel="S",
                             ylabel="fact accuracy", mode="lines+markers"), key="s_sweep")
    download.download_csv(pd.DataFrame({"S": res.s_values, "greedy": res.s_greedy, "id_k8": res.s_id}),
                          "id_surface_sweep.csv")

layout.how_it_works(r"""
**Integrative decoding.** Given a question $x$:

1. sample $r_1,\dots,r_k \sim p(\cdot\mid x)$ (temperature $\tau$);
2. build $q_j = T(x, r_j)$: the question, the answer $r_j$, an instruction to keep what is right and answer again;
3. decode one answer $y$ for all $k$ prompts together:
   $$y_t = \arg\max_v \sum_{j=1}^{k} \log p(v \mid q_j, y_{<t}),$$
   appending the same $y_t$ to every prompt, until EOS.

Averaging raw logits gives the same arg-max (each row's normaliser does not depend on $v$).

**The analytic LM.** For entity $e$ and fact $f$, the base model gives the true value probability
$p_{\text{true}}\sim U(\text{low},\text{high})$, a fixed confuser 70 % of the rest; a true value's mass is split over its
$S$ spellings by a Dirichlet($\alpha$), a wrong value puts 90 % on one spelling — so the single most likely *token* is
often a wrong value even when the true value is most likely. Conditioned on a prompt with a previous answer that says
$u$ for this fact, it re-answers with belief $\propto p(v)\,L(v)$, $L = \rho$ if $v = u$ and $(1-\rho)/(V-1)$ otherwise,
then spells the value with its own spelling distribution. It never sees the truth.

**Baselines.** Greedy; one sample; USC-like: the sample that agrees fact-by-fact with the most other samples;
fact vote: per-fact majority over the samples. ID with $k$ prompts costs $k\times$ the decoding compute.
""")
