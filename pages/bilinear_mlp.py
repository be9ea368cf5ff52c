"""Bilinear MLPs: eigen-decomposing a layer from its weights alone."""

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from components import charts, download, layout, state
from components.runner import run_on_upload, run_or_stop
from engine import bilinear_mlp as eng

SLUG = "bilinear-mlp"

layout.paper_header(
    SLUG,
    idea=(
        "Drop the nonlinearity from a gated linear unit and you get a bilinear layer, "
        "$g(x) = (Wx) \\odot (Vx)$. It is still nonlinear, but every output is a *quadratic form* of the "
        "input: for an output direction $u$, $u^\\top P g(x) = x^\\top Q(u)\\, x$ with a symmetric "
        "interaction matrix $Q(u)$ built from the weights. Its eigenvectors are therefore an exact, "
        "data-free explanation of what the layer computes. Below, a bilinear classifier is trained live on "
        "scikit-learn's 8×8 digits; we decompose it, truncate it to a few eigenvectors, and steer it."
    ),
    caveat="Small scale: 8×8 digits and a hidden width of 64 by default (the slider reaches 256) instead of "
           "MNIST with 256 units; the language-model "
           "and sparse-autoencoder parts of the paper are not reproduced. The held-out set is 500 digits (the "
           "spec's split would hold out all 597 left after 1 200 training images).",
)

cfg = state.bind_config(eng.Config, SLUG)
state.share_link(cfg)
layout.device_indicator()

upload = None
if cfg.task == "digits":
    with st.expander("Explain your own digit (a photo or a drawing)", icon=":material/upload_file:"):
        st.caption(f"Up to {eng.MAX_UPLOAD_BYTES // 2**20} MB; PNG, JPEG, GIF, BMP or WebP showing one handwritten "
                   "digit. It is turned into the 8×8 format the model was trained on, the way scikit-learn's "
                   "digits were made: cropped to the ink, scaled into a 32×32 box, thresholded and counted in 4×4 "
                   "blocks. The explanation and the steering below then use it instead of a test digit; the claims "
                   "stay measured on the test set, and a shared link cannot carry the file.")
        upload = st.file_uploader("Digit image", type=["png", "jpg", "jpeg", "gif", "bmp", "webp"],
                                  key=f"{SLUG}:upload")
res = run_on_upload("engine.bilinear_mlp", cfg, upload, eng.MAX_UPLOAD_BYTES, label="Training, then reading your "
                    "digit", fallback="A test digit is explained instead until the image is replaced or removed.")
if res is None:
    res = run_or_stop("engine.bilinear_mlp", cfg, label="Training the bilinear model")

layout.claims_panel(eng.claims(res))

if res.task == "toy":
    st.subheader("Learned interaction matrices on the boolean toy")
    st.caption(f"Each output is `{cfg.toy_op.upper()}` of one input pair; four binary inputs, each on with "
               "probability 0.3. With bits, $x_i^2 = x_i$, so each target has one minimal symmetric matrix. The "
               f"bilinear layer has {eng.TOY_HIDDEN} hidden units, not the tutorial's 8: with 8, OR ends about 0.07 "
               "from its target after 600 steps.")
    names = [f"{cfg.toy_op.upper()}(x{i}, x{j})" for i, j in res.toy_pairs]
    charts.show(charts.image_grid(list(res.toy_Q), names, cols=3, title="Learned Q per output"), key="toyq")
    charts.show(charts.image_grid(list(res.toy_target), names, cols=3, title="Closed-form target"),
                key="toyt")
    charts.show(charts.lines(np.arange(len(res.loss)), {"MSE": res.loss}, title="Training loss",
                             xlabel="step", log_y=True), key="toyloss")
    rows = [{"output": n, "i": i, "j": j, "learned": float(res.toy_Q[a, i, j]),
             "target": float(res.toy_target[a, i, j])}
            for a, n in enumerate(names) for i in range(res.toy_Q.shape[1]) for j in range(res.toy_Q.shape[2])]
    download.download_csv(pd.DataFrame(rows), "bilinear_toy_Q.csv")
    download.download_csv(pd.DataFrame({"step": np.arange(len(res.loss)), "mse": res.loss}),
                          "bilinear_toy_loss.csv", key="dl-bilinear-toy-loss")
else:
    m = res.metrics
    c1, c2, c3 = st.columns(3)
    c1.metric("Test accuracy (bilinear)", f"{m['acc_full']:.3f}")
    c2.metric("Test accuracy (ReLU, same size)", "—" if np.isnan(m["acc_relu"]) else f"{m['acc_relu']:.3f}")
    c3.metric(f"Accuracy with {cfg.k_keep} {cfg.truncation} eigenvectors", f"{m['acc_keep']:.3f}")

    st.subheader(f"Eigenvectors of {res.shown_title}")
    st.caption("Top row: the four most positive eigenvalues (patterns that push the output up when present); "
               "bottom row: the four most negative. Shown in pixel space, $E^\\top u$; red is positive.")
    titles = [f"λ = {v:+.2f}" for v in res.shown_vals]
    charts.show(charts.image_grid(list(res.shown_images), titles, cols=4, reflow="band"), key="eigimgs")
    download.download_json({"eigenvalues": res.shown_vals, "images": res.shown_images},
                           "bilinear_eigenvectors.json")

    left, right = st.columns(2)
    with left:
        ranks = np.arange(1, res.eigvals.shape[1] + 1)
        fig = go.Figure()
        for cls in range(res.eigvals.shape[0]):
            fig.add_trace(go.Scatter(x=ranks, y=res.eigvals[cls], mode="lines", name=f"class {cls}",
                                     line=dict(width=3 if cls == cfg.class_idx else 1),
                                     opacity=1.0 if cls == cfg.class_idx else 0.45))
        fig.add_trace(go.Scatter(x=ranks, y=res.eigvals_init[cfg.class_idx], mode="lines",
                                 name="untrained", line=dict(dash="dash", color="black")))
        charts.themed(fig, "Sorted eigenvalue spectrum per class", 380)
        fig.update_xaxes(title="rank")
        fig.update_yaxes(title="eigenvalue λ")
        charts.show(fig, key="spectrum")
        spec_df = pd.DataFrame(res.eigvals.T, columns=[f"class_{c}" for c in range(res.eigvals.shape[0])])
        spec_df.insert(0, "rank", ranks)
        spec_df[f"untrained_class_{cfg.class_idx}"] = res.eigvals_init[cfg.class_idx]
        download.download_csv(spec_df, "bilinear_spectra.csv")
    with right:
        fig = charts.lines(res.ks, {k: v for k, v in res.trunc_acc.items()}, title="Truncation: accuracy vs "
                           "eigenvectors kept per class", xlabel="k", ylabel="test accuracy")
        fig.add_hline(y=m["acc_full"], line_dash="dot", annotation_text="full model")
        fig.add_vline(x=cfg.k_keep, line_dash="dot", line_color="gray")
        charts.show(fig, key="trunc")
        tdf = pd.DataFrame({"k": res.ks, **{f"acc_{k}": v for k, v in res.trunc_acc.items()},
                            "acc_full_model": m["acc_full"]})
        download.download_csv(tdf, "bilinear_truncation.csv")

    mine = res.sample_label < 0
    st.subheader("Explaining your digit" if mine else "Explaining one test digit")
    if mine:
        st.caption(f"Read from {layout.literal(upload.name)}: " + "; ".join(res.notes) + ". The *Test digit to "
                   "explain* setting does not apply while an image is loaded.")
    a, b = st.columns([0.3, 0.7])
    with a:
        caption = (f"predicted {int(np.argmax(res.sample_logits))}" if mine
                   else f"label {res.sample_label}, predicted {int(np.argmax(res.sample_logits))}")
        charts.show(charts.image_grid([res.sample_image], [caption], cols=1,
                                      title="Your digit, as the model sees it" if mine else "The test digit",
                                      diverging=False, height_per_row=260),
                    key="sample")
    with b:
        fig = go.Figure()
        for cls, vals in res.sample_contrib.items():
            idx = res.sample_contrib_idx[cls]
            # 1-based, like the rank axis of the spectrum chart next to it
            fig.add_trace(go.Bar(x=[f"#{i + 1}" for i in idx], y=vals, name=f"class {cls}"))
        charts.themed(fig, "Largest terms λᵢ(uᵢ·Ex)² of the top-2 logits", 320, barmode="group")
        fig.update_xaxes(title="eigenvector (rank within its class)")
        fig.update_yaxes(title="contribution to the logit")
        charts.show(fig, key="contrib")
    download.download_json({k: {"eigen_index": res.sample_contrib_idx[k], "contribution": v}
                            for k, v in res.sample_contrib.items()}, "bilinear_explanation.json")
    download.download_json({"label": res.sample_label, "logits": res.sample_logits, "image": res.sample_image},
                           "bilinear_sample_digit.json", key="dl-bilinear-sample-digit")

    st.subheader("Steering along the top eigenvector")
    st.caption(f"v is the top eigenvector of class {cfg.class_idx} (*Class to explain*), added to the test digit "
               "above with the weight set under *Steering α* (the dotted line); at α = 0 the input is unchanged.")
    a, b = st.columns([0.3, 0.7])
    with a:
        charts.show(charts.image_grid([res.steered_image], [f"α = {cfg.alpha:+.2f} → predicted {res.steered_pred}"],
                                      cols=1, title="Steered input", diverging=False, height_per_row=260),
                    key="steered")
    with b:
        fig = go.Figure()
        fig.add_trace(go.Scatter(x=res.steer_alphas, y=res.steer_formula, mode="lines",
                                 name="closed form Σλᵢ(uᵢ·E(x+αv))²"))
        fig.add_trace(go.Scatter(x=res.steer_alphas, y=res.steer_model, mode="markers", name="model forward"))
        fig.add_vline(x=cfg.alpha, line_dash="dot")
        charts.themed(fig, f"Logit of class {cfg.class_idx} along x + αv", 320)
        fig.update_xaxes(title="α")
        fig.update_yaxes(title=f"logit of class {cfg.class_idx}")
        charts.show(fig, key="steer")
    download.download_csv(pd.DataFrame({"alpha": res.steer_alphas, "model": res.steer_model,
                                        "closed_form": res.steer_formula}), "bilinear_steering.csv")
    download.download_json({"alpha": cfg.alpha, "predicted": res.steered_pred, "image": res.steered_image},
                           "bilinear_steered_image.json", key="dl-bilinear-steered-image")

    charts.show(charts.lines(np.arange(1, len(res.test_acc) + 1),
                             {"bilinear test": res.test_acc, "bilinear train": res.train_acc,
                              **({"ReLU test": res.relu_test_acc} if len(res.relu_test_acc) else {})},
                             title="Accuracy during training", xlabel="epoch", ylabel="accuracy"), key="acc")
    download.download_csv(pd.DataFrame({"epoch": np.arange(1, len(res.test_acc) + 1), "bilinear_test": res.test_acc,
                                        "bilinear_train": res.train_acc,
                                        **({"relu_test": res.relu_test_acc} if len(res.relu_test_acc) else {})}),
                          "bilinear_accuracy.csv", key="dl-bilinear-accuracy")

layout.how_it_works(r"""
**Model.** $z = E x$, $\;g = (W z) \odot (V z)$, $\;y = P g$, no biases anywhere.

**Interaction tensor.** $B_{c,i,j} = \sum_k P_{c,k} W_{k,i} V_{k,j}$, so $y_c = z^\top B_c z$. Only the
symmetric part acts on $z$: $Q_c = \tfrac12 (B_c + B_c^\top)$. For any output direction $u$,
$Q(u) = \sum_c u_c Q_c$ (e.g. $u = e_c - e_{c'}$ for "$c$ versus $c'$").

**Eigen-readout.** $Q_c = \sum_i \lambda_i u_i u_i^\top$ gives $y_c(x) = \sum_i \lambda_i (u_i \cdot E x)^2$
exactly; $E^\top u_i$ is the pixel-space pattern. Positive $\lambda$ means "this pattern raises the logit",
negative means "suppresses it".

**Truncation.** Keep the $k$ components with the largest $|\lambda|$ per class and classify with
$\sum_{i \le k} \lambda_i (u_i \cdot E x)^2$. No retraining: the same weights.

**Steering.** Along $x + \alpha v$ the logit is a parabola in $\alpha$, computed both by a forward pass and by
the closed form above.

**Toy.** With bits, AND$(x_i, x_j) = x_i x_j$, XOR $= x_i^2 + x_j^2 - 2x_ix_j$, OR $= x_i^2 + x_j^2 - x_ix_j$:
each output has exactly one symmetric interaction matrix, which the trained layer must recover.
""")
