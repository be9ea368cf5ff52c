import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from components import charts, download, layout, state
from components.runner import run_or_stop
from engine import lora_pro as eng
from engine.core import Int

SLUG = "lora-pro"
layout.paper_header(
    SLUG,
    idea=(
        "A LoRA adapter writes the weight as W₀ + s·B·A and trains only the thin factors A and B. One "
        "gradient step on the factors moves W along an *equivalent gradient* — a low-rank stand-in for the "
        "true gradient of W. Plain LoRA's stand-in can be far from the true gradient (it even depends on the "
        "arbitrary sizes of A and B). LoRA-Pro rewrites the factor gradients so that the equivalent gradient "
        "is the closest low-rank-compatible matrix to the true one: the projection of the full gradient onto "
        "the directions the adapter can move in. Here a single linear layer is fine-tuned three ways (full, "
        "LoRA, LoRA-Pro), each with its best learning rate from a small grid."
    ),
    caveat=(
        "The model is one 32×64 linear layer on synthetic regression data (not an LLM), so the full gradient "
        "and the best rank-r answer are known exactly. The factor-gradient algebra is the same function one "
        "would apply to every LoRA layer of a real model. The MLP option (32→48→48→16, tanh, one adapter per "
        "weight matrix, per-layer adjustment) has no closed-form rank-r floor, so its over-rank check is not "
        "run; at its default settings (SGD) LoRA-Pro closes part, not all, of the gap to full fine-tuning, and "
        "its per-layer surrogate error stays well above zero because an MLP layer's full gradient is not "
        "low-rank (other ranks or Adam change that: the 'log-gap closed' badge measures this run)."
    ),
)
cfg = state.bind_config(eng.Config, SLUG, views=("plane_at",))
state.share_link(cfg)
layout.device_indicator()
res = run_or_stop("engine.lora_pro", cfg, label="Fine-tuning")
layout.claims_panel(eng.claims(res))

names = {m: eng.METHOD_LABELS[m] for m in eng.METHODS}
COLOR = dict(zip(eng.METHODS, charts.COLORS))   # one colour per method on every chart of the page
ys = {f"{names[m]} (lr {res.best_lr[m]:g})": res.loss[m] for m in eng.METHODS}
# a floor at float round-off (target of rank ≤ r: the floor is 0) would stretch the log axis by ten decades and
# squeeze the three curves into its top; it is then named in the caption instead of drawn
lowest_loss = float(np.nanmin([np.nanmin(v) for v in res.loss.values()]))
floor_drawn = bool(np.isfinite(res.floor) and res.floor > 1e-9 * lowest_loss)
if floor_drawn:
    ys[f"rank-{cfg.rank} floor"] = np.full(len(res.steps), max(res.floor, 1e-300))
model_name = "MLP" if res.model == "mlp" else "linear layer"


def full_under_lorapro(fig):
    """LoRA-Pro follows full fine-tuning closely, so its line would hide the other: draw full FT wide and pale."""
    fig.update_traces(selector=0, line_width=8, opacity=0.4)
    fig.update_traces(selector=2, line_dash="dash")
    if len(fig.data) > 3:
        fig.update_traces(selector=3, line_dash="dot")   # the rank-r floor
    fig.update_yaxes(exponentformat="power", dtick=1)   # decades as 10ⁿ, not SI "1p" (pico) or stray 2s and 5s
    return fig


charts.show(full_under_lorapro(charts.lines(res.steps, ys, xlabel="step", ylabel="loss", log_y=True,
                                            title=f"Training loss at each method's best learning rate ({model_name})")),
            key="loss")
st.caption("Full fine-tuning is the wide pale line: where LoRA-Pro (dashed) coincides with it, it runs inside it."
           + (f" The rank-{cfg.rank} floor is {res.floor:.1e}, zero up to round-off (the target has rank ≤ "
              f"{cfg.rank}), so it is not drawn." if np.isfinite(res.floor) and not floor_drawn else ""))
download.download_csv(pd.DataFrame({"step": res.steps, **{m: res.loss[m] for m in eng.METHODS},
                                    "floor": res.floor}), "lora_pro_loss.csv")

t = np.arange(len(res.err["lora"]))
fig = charts.lines(t, {"LoRA": res.err["lora"], "LoRA-Pro": res.err["lorapro"]},
                   title="Distance of the equivalent gradient from the full gradient, ‖g̃ − g‖ / ‖g‖",
                   xlabel="step", ylabel="relative error", log_y=True)
fig.update_yaxes(exponentformat="power")
for tr, m in zip(fig.data, ("lora", "lorapro")):
    tr.line.color = COLOR[m]
charts.show(fig, key="err")
download.download_csv(pd.DataFrame({"step": t, "e_lora": res.err["lora"], "e_lorapro": res.err["lorapro"]}),
                      "lora_pro_gradient_error.csv")
if len(res.plane):
    n_pl = len(res.plane)
    # the view setting is a share of the run, not a step number, so a link stays valid whatever the step count
    pct = state.bind_view(SLUG, "plane_at", Int(0, 100, "Gradient picture at this share of training (%)", step=5,
                                                help="a view setting: the picture is recorded at every step"),
                          default=50)
    k_pl = int(round(pct / 100 * (n_pl - 1)))
    px_, py_, lx_, ly_, lout = res.plane[k_pl]
    fig = go.Figure()
    th = np.linspace(0, 2 * np.pi, 121)
    fig.add_trace(go.Scatter(x=0.5 + 0.5 * np.cos(th), y=0.5 * np.sin(th), mode="lines", hoverinfo="skip",
                             line=dict(color="#999999", dash="dot", width=1),
                             name="circle on 0–g: where any orthogonal projection of g lies"))
    for (x_, y_), lab, col in (((1.0, 0.0), "g (full gradient)", "#444444"), ((px_, py_), "g̃ LoRA-Pro", COLOR["lorapro"]),
                               ((lx_, ly_), f"g̃ LoRA: in-plane part to ({lx_:.2g}, {ly_:.2g}), plus {lout:.2g} out of the plane",
                                COLOR["lora"])):
        wide = lab.startswith("g (")          # g wide and pale underneath: g̃_pro usually runs along it
        fig.add_trace(go.Scatter(x=[0, x_], y=[0, y_], mode="lines+markers", name=lab, opacity=0.45 if wide else 1,
                                 line=dict(color=col, width=9 if wide else 3), marker=dict(size=[0, 10], color=col)))
    # a fixed window around 0, g and the circle: plain LoRA's vector is often many times longer than g, and it
    # would shrink the rest to a dot; its line then runs off the window (its coordinates are in the legend)
    fig.update_xaxes(title="along g (units of ‖g‖)", zeroline=True, range=[-1.2, 2.2])
    fig.update_yaxes(title="across g, toward g̃_pro", zeroline=True, range=[-1.2, 1.2], scaleanchor="x",
                     scaleratio=1)
    charts.show(charts.themed(fig, f"The three gradients at step {k_pl} of the LoRA-Pro run, in the plane of g "
                                   "and g̃_pro", 420), key="plane")
    st.caption("LoRA-Pro's equivalent gradient is the orthogonal projection of g onto what the adapter can express, "
               "so it sits on the dotted circle, as close to g as that allows. Plain LoRA's is another point of the "
               "same space, scaled by the factors' norms, and usually farther from g.")
    download.download_csv(pd.DataFrame({"step": np.arange(n_pl), "pro_x": res.plane[:, 0], "pro_y": res.plane[:, 1],
                                        "lora_x": res.plane[:, 2], "lora_y": res.plane[:, 3],
                                        "lora_out_of_plane": res.plane[:, 4]}), "lora_pro_gradient_plane.csv",
                          key="dl-lora-pro-plane")
if res.model == "mlp" and res.layer_err:
    nl = res.layer_err["lora"].shape[1]
    per = {f"{lab} layer {i + 1}": res.layer_err[key][:, i] for key, lab in (("lora", "LoRA"), ("lorapro", "LoRA-Pro"))
           for i in range(nl)}
    fig = charts.lines(t, per, title="Per-layer gradient error ‖g̃ₗ − gₗ‖ / ‖gₗ‖ (each adapter adjusted on its own)",
                       xlabel="step", ylabel="relative error", log_y=True)
    fig.update_yaxes(exponentformat="power")
    for j, tr in enumerate(fig.data):   # colour = method, as on the rest of the page; dash = layer
        tr.line.color = COLOR["lora" if j < nl else "lorapro"]
        tr.line.dash = ("solid", "dash", "dot", "dashdot")[j % nl % 4]
    charts.show(fig, key="layer_err")
    download.download_csv(pd.DataFrame({"step": t, **per}), "lora_pro_layer_gradient_error.csv")

c1, c2 = st.columns(2)
with c1:
    fin = {names[m]: np.where(np.isfinite(res.final_by_lr[m]), res.final_by_lr[m], np.nan) for m in eng.METHODS}
    charts.show(full_under_lorapro(charts.lines(res.lr_grid, fin, title="Final loss vs learning rate (gaps = diverged)",
                                                xlabel="learning rate", ylabel="final loss", log_x=True, log_y=True,
                                                mode="lines+markers")), key="lr")
    download.download_csv(pd.DataFrame({"lr": res.lr_grid, **{m: res.final_by_lr[m] for m in eng.METHODS}}),
                          "lora_pro_lr_sweep.csv")
with c2:
    k = np.arange(1, len(res.sv_target) + 1)
    fig = go.Figure()
    fig.add_trace(go.Bar(x=k, y=res.sv_target, name="target ΔW*", marker_color="#444444"))
    for m in eng.METHODS:
        fig.add_trace(go.Bar(x=k, y=res.sv_learned[m], name=names[m], marker_color=COLOR[m]))
    fig.update_xaxes(title="singular value index")
    charts.show(charts.themed(fig, "Singular values of the learned ΔW" + (" (first layer)" if res.model == "mlp" else ""),
                              360), key="sv")
    download.download_csv(pd.DataFrame({"index": k, "target": res.sv_target,
                                        **{m: res.sv_learned[m] for m in eng.METHODS}}), "lora_pro_sv.csv")

if res.twin_loss:
    tt = np.arange(len(res.twin_loss["lora"]))
    tw = {names[m]: res.twin_loss[m] for m in eng.METHODS}
    tw[f"rank-{cfg.rank} floor"] = np.full(len(tt), res.twin_floor)
    charts.show(full_under_lorapro(charts.lines(tt, tw, xlabel="step", ylabel="loss", log_y=True,
                                                title=f"Over-rank twin: a rank-{res.twin_rank} target that "
                                                      f"rank-{cfg.rank} adapters cannot fit")), key="twin")
    download.download_csv(pd.DataFrame({"step": tt, **{m: res.twin_loss[m] for m in eng.METHODS},
                                        "floor": res.twin_floor}), "lora_pro_twin.csv")

layout.how_it_works(r"""
**Equivalent gradient.** With $W = W_0 + sBA$ ($B\in\mathbb R^{m\times r}$, $A\in\mathbb R^{r\times n}$) and
full gradient $g = \partial L/\partial W$, a step $A \leftarrow A-\eta g^A$, $B \leftarrow B-\eta g^B$ changes $W$ by
$-\eta\,\tilde g + O(\eta^2)$ with $\tilde g = s\,B g^A + s\,g^B A$. Plain LoRA uses $g^A = sB^\top g$, $g^B = s g A^\top$,
so $\tilde g_{\text{LoRA}} = s^2(BB^\top g + g A^\top A)$.

**LoRA-Pro.** Choose $(g^A, g^B)$ to minimise $\lVert \tilde g - g\rVert_F$. The minimisers are

$$
\hat g^A = s^{-2}(B^\top B)^{-1} g^A_{\text{LoRA}} + XA,\qquad
\hat g^B = s^{-2}\,[I - P_B]\, g^B_{\text{LoRA}}\,(AA^\top)^{-1} - BX
$$

for any $X\in\mathbb R^{r\times r}$, and all give the same projection
$\tilde g_{\text{Pro}} = P_B g + g P_A - P_B g P_A$ with $P_B = B(B^\top B)^{-1}B^\top$, $P_A = A^\top(AA^\top)^{-1}A$.
Because it is an orthogonal projection, $\langle g, \tilde g_{\text{Pro}}\rangle = \lVert\tilde g_{\text{Pro}}\rVert^2 \ge 0$:
a small step never increases the loss to first order.

**Choosing X.** Staying closest to the plain LoRA gradients gives the Sylvester equation
$(B^\top B)X + X(AA^\top) = -s^{-2}(B^\top B)^{-1} g^A_{\text{LoRA}} A^\top$, solved with two small eigendecompositions.
At the first step $B=0$, so $\hat g^A = 0$ and $\hat g^B = s^{-1} g A^\top (AA^\top)^{-1}$.

**Adam variant.** Adam moments are kept for the full-size $\tilde g_{\text{Pro}}$ (so this variant is *not* low-memory);
the Adam direction $D$ is mapped back to factor gradients with the same adjustment.

**MLP.** Every weight matrix $W_\ell$ of the tanh MLP gets its own adapter $W_{0,\ell} + sB_\ell A_\ell$. Backpropagation
gives the full gradient $g_\ell$ of each layer, and the adjustment above is applied layer by layer. Because the
parameter blocks do not overlap, the per-layer projections together are also the least-squares best for the whole network.

**Measured here.** $e(t) = \lVert\tilde g - g\rVert_F/\lVert g\rVert_F$ along both adapter trajectories; the final
loss of each method at its best learning rate; and, on a target of rank above $r$, the distance to the
reduced-rank floor $L^*_r = L(W_{\text{OLS}}) + \tfrac12\sum_{i>r}\sigma_i^2\big((W_{\text{OLS}}-W_0)\hat\Sigma^{1/2}\big)$.
""")
