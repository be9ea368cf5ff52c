"""TabWak: watermarking the latent seeds of a tabular diffusion model, detected by inversion."""

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots
from scipy.stats import norm

from components import charts, download, layout, state
from components.runner import run_or_stop
from engine import tabwak as eng

SLUG = "tabwak"


def _key_note() -> str:
    """The caveat's sentence on key dependence, from the survey that `python -m engine.tabwak keys` ships."""
    sv = eng.load_key_survey()
    if sv is None:
        return " The two-sample AUC depends on the secret key (the key survey file is missing)."
    auc = sv["auc"]
    vals = list(auc.values())
    over = [k for k, v in auc.items() if v > sv["bar"]]
    default = str(sv.get("default_key"))
    where = ("the default key is one of them" if default in over else "the default key is not one of them")
    return (f" The two-sample AUC depends on the secret key (it decides which latent coordinates are tied "
            f"together): over {len(vals)} keys (seed {sv['seed']}, measured {sv.get('measured', '?')} by "
            f"`python -m engine.tabwak keys`) it ranged from {min(vals):.2f} to {max(vals):.2f}, against "
            f"{sv['no_watermark']:.2f} without a watermark; {len(over)} of those keys {'crosses' if len(over) == 1 else 'cross'} the "
            f"{sv['bar']:.2f} bar, and {where}.")


layout.paper_header(
    SLUG,
    idea=(
        "A latent diffusion model for tables turns one Gaussian vector into one row with a deterministic "
        "sampler, and the sampler can be run backwards to recover that vector from the row (approximately). "
        "TabWak hides its signature in the *structure* of each row's latent, not in its values: every row "
        "draws its own random seed, the sign pattern (TabWak) or quartile pattern (TabWak*) of the first half "
        "is copied onto the second half, a secret permutation scrambles the positions, and a fresh latent is "
        "drawn inside the chosen halves or quartiles of N(0, 1). Every coordinate is still exactly standard "
        "normal and rows are as diverse as before, but an owner who knows the permutation can invert a "
        "table, un-scramble it and see the two halves agree far more often than chance. TabWak* scores only "
        "the *valid bits* — pairs whose first value lies in the tails — which rarely flip under editing noise."
    ),
    caveat="Small scale: scikit-learn's breast-cancer table (569 × 30) with an exact per-column encoder instead of "
           "TabSyn's VAE, and a 50 k-parameter MLP denoiser trained by `python -m engine.tabwak train` (shipped in "
           "assets/tabwak/); decoded values are kept inside each column's real range. The noise-robustness claims are "
           "measured at the spec's noise, σ = 0.3 column stds. There our small model's inversion, which amplifies "
           "data-space noise, leaves neither variant reliably detected (mean z well below the 3.09 threshold, a "
           "test checks it; measured offline: 0.8–1.4 at seeds 0–2 with the default pool, 0.7–2.1 with a 500-row "
           "pool (direct run and attack sweep), near 0 with a 2 000-row pool), so TabWak*'s detection badge fails, while its "
           "valid bits still keep more of the signal than TabWak's plain sign bits at seeds 0–2 (at seed 1 by a "
           "ratio of only 1.13, under the badge's 1.2: seed table), "
           "but only by about one standard error of the two mean scores (the badge shows both), so at this noise "
           "that comparison is close to chance. "
           "At half that noise (σ = 0.15) TabWak* is still detected in every sub-table (a test checks it). "
           "Row deletion and cell alteration have no badges of their own: choose one as the attack and the three "
           "detection badges are measured on the attacked tables. In a check at seed 0 (default settings otherwise) "
           "TPR stayed 1.00 at every row-deletion strength (down to 20 rows), and under cell alteration at strength "
           "0.1 (5 % of cells replaced) but fell to 0.21 at 0.2 (10 %); a test re-measures these."
           + _key_note(),
)

cfg = state.bind_config(eng.Config, SLUG)
state.share_link(cfg)
layout.device_indicator()
res = run_or_stop("engine.tabwak", cfg, label="Generating, attacking and inverting tables")
layout.claims_panel(eng.claims(res))
m = res.metrics
if m["checkpoint_retrained"]:
    st.info("The shipped denoiser checkpoint was missing, so a shorter one was trained for this session.")

c1, c2, c3, c4 = st.columns(4)
# short labels: four metrics share a tablet's width (768 px), and a longer label is cut off with an ellipsis
c1.metric("Row score, watermarked", f"{m['score_wm_mean']:.3f}", help="Mean row score of the watermarked rows")
c2.metric("Row score, clean", f"{m['score_plain_mean']:.3f}", help="Mean row score of the clean rows")
c3.metric("TPR / FPR at z > 3.09", f"{m['tpr']:.2f} / {m['fpr']:.2f}")
c4.metric("Inversion error", f"{m['inversion_median_row_err']:.3f}",
          help=f"Median row: median over clean rows of ‖ẑ − z‖/‖z‖; over all rows at once {m['inversion_rel_err']:.3f}. "
               f"{m['clipped_rows']:.0%} of the generated rows had a value outside the real table's range, "
               "bounded to it on decoding; such a row cannot be inverted to its own latent.")

left, right = st.columns(2)
with left:
    fig = go.Figure()
    bins = dict(start=0, end=1.0001, size=1 / 30)
    fig.add_trace(go.Histogram(x=res.scores_wm[np.isfinite(res.scores_wm)], name="watermarked rows", xbins=bins,
                               histnorm="probability density", opacity=0.6))
    fig.add_trace(go.Histogram(x=res.scores_plain[np.isfinite(res.scores_plain)], name="clean rows", xbins=bins,
                               histnorm="probability density", opacity=0.6))
    xs = np.linspace(0, 1, 200)
    null_pdf = norm.pdf(xs, res.null_mu, res.null_sd)
    fig.add_trace(go.Scatter(x=xs, y=null_pdf, name="null (calibration pool)",
                             line=dict(color="black", dash="dot")))
    charts.themed(fig, "Per-row scores: share of agreeing bit pairs", 360, barmode="overlay")
    fig.update_xaxes(title="row score")
    fig.update_yaxes(title="probability density")
    charts.show(fig, key="rowscores")
    download.download_csv(pd.DataFrame({"watermarked": pd.Series(res.scores_wm), "clean": pd.Series(res.scores_plain)}),
                          "tabwak_row_scores.csv")
    download.download_json({"null_mu": res.null_mu, "null_sd": res.null_sd,
                            "curve": {"x": xs, "density": null_pdf}},
                           "tabwak_null_distribution.json", key="dl-tabwak-null")
with right:
    fig = go.Figure()
    fig.add_trace(go.Histogram(x=res.z_wm, name=f"watermarked (TPR {m['tpr']:.2f})", opacity=0.65))
    fig.add_trace(go.Histogram(x=res.z_plain, name=f"clean (FPR {m['fpr']:.2f})", opacity=0.65))
    # label at mid-height: at the top it runs into the legend row in a half-width column on a tablet (768 px)
    fig.add_vline(x=eng.Z_THRESHOLD, line_dash="dot", annotation_text="3.09 (0.1 % FPR)",
                  annotation_position="right")
    _whole = m["n_rows_used"] >= m["n_rows_scored"]      # every draw takes all scored rows: one table, 100 times
    charts.themed(fig, f"Table z-scores over 100 random tables of {int(m['n_rows_used'])} rows"
                  + (" (all scored rows of the pool: the same table each time)" if _whole else ""), 360,
                  barmode="overlay")
    fig.update_xaxes(title="z")
    fig.update_yaxes(title="tables")
    charts.show(fig, key="tablez")
    download.download_csv(pd.DataFrame({"z_watermarked": res.z_wm, "z_clean": res.z_plain}), "tabwak_table_z.csv")

if res.sweep:
    sw = res.sweep
    kind_label = dict(zip(eng.ATTACKS, eng.ATTACK_LABELS))[sw["attack"]]
    st.subheader(f"Attack sweep: {kind_label}" + (" (detected with a wrong key)" if cfg.wrong_key else ""))
    c1, c2 = st.columns(2)
    with c1:
        fig = charts.lines(sw["strength"], {"TabWak": sw["z_tabwak"], "TabWak*": sw["z_tabwak_star"]},
                           title="Mean table z-score vs attack strength", xlabel="attack strength s",
                           ylabel="mean z", mode="lines+markers")
        fig.add_hline(y=eng.Z_THRESHOLD, line_dash="dot", annotation_text="3.09")
        charts.show(fig, key="sweep-z")
    with c2:
        charts.show(charts.lines(sw["strength"], {"TabWak": sw["tpr_tabwak"], "TabWak*": sw["tpr_tabwak_star"]},
                                 title="TPR at 0.1 % FPR vs attack strength", xlabel="attack strength s",
                                 ylabel="TPR (z > 3.09)", mode="lines+markers"), key="sweep-tpr")
    download.download_csv(pd.DataFrame({k: v for k, v in sw.items() if k != "attack"}).assign(attack=sw["attack"]),
                          "tabwak_attack_sweep.csv", key="dl-tabwak-sweep")
    st.caption(f"{min(cfg.n_rows, eng.N_CLAIM2)}-row sub-tables (under row deletion, fewer as the strength "
               f"grows; TabWak* scores only the rows with valid bits) drawn from {eng.N_CLAIM2} rows of each "
               "method, attacked afresh at every strength "
               "(the same random numbers for both methods), then encoded and inverted as above. Column deletion "
               "imputes the deleted columns with their mean, so the latent rows are biased rather than only noisier "
               "and z need not fall steadily with the number of columns deleted.")

st.subheader("Diversity and quality")
left, right = st.columns(2)
method_label = dict(zip(eng.METHODS, eng.METHOD_LABELS))[res.method]
with left:
    # panel titles without the parenthesis: two panels in a half-width column leave about 100 px each
    fig = make_subplots(rows=1, cols=2, subplot_titles=(method_label.split(" (")[0], "fixed key"),
                        horizontal_spacing=0.12)
    for i, c in enumerate((res.corr_method, res.corr_fixed)):
        fig.add_trace(go.Heatmap(z=c, zmin=-1, zmax=1, colorscale=charts.DIVERGING, showscale=i == 1), row=1, col=i + 1)
    fig.update_yaxes(autorange="reversed", showticklabels=False)
    fig.update_xaxes(showticklabels=False)
    charts.themed(fig, "Row-by-row correlation of latents (50 rows)", 340)
    charts.show(fig, key="corr")
    download.download_json({"method": res.corr_method, "fixed_key": res.corr_fixed}, "tabwak_latent_corr.json")
with right:
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=res.z_true, y=res.z_inv, mode="markers", marker=dict(size=4), name="rows"))
    lim = [-3.5, 3.5]
    fig.add_trace(go.Scatter(x=lim, y=lim, mode="lines", line=dict(dash="dot", color="gray"), name="exact"))
    for x0, x1 in ((-3.5, -eng.Q), (eng.Q, 3.5)):
        fig.add_vrect(x0=x0, x1=x1, fillcolor="#29a36a", opacity=0.08, line_width=0)
    charts.themed(fig, "Inversion: true latent vs recovered (coordinate 1; tails shaded)", 340)
    fig.update_xaxes(title="z")
    fig.update_yaxes(title="ẑ")
    charts.show(fig, key="inv")
    download.download_csv(pd.DataFrame({"z": res.z_true, "z_hat": res.z_inv}), "tabwak_inversion.csv")

# two panels a row: four in one row left each about 70 px on a phone, with their tick labels run together
grid_rows = (len(res.col_names) + 1) // 2
fig = make_subplots(rows=grid_rows, cols=2, subplot_titles=res.col_names, horizontal_spacing=0.12, vertical_spacing=0.2)
for j in range(len(res.col_names)):
    for data, name, color in ((res.real_cols, "real", charts.COLORS[0]), (res.wm_cols, "watermarked", charts.COLORS[1]),
                              (res.plain_cols, "plain synthetic", charts.COLORS[2])):
        fig.add_trace(go.Histogram(x=data[:, j], name=name, histnorm="probability density", opacity=0.5,
                                   marker_color=color, showlegend=j == 0, nbinsx=30), row=j // 2 + 1, col=j % 2 + 1)
charts.themed(fig, "Column values: real vs watermarked vs plain synthetic", 140 + 220 * grid_rows, barmode="overlay")
charts.show(fig, key="cols")
st.caption(f"Bars at a column's edge are values the model generated beyond the real table's range, bounded to it on "
           f"decoding: {m['clipped_rows']:.0%} of the generated rows had at least one such value among their 30 "
           "columns. Watermarked and plain rows share the same decoder, so the bound does not favour either.")
download.download_csv(pd.DataFrame({**{f"wm_{n}": res.wm_cols[:, j] for j, n in enumerate(res.col_names)},
                                    **{f"plain_{n}": res.plain_cols[:, j] for j, n in enumerate(res.col_names)}}),
                      "tabwak_columns.csv")
download.download_csv(pd.DataFrame({f"real_{n}": res.real_cols[:, j] for j, n in enumerate(res.col_names)}),
                      "tabwak_real_columns.csv", key="dl-tabwak-real-columns")

layout.how_it_works(r"""
**Backbone.** Encoder $e_c = (\operatorname{asinh}(x_c/k_c) - m_c)/s_c$ per column (exactly invertible; the decoder
rounds each value to 4 significant figures, the precision of the real table, and bounds it to the column's range
there, so the detector never sees the exact latent back); an
ε-prediction denoiser with cosine $\bar\alpha(t)$. DDIM ($\eta = 0$) from $t=1$ to $0$:
$\hat x_0 = (x_t - \sqrt{1-\bar\alpha_t}\,\hat\varepsilon)/\sqrt{\bar\alpha_t}$,
$x_{t'} = \sqrt{\bar\alpha_{t'}}\,\hat x_0 + \sqrt{1-\bar\alpha_{t'}}\,\hat\varepsilon$. Inversion runs the same update
from $t = 0$ up to $1$.

**Embedding (one row).** Seed $u \sim \mathcal N(0, I_{30})$. TabWak: bits $b_j = \mathbb 1[u_j > 0]$ for the first 15
coordinates; TabWak*: quartile codes (0: $\le -q$, 1: $\ge q$, 2: $(-q, 0]$, 3: $(0, q)$, $q = 0.674$). Clone:
$c = [b, b]$; shuffle: $c' = c_\pi$. Fresh latent $z_j = \Phi^{-1}\big(\text{low}(c'_j) + \text{width}\cdot U_j\big)$
with independent $U_j \sim U(0,1)$ — so each $z_j$ is exactly $\mathcal N(0,1)$.

**Detection.** Encode, invert, quantise $\hat z$ with the table's own quantiles, undo $\pi$, compare halves. Row score
$s_i$: share of agreeing pairs (TabWak) or, among valid bits (first code 0 or 1), share whose partner has the same
sign (TabWak*). Table: $z = (\bar s - \mu_0)/(\sigma_0/\sqrt n)$ with $\mu_0, \sigma_0$ from a separate pool of clean
generated rows; flag if $z > \Phi^{-1}(1 - 10^{-3}) = 3.09$.

**Attacks** act on decoded values: Gaussian noise of $0.5\,s$ column stds, a fraction $0.5\,s$ of cells replaced
from other rows, $15\,s$ columns deleted (imputed with the column mean), a fraction $0.9\,s$ of rows deleted, or
rows shuffled (which cannot matter: detection is per row).
""")
