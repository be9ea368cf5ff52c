import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from components import charts, download, layout, state
from components.runner import run_or_stop
from engine import attention_sink as eng

SLUG = "attention-sink"

layout.paper_header(
    SLUG,
    idea=(
        "Language models give a surprising amount of attention to the very first token of their input: the "
        "*attention sink*. The paper finds that the sink is absent at "
        "initialisation and appears during training, that the first token then behaves like a key bias "
        "(queries point at its key while its value is small, so the attention it collects adds little), "
        "and that it comes from softmax forcing every row of attention to sum to one: with sigmoid "
        "attention and no normalisation, no sink forms. Why would a head want to attend to nothing? "
        "Because many heads are only useful at a few positions. This page uses a one-layer decoder (shipped "
        "checkpoints trained by our script, or a live run) on a *Bigram-Backcopy* stream: a fixed random bigram chain over the letters a–z plus three trigger "
        "symbols (# @ %); right after a trigger, the next token repeats the token just before the "
        "trigger. Predicting a copy needs a head that looks one token back, but only at triggers; at "
        "every other position the bigram table (read from the current token) is all that is needed, and "
        "the head's output would only add noise. Under softmax the head must still spend its whole row "
        "of attention somewhere, and the cheapest harmless place is the start token ⟨s⟩, present in "
        "every sequence: the head goes *dormant* there. A sigmoid twin, trained on the same data for "
        "the same number of steps, can simply switch its attention off."
    ),
    caveat=(
        f"Scale: one layer, {eng.SHIPPED_ARCH.n_heads} heads, d = {eng.SHIPPED_ARCH.d_model}, "
        f"{eng.SHIPPED_STEPS} steps on a synthetic task, against the paper's 60M-parameter language models "
        "on billions of tokens of text. The synthetic task is chosen because it makes the reason for the "
        "sink (heads that are idle at most positions) explicit at a size a CPU can train; it shows the "
        "mechanism, not the paper's exact numbers. For the sigmoid model the metric uses the raw sigmoid "
        "weights (the weights that actually multiply the values); divided by their tiny row sums, its "
        "idle heads would still *rank* ⟨s⟩ first, which the second claim's detail reports. The first badge's "
        "bar (at least half the heads) depends on the head count: in the shipped 2-head model the head that "
        "copies at triggers is the one that parks on ⟨s⟩ everywhere else, while the other head also looks back at "
        "triggers but spreads its attention almost uniformly elsewhere, so one sink head of two meets the bar. Trained offline with the same data and recipe, a 1-layer "
        "4-head model sank in 1 of its 4 heads, and a 2-layer, 4-head, d = 64 model in at most 2 of 8 (0 of 8 "
        "after 3 000 steps, 1–2 of 8 after 10 000), so at those sizes the badge would fail."
    ),
)

cfg = state.bind_config(eng.Config, SLUG)
state.share_link(cfg)
layout.device_indicator()
res = run_or_stop("engine.attention_sink", cfg, label="Measuring attention sinks")
m = res.metrics
if res.notice:
    st.info(res.notice, icon=":material/keyboard:")

layout.claims_panel(eng.claims(res))

L, H = res.n_layers, res.n_heads
labels = [f"{i + 1}:{c if c != ' ' else '␣'}" for i, c in enumerate(res.tokens)]
labels_orig = [f"{i + 1}:{c if c != ' ' else '␣'}" for i, c in enumerate(res.tokens_orig)]
head_titles = [f"L{la + 1} H{h + 1}" for la in range(L) for h in range(H)]

# --- attention maps on the input -------------------------------------------------------------
st.subheader("Attention on your input")
st.caption("Each small map is one head (rows: the query token, columns: the token it attends to). "
           "A bright first column is the sink; at trigger rows (# @ %) the copy head looks one token back "
           "instead. The sigmoid maps show the raw, un-normalised scores." +
           (" The box is empty, so this is a sequence sampled from the chain." if not cfg.text.strip() else ""))
left, right = st.columns(2)
with left:
    charts.show(charts.image_grid([res.attn_softmax[la, h] for la in range(L) for h in range(H)], head_titles,
                                  cols=H, diverging=False, title="Softmax attention", height_per_row=170,
                                  reflow="band"),
                key="grid-softmax")
with right:
    charts.show(charts.image_grid([res.attn_sigmoid[la, h] for la in range(L) for h in range(H)], head_titles,
                                  cols=H, diverging=False, title="Sigmoid attention (no normalisation)",
                                  height_per_row=170, reflow="band"), key="grid-sigmoid")

zl, zh = res.zoom
st.markdown(f"**Zoom: layer {zl + 1}, head {zh + 1}** (pick another head under *View* in the sidebar)")
left, right = st.columns(2)
zoom_soft = charts.heatmap(res.attn_softmax[zl, zh], x=labels, y=labels, title="Softmax",
                           xlabel="key (attended token)", ylabel="query", zmin=0, zmax=1,
                           colorbar_title="attention", height=460)
zoom_sig = charts.heatmap(res.attn_sigmoid[zl, zh], x=labels, y=labels, title="Sigmoid (raw scores)",
                          xlabel="key (attended token)", ylabel="query", zmin=0,
                          colorbar_title="score", height=460)
for fig in (zoom_soft, zoom_sig):
    # label every token (plotly would skip every other one, hiding the trigger rows the caption points to)
    fig.update_xaxes(dtick=1, tickfont_size=8)
    fig.update_yaxes(dtick=1, tickfont_size=8)
with left:
    charts.show(zoom_soft, key="zoom-softmax")
with right:
    charts.show(zoom_sig, key="zoom-sigmoid")
download.download_json({"tokens": res.tokens, "layers": L, "heads": H, "softmax": res.attn_softmax,
                        "sigmoid_raw": res.attn_sigmoid}, "attention_maps.json",
                       label="Download the attention maps (JSON)")

# --- the sink metric per head ------------------------------------------------------------------
st.subheader("Sink metric per head")
st.caption(f"Average attention each head gives to the first token over {cfg.n_eval} held-out sequences of "
           f"{eng.SHIPPED_ARCH.ctx} tokens. Heads above ε = {cfg.eps:g} count as sink heads (sigmoid: raw weights).")
hx = [f"head {h + 1}" for h in range(H)]
ly = [f"layer {la + 1}" for la in range(L)]
c1, c2, c3 = st.columns(3)
for col, (name, a, key) in zip((c1, c2, c3), (("Untrained softmax model", res.alpha_untrained, "a-u"),
                                              ("Trained softmax model", res.alpha_softmax, "a-s"),
                                              ("Trained sigmoid model (raw)", res.alpha_sigmoid, "a-g"))):
    with col:
        charts.show(charts.heatmap(a, x=hx, y=ly, title=name, zmin=0, zmax=1, colorbar_title="α₁",
                                   height=300), key=key)
per_layer = pd.DataFrame({"layer": np.arange(1, L + 1),
                          **{f"sink_share_{k}": v for k, v in eng.sink_share_by_layer(res, cfg.eps).items()}})
# grouped bars, not lines: with one or two layers a line chart is a few points stacked on each other
share_fig = go.Figure([go.Bar(x=[f"layer {la}" for la in per_layer["layer"]], y=per_layer[f"sink_share_{kind}"],
                              name=kind, marker_color=charts.COLORS[i], text=per_layer[f"sink_share_{kind}"],
                              texttemplate="%{text:.2f}", textposition="outside")
                       for i, kind in enumerate(("softmax", "sigmoid", "untrained"))])
share_fig.update_layout(barmode="group")
share_fig.update_yaxes(title="share of heads", range=[0, 1.15])
charts.show(charts.themed(share_fig, "Share of sink heads per layer", 300), key="per-layer")
download.download_csv(per_layer, "attention_sink_share_per_layer.csv", key="dl-attention-sink-share-per-layer")
alpha_df = pd.DataFrame([{"layer": la + 1, "head": h + 1, "alpha_softmax": res.alpha_softmax[la, h],
                          "alpha_sigmoid": res.alpha_sigmoid[la, h],
                          "alpha_sigmoid_row_normalised": res.alpha_sigmoid_norm[la, h],
                          "alpha_untrained": res.alpha_untrained[la, h]} for la in range(L) for h in range(H)])
download.download_csv(alpha_df, "sink_alpha_per_head.csv")

# --- emergence over training -------------------------------------------------------------------
st.subheader("The sink emerges during training")
charts.show(charts.lines({"softmax": res.curve_steps_softmax, "sigmoid": res.curve_steps_sigmoid},
                         {"softmax": res.curve_softmax, "sigmoid": res.curve_sigmoid},
                         title=f"Sink score (ε = {cfg.eps:g}) at saved training steps", xlabel="training step",
                         ylabel="share of sink heads", mode="lines+markers", height=320), key="curve")
if res.loss_softmax.size:
    steps = np.arange(1, res.loss_softmax.size + 1)
    charts.show(charts.lines(steps, {"softmax": res.loss_softmax, "sigmoid": res.loss_sigmoid},
                             title="Training loss (next-token cross-entropy)", xlabel="step",
                             ylabel="loss", height=280), key="loss")
    download.download_csv(pd.DataFrame({"step": steps, "loss_softmax": res.loss_softmax,
                                        "loss_sigmoid": res.loss_sigmoid}),
                          "attention_sink_training_loss.csv", key="dl-attention-sink-training-loss")
download.download_csv(pd.concat([
    pd.DataFrame({"model": "softmax", "step": res.curve_steps_softmax, "sink_score": res.curve_softmax,
                  "mean_alpha": res.curve_alpha_softmax}),
    pd.DataFrame({"model": "sigmoid", "step": res.curve_steps_sigmoid, "sink_score": res.curve_sigmoid,
                  "mean_alpha": res.curve_alpha_sigmoid})]), "sink_over_training.csv")

# --- active at triggers, dormant elsewhere ---------------------------------------------------------
st.subheader("Active at triggers, dormant elsewhere")
st.caption("Per head, split by the query token. Softmax: where the head's attention goes (first token or "
           "the previous token) at trigger queries and at all other queries. Sigmoid: the total attention "
           "weight of a row, which can be close to zero.")
ds, dg = res.dormant["softmax"], res.dormant["sigmoid"]
names = [f"L{la + 1} H{h + 1}" for la in range(L) for h in range(H)]
left, right = st.columns(2)
with left:
    charts.show(charts.lines(names, {"on ⟨s⟩, other queries": ds["first_other"].ravel(),
                                     "on ⟨s⟩, trigger queries": ds["first_trigger"].ravel(),
                                     "on previous token, trigger queries": ds["prev_trigger"].ravel()},
                             title="Softmax heads", xlabel="head", ylabel="mean attention",
                             mode="markers", height=320), key="dorm-soft")
with right:
    charts.show(charts.lines(names, {"row total, other queries": dg["mass_other"].ravel(),
                                     "row total, trigger queries": dg["mass_trigger"].ravel(),
                                     "on previous token, trigger queries": dg["prev_trigger"].ravel()},
                             title="Sigmoid heads (raw weights)", xlabel="head", ylabel="mean weight",
                             mode="markers", height=320), key="dorm-sig")
download.download_csv(pd.DataFrame([{"model": mod, "head": nm, **{k: float(v.ravel()[i]) for k, v in d.items()}}
                                    for mod, d in (("softmax", ds), ("sigmoid", dg))
                                    for i, nm in enumerate(names)]), "active_dormant_per_head.csv")

# --- key-bias view ---------------------------------------------------------------------------------
st.subheader("The first token as a key bias")
st.caption("Per layer, averaged over heads and held-out sequences (softmax model). In the paper's sink "
           "heads, queries point towards the first token's key (a higher cosine than with other keys) while "
           "its value vector is small, so the attention it soaks up adds little to the head's output. "
           "")
kv = res.kv["softmax"]
layers = np.arange(1, L + 1)
kv_df = pd.DataFrame({"layer": layers, **eng.key_value_summary(kv)})
left, right = st.columns(2)
with left:
    charts.show(charts.lines(layers, {"‖k₁‖ / mean ‖kⱼ‖": kv_df["k_first_over_other"],
                                      "‖v₁‖ / mean ‖vⱼ‖": kv_df["v_first_over_other"]},
                             title="First token's key and value norm, relative", xlabel="layer",
                             ylabel="ratio (1 = like other tokens)", mode="lines+markers", height=320),
                key="kv-norm")
with right:
    charts.show(charts.lines(layers, {"cos(q, k₁)": kv_df["cos_q_k_first"], "cos(q, kⱼ), j > 1":
                                      kv_df["cos_q_k_other"]},
                             title="Query–key cosine", xlabel="layer", ylabel="mean cosine",
                             mode="lines+markers", height=320), key="kv-cos")
if m["n_sink_heads"]:
    st.caption(f"In the {m['n_sink_heads']} sink heads: median ‖v₁‖ / mean ‖vⱼ‖ = {m['v_ratio_sink_heads']:.2f}, "
               f"median cosine gap (first key minus others) = {m['cos_gap_sink_heads']:.2f}.")
else:
    st.caption(f"No head passes ε = {cfg.eps:g} here, so there is no sink head to summarise.")
download.download_csv(kv_df, "key_value_first_token.csv")

# --- moving the sink ---------------------------------------------------------------------------------
st.subheader("Move the sink by changing the first token")
st.caption("Attention each position receives in the softmax model (mean over layers, heads and queries), minus "
           "what uniform causal attention would give it, for your sequence and after the change chosen under "
           "*First token*. Under causal attention position 1 always collects the most, since every query sees it; "
           "a sink shows as a large excess.")
charts.show(charts.lines({"as typed": np.arange(1, len(res.excess_orig) + 1),
                          "after the change": np.arange(1, len(res.excess_mod) + 1)},
                         {"as typed": res.excess_orig, "after the change": res.excess_mod},
                         title="Attention received per position, above uniform causal attention",
                         xlabel="key position", ylabel="excess attention received", mode="lines+markers",
                         height=320), key="recv")
po, pm = m["sink_position_orig"], m["sink_position_mod"]
st.caption(f"Largest excess: position {po} ('{res.tokens_orig[po - 1]}', +{m['sink_excess_orig']:.2f}) as typed, "
           f"position {pm} ('{res.tokens[pm - 1]}', +{m['sink_excess_mod']:.2f}) after the change."
           + (" *First token* leaves ⟨s⟩ first, as in training, so the two curves coincide; pick another option there "
              "to move or remove ⟨s⟩." if cfg.first_token == "keep" else
              " The sink moved with ⟨s⟩: in this model it is tied to the token it always saw first in training."
              if res.tokens[pm - 1] == "⟨s⟩" else
              " Without ⟨s⟩ no position collects a comparable excess: the sink here belongs to the token the model "
              "always saw first in training, not to position 1." if (cfg.first_token in ("replace", "drop")
                                                       and m["sink_excess_mod"] < 0.5 * m["sink_excess_orig"])
              else ""))
download.download_csv(pd.DataFrame({"position": np.arange(1, len(res.recv_orig) + 1),
                                    "token": res.tokens_orig, "received": res.recv_orig,
                                    "excess_over_uniform_causal": res.excess_orig}),
                      "received_as_typed.csv")
download.download_csv(pd.DataFrame({"position": np.arange(1, len(res.recv_mod) + 1),
                                    "token": res.tokens, "received": res.recv_mod,
                                    "excess_over_uniform_causal": res.excess_mod}),
                      "received_after_change.csv")

layout.how_it_works(r"""
**Data (Bigram-Backcopy).** A fixed random transition table $P$ over 26 letters and 3 triggers (rows drawn
from a Dirichlet distribution with small concentration, so each row is peaked). A sequence is
⟨s⟩, a random letter, then for $t \ge 2$: $x_{t+1} = x_{t-1}$ if $x_t$ is a trigger, otherwise
$x_{t+1} \sim P(\cdot \mid x_t)$.

**Model.** A pre-LayerNorm decoder: token and learned position embeddings,
$x \leftarrow x + \mathrm{MHSA}(\mathrm{LN}(x))$, $x \leftarrow x + \mathrm{FFN}(\mathrm{LN}(x))$, tied output
embedding, trained with AdamW (weight decay 0.1, warm-up then cosine decay) on next-token prediction.

**Softmax attention** (head $h$, query $t$, key $j \le t$):
$A_{t,j} = \dfrac{\exp(q_t^\top k_j/\sqrt{d_h})}{\sum_{i \le t} \exp(q_t^\top k_i/\sqrt{d_h})}$, so every row sums to one:
a head that has nothing to do must still put its weight somewhere.

**Sigmoid attention without normalisation:** $A_{t,j} = \sigma(q_t^\top k_j/\sqrt{d_h} + b_h)$ with a learned
per-head bias $b_h$ (started at $-\log T$); the rows are not renormalised, so a query may attend to nothing.

**Sink metric (first token).** For layer $l$ and head $h$,
$\alpha^{l,h}_1 = \frac{1}{T}\sum_{t=1}^{T} A^{l,h}_{t,1}$, averaged over held-out sequences, and
$\mathrm{Sink}^{\epsilon}_1 = \frac{1}{LH}\sum_{l,h} \mathbb{1}[\alpha^{l,h}_1 > \epsilon]$ with $\epsilon = 0.3$
by default. Uniform causal attention gives $\alpha_1 = H_T/T \approx 0.13$ for $T = 32$.

**Key-bias view.** $q_t^\top k_1 = \|q_t\|\,\|k_1\|\cos\theta_{t,1}$: the sink comes from queries aligning
with the first key, and a small value $v_1$ makes the head output $\sum_j A_{t,j} v_j$ nearly zero when
$A_{t,1}$ is large: attention is parked, not used.
""")
