import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from components import charts, download, layout, state
from components.runner import run_or_stop
from engine import mbr_llm_judge as eng

SLUG = "mbr-llm-judge"
layout.paper_header(
    SLUG,
    idea=(
        "A judge that compares an answer with a reference agrees with people better than one that scores an "
        "answer alone — but when generating there is no reference. Minimum Bayes Risk (MBR) decoding uses the "
        "model's own samples as pseudo-references: draw N candidates, let the judge score every candidate "
        "against every other, and return the one with the best average score — the consensus answer under a "
        "utility that understands meaning. To avoid N² judge calls at test time, the model is then self-trained "
        "with DPO on (MBR-best, MBR-worst) pairs of its own samples, after which plain greedy decoding is as "
        "good as MBR was."
    ),
    caveat=(
        "No LLM or judge model can be downloaded, so this runs in a synthetic instruction-following world with a "
        "known true quality: each prompt asks for 6 rubric items; each value has synonyms, and the "
        "demonstrations make a bland generic word the most likely token (so greedy answers are bland). The "
        "'judge' is a noisy formula comparing meanings (synonyms count as equal); it never sees the truth. "
        "Answers are written out as words, and the lexical utility is sacrebleu's sentence-level chrF or BLEU "
        "between them; because sacrebleu scores one pair at a time in Python, lexical MBR is evaluated on a "
        "subset of the test prompts (the judge is compared with it on the same subset). The embedding utility is "
        "a synthetic word-similarity table by default; the other choice is a table of real all-MiniLM-L6-v2 "
        "cosines between the same words, computed once offline (the model is never loaded here). Those cosines "
        "rate some different values closer than synonyms ('red'–'blue' above 'red'–'crimson'), the weakness of "
        "embedding utilities the paper points to, yet MBR with them scores higher than with the synthetic table "
        "here, enough that the judge's margin over the utilities can fall below the badge's bar. The policy is a linear softmax model."
    ),
)
cfg = state.bind_config(eng.Config, SLUG)
state.share_link(cfg)
layout.device_indicator()
res = run_or_stop("engine.mbr_llm_judge", cfg, label="Decoding and self-training")
layout.claims_panel(eng.claims(res))

vals = [res.q_methods[m] for m in res.methods]
# the long method name ran into its neighbours' labels under the bars: break it before its parenthesis
charts.show(charts.bars([m.replace(" (", "<br>(") for m in res.methods], vals, title=f"True quality on test prompts (N = {cfg.n_candidates})",
                        ylabel="share of correct rubric items"), key="bars")
st.caption(f"MBR lexical uses sacrebleu's sentence-level {res.lexical_metric} on the first "
           f"{int(res.metrics['n_lexical_prompts'])} test prompts (the judge scores "
           f"{res.metrics['q_MBR judge (lexical subset)']:.3f} on those); 'MBR token overlap' is the share of "
           "identical words, for comparison. All other bars use every test prompt.")
download.download_csv(pd.DataFrame({"method": res.methods, "quality": vals}), "mbr_quality.csv")

c1, c2 = st.columns(2)
with c1:
    # MBR judge last, so each method keeps its colour in this chart and the p_know chart beside it
    by_n = {k: v for k, v in res.q_vs_n.items() if k != "MBR judge"} | {k: v for k, v in res.q_vs_n.items()
                                                                         if k == "MBR judge"}
    fig = charts.lines(res.n_values, by_n, title="Quality vs number of candidates", xlabel="N",
                       ylabel="quality", log_x=True, mode="lines+markers")
    fig.update_xaxes(tickvals=list(res.n_values), ticktext=[str(v) for v in res.n_values])
    charts.show(fig, key="vs_n")
    download.download_csv(pd.DataFrame({"N": res.n_values, **res.q_vs_n}), "mbr_quality_vs_n.csv")
with c2:
    charts.show(charts.lines(res.p_know_values, {"best-of-N (reference-free judge)": res.bon_vs_pknow,
                                                 "MBR judge": np.full(len(res.p_know_values), res.mbr_level)},
                             title="When is a reference-free judge good enough?",
                             xlabel="judge knowledge p_know", ylabel="quality",
                             mode="lines+markers"), key="pknow")
    download.download_csv(pd.DataFrame({"p_know": res.p_know_values, "best_of_n": res.bon_vs_pknow,
                                        "mbr_judge": res.mbr_level}), "mbr_bon_vs_pknow.csv")

c3, c4 = st.columns(2)
with c3:
    fig = charts.lines(res.st_iters, {"greedy": res.st_greedy, "MBR judge": res.st_mbr,
                                      "base model's MBR": np.full(len(res.st_iters), res.mbr_level)},
                       title="Self-training with DPO on MBR pairs", xlabel="iteration", ylabel="quality",
                       mode="lines+markers")
    charts.show(fig, key="selftrain")
    download.download_csv(pd.DataFrame({"iteration": res.st_iters, "greedy": res.st_greedy, "mbr": res.st_mbr,
                                        "base_model_mbr": res.mbr_level}),
                          "mbr_self_training.csv")
    if len(res.st_margin):
        st.caption("Mean implied DPO reward margin per iteration: " +
                   ", ".join(f"{m:.2f}" for m in res.st_margin) + "; pairs used: " +
                   ", ".join(str(p) for p in res.st_pairs))
with c4:
    N = res.detail_U.shape[0]
    U = res.detail_U.astype(float).copy()
    U[np.eye(N, dtype=bool)] = np.nan
    labels = [f"#{i + 1} (q={res.detail_quality[i]:.2f})" + (" ★" if i == res.detail_choice else "")
              for i in range(N)]
    fig = go.Figure(go.Heatmap(z=U, x=[f"ref #{i + 1}" for i in range(N)], y=labels, colorscale="Viridis",
                               zmin=1, zmax=5, colorbar=dict(title="judge")))
    fig.update_yaxes(autorange="reversed")
    charts.show(charts.themed(fig, "One test prompt: judge scores (★ = MBR choice)", 380), key="heat")
    util_df = download.matrix_frame(res.detail_U, "candidate", "reference", "judge_score")
    util_df["candidate_quality"] = np.asarray(res.detail_quality)[util_df["candidate"]]
    util_df["mbr_choice"] = util_df["candidate"] == res.detail_choice
    download.download_csv(util_df, "mbr_detail_utilities.csv")
    with st.expander("The candidates of this prompt, as words"):
        st.dataframe(pd.DataFrame({"candidate": [f"#{i + 1}" for i in range(N)], "answer": res.detail_answers,
                                   "true quality": res.detail_quality}), hide_index=True)

layout.how_it_works(r"""
**MBR decoding.** Sample $y_1,\dots,y_N \sim \pi(\cdot\mid x)$; with a utility $u(y;\text{ref})$,
$$y^\star = \arg\max_i\ \frac{1}{N-1}\sum_{j\ne i} u(y_i; y_j).$$
Utilities here: the judge $u_J = \mathrm{clip}(\mathrm{round}(1 + 4c + \sigma\xi), 1, 5)$ with $c$ the share of items on which
candidate and reference state the same value (synonyms equal, the generic word counts as no content); lexical = sacrebleu's
sentence chrF (character $n$-gram F-score, $n \le 6$, $\beta = 2$: $F = \frac{(1+\beta^2)PR}{\beta^2 P + R}$ with $P, R$ the
mean $n$-gram precision and recall) or sentence BLEU (geometric mean of word $n$-gram precisions times a brevity
penalty), both divided by 100; embedding = mean word similarity. Best-of-N instead takes $\arg\max_i s(y_i)$ with a reference-free
judge that knows each item's answer only with probability $p_{\text{know}}$.

**Self-training.** For each training prompt take $y_w = $ MBR-best and $y_l = $ MBR-worst of the current policy's samples and
minimise the DPO loss with the previous policy as reference:
$$\mathcal L = -\log\sigma\Big(\beta\big[\log\tfrac{\pi(y_w\mid x)}{\pi_{\text{ref}}(y_w\mid x)} - \log\tfrac{\pi(y_l\mid x)}{\pi_{\text{ref}}(y_l\mid x)}\big]\Big).$$
For a policy that factorises over positions, $\partial\mathcal L/\partial z_k = -\beta\,\sigma(-m)\,(e_{y_{w,k}} - e_{y_{l,k}})$.

**True quality** (never shown to any judge): the share of rubric items answered with the correct value.
""")
