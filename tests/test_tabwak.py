"""TabWak engine: claims at the default config, the shipped checkpoint, and independent checks."""

import numpy as np
import pytest
from scipy.stats import binomtest, kstest, norm, spearmanr

from engine import tabwak as eng


@pytest.fixture(scope="module")
def default_result():
    return eng.run(eng.Config())


def test_checkpoint_ships_and_loads():
    from engine.core.nn import asset_path, load_state

    path = asset_path(eng.CKPT)
    assert path.exists() and path.stat().st_size < 2 * 1024 * 1024
    net = eng.build_denoiser()
    net.load_state_dict(load_state(path)["state"])


def test_claims_at_default(default_result):
    assert default_result.metrics["checkpoint_retrained"] == 0.0
    claims = eng.claims(default_result)
    # every badge passes except TabWak*'s detection under the spec's noise (sigma = 0.3 std: TPR 0.02 < 0.95)
    failed = [c.label for c in claims if not c.passed]
    assert failed == [f"TPR of TabWak* at noise σ = {eng.CLAIM2_SIGMA:g} std"], failed
    assert eng.CLAIM2_SIGMA == 0.3                                   # the spec's a = 0.3 column stds


def test_half_the_spec_noise_is_still_detected(monkeypatch):
    # the page's caveat: at sigma = 0.15 std (attack strength 0.3) TabWak* is detected in every sub-table and its
    # valid bits keep more signal than TabWak's (measured TPR 1.00, ratio 1.77 at the default seed)
    monkeypatch.setattr(eng, "CLAIM2_STRENGTH", 0.3)
    m = eng.run(eng.Config()).metrics
    assert m["noise_tpr_tabwak_star"] >= 0.95 and m["robust_ratio"] >= 1.2, m


def test_caveat_on_row_deletion_and_cell_alteration_at_seed_0():
    """The page's caveat: at seed 0, TPR stays 1.00 under row deletion (strength 0.5, and 1.0 = 20 rows) and
    under cell alteration at 0.1, and falls to 0.21 at alteration 0.2."""
    tpr = {(a, s): eng.run(eng.Config(attack=a, strength=s)).metrics["tpr"]
           for a, s in (("row_deletion", 0.5), ("row_deletion", 1.0), ("alteration", 0.1), ("alteration", 0.2))}
    assert tpr[("row_deletion", 0.5)] == tpr[("row_deletion", 1.0)] == tpr[("alteration", 0.1)] == 1.0, tpr
    assert tpr[("alteration", 0.2)] == pytest.approx(0.21, abs=0.03), tpr


def test_caveat_on_the_noise_comparison_being_within_one_standard_error(default_result):
    """The page's caveat: at the spec's noise TabWak*'s mean score is above TabWak's at the default seed, but by
    about one standard error of the difference; the standard errors agree with the rebuilt row scores' spread."""
    m = default_result.metrics
    diff = m["noise_score_tabwak_star"] - m["noise_score_tabwak"]
    se = np.hypot(m["noise_score_tabwak_se"], m["noise_score_tabwak_star_se"])
    assert 0 < diff < 2 * se, (diff, se)
    assert 0.003 < m["noise_score_tabwak_se"] < 0.02 and 0.003 < m["noise_score_tabwak_star_se"] < 0.02


def test_shipped_key_survey_is_what_the_engine_measures(default_result):
    """The page quotes the key survey; re-measure two of its entries (the default key and key 0) and check its
    summary is complete."""
    sv = eng.load_key_survey()
    assert sv is not None and sv["bar"] == eng.AUC_BAR and sv["default_key"] == eng.Config().key
    assert set(sv["auc"]) == {str(k) for k in eng.SURVEY_KEYS}
    # The classifier's fit (lbfgs) is not bit-identical across scipy / scikit-learn versions or machines: in the
    # survey shipped before 2026-12-07, key 0 re-measured 2e-5 off with the lowest versions pyproject allows, and
    # the default key 1.2e-4 off on an x86_64 AVX512_SPR machine; the survey shipped on 2026-12-07 (measured on
    # that machine) re-measures the default key 3.6e-4 off on an x86_64 AVX512_ICL (AMD EPYC) one. Neighbouring
    # keys of the survey are at least 8e-4 apart (0.5420 and 0.5428), so 4e-4 (under half of that) still tells one
    # key's table from another's.
    assert sv["auc"][str(eng.Config().key)] == pytest.approx(default_result.metrics["clf_auc"], abs=4e-4)
    again = eng.key_survey(keys=(0,))
    assert again["auc"]["0"] == pytest.approx(sv["auc"]["0"], abs=4e-4)
    assert again["no_watermark"] == pytest.approx(sv["no_watermark"], abs=4e-4)


def test_wrong_key_finds_nothing():
    r = eng.run(eng.Config(wrong_key=True, pool=500, n_rows=100))
    assert r.metrics["tpr"] <= 0.05
    assert abs(r.metrics["z_wm_mean"]) < 3


def test_encoder_round_trip():
    x, _ = eng.load_table()
    assert np.allclose(eng.decode(eng.encode(x)), np.round(x, 4), atol=1e-4)


def test_generated_columns_stay_in_the_real_range(default_result):
    x, _ = eng.load_table()
    cols = [list(eng.load_table()[1]).index(n) for n in default_result.col_names]
    lo, hi = x[:, cols].min(0), x[:, cols].max(0)
    for gen in (default_result.wm_cols, default_result.plain_cols):
        assert np.all(gen >= lo.astype(np.float32)) and np.all(gen <= hi.astype(np.float32))
    # without the bound, latents a few standard deviations out decode far outside it
    assert eng.decode(np.full((1, eng.D), 6.0)).ravel().tolist() == x.max(0).tolist()


@pytest.mark.parametrize("method", ["tabwak", "tabwak_star"])
def test_embedding_marginals_and_exact_inversion_limit(method):
    rng = np.random.default_rng(0)
    z = eng.embed(rng, 2000, method, 217)
    for j in (0, 7, 20):
        assert kstest(z[:, j], "norm").pvalue > 0.001
    # skip the diffusion model: on exact latents the detector scores watermarked rows 1.0 (the only misses come
    # from entries within the gap between the empirical table median and 0)
    s = eng.row_scores(z, method, 217)
    assert np.mean(s == 1.0) >= 0.95 and s.mean() >= 0.995
    # paired coordinates share the sign (and for TabWak* the quartile)
    inv = np.argsort(eng.permutation(217))
    zz = z[:, : 2 * eng.HALF][:, inv]
    assert np.all(np.sign(zz[:, : eng.HALF]) == np.sign(zz[:, eng.HALF:]))


def test_null_scores_match_binomial():
    rng = np.random.default_rng(1)
    z = rng.standard_normal((4000, eng.D))
    s = eng.row_scores(z, "tabwak", 217)
    assert abs(s.mean() - 0.5) < 0.01
    assert abs(s.var() - 1 / (4 * eng.HALF)) < 0.003
    s_star = eng.row_scores(z, "tabwak_star", 217)
    assert abs(np.nanmean(s_star) - 0.5) < 0.02


def test_exact_binomial_test_agrees_with_z_test_on_a_watermarked_table():
    """Pooled valid-bit counts of a table: scipy's exact binomial test vs the z-test decision."""
    rng = np.random.default_rng(2)
    z = eng.embed(rng, 200, "tabwak_star", 217) + 0.6 * rng.standard_normal((200, eng.D))  # heavy inversion error
    zz = z[:, : 2 * eng.HALF]
    code = eng.quartile_code(zz, *np.quantile(zz, [0.25, 0.5, 0.75]))[:, np.argsort(eng.permutation(217))]
    a, b = code[:, : eng.HALF], code[:, eng.HALF:]
    valid = a <= 1
    match = valid & (((b == 1) | (b == 3)) == (a == 1))
    p = binomtest(int(match.sum()), int(valid.sum()), 0.5, alternative="greater").pvalue
    s = eng.row_scores(z, "tabwak_star", 217)
    s = s[np.isfinite(s)]
    null = eng.row_scores(rng.standard_normal((2000, eng.D)), "tabwak_star", 217)
    zval = (s.mean() - np.nanmean(null)) / (np.nanstd(null) / np.sqrt(len(s)))
    assert (p < 1e-3) == (zval > eng.Z_THRESHOLD)


def test_row_shuffle_leaves_scores_unchanged():
    rng = np.random.default_rng(3)
    z = eng.embed(rng, 300, "tabwak_star", 5) + 0.3 * rng.standard_normal((300, eng.D))
    perm = rng.permutation(300)
    assert np.allclose(eng.row_scores(z, "tabwak_star", 5)[perm], eng.row_scores(z[perm], "tabwak_star", 5),
                       equal_nan=True)


def test_round_trip_error_falls_with_more_steps():
    import torch

    net, _ = eng.get_denoiser()
    z = torch.randn(300, eng.D, generator=torch.Generator().manual_seed(0))
    errs = []
    for S in (10, 40):
        back = eng.ddim(net, eng.ddim(net, z, S), S, inverse=True)
        errs.append(float(torch.linalg.norm(back - z) / torch.linalg.norm(z)))
    assert errs[1] < errs[0]


def test_fixed_key_baseline_is_correlated(default_result):
    assert default_result.metrics["corr_fixed"] >= 0.4


def test_attack_sweep():
    """The page's attack sweep: at strength 0 both watermarks are detected in every sub-table; Gaussian noise lowers
    the mean z step by step until neither is detected at σ = 0.5 column std; deleting rows only shrinks the tables,
    so z falls like √(rows kept) and detection survives. The sweep is off by default."""
    assert eng.run(eng.Config(pool=500)).sweep == {}
    sw = eng.run(eng.Config(sweep=True, pool=500)).sweep
    assert sw["attack"] == "noise" and list(sw["strength"]) == list(eng.SWEEP_STRENGTHS)
    for name in ("tabwak", "tabwak_star"):
        z, tpr = sw[f"z_{name}"], sw[f"tpr_{name}"]
        assert tpr[0] == 1.0 and z[0] > 10
        assert np.all(np.diff(z) < 0.5), z
        assert z[-1] < eng.Z_THRESHOLD and tpr[-1] < 0.05
        # the page's caveat: at σ = 0.3 (strength 0.6) neither is reliably detected (measured z 2.1 / 1.8)
        i = list(eng.SWEEP_STRENGTHS).index(0.6)
        assert z[i] < eng.Z_THRESHOLD and tpr[i] <= 0.3, (name, z[i], tpr[i])
    rows = eng.run(eng.Config(sweep=True, pool=500, attack="row_deletion")).sweep
    kept = np.maximum(2, np.round(200 * (1 - 0.9 * rows["strength"]))) / 200
    for name in ("tabwak", "tabwak_star"):
        assert rows[f"tpr_{name}"].min() == 1.0
        np.testing.assert_allclose(rows[f"z_{name}"] / rows[f"z_{name}"][0], np.sqrt(kept), rtol=0.15)


def test_fixed_key_rows_correlate_as_shared_signs_predict(default_result):
    # rows whose latents all take the key's signs, |z| half-normal: corr(z_i, z_j) over coordinates tends to
    # E|z|^2 / E z^2 = 2/π; the engine's fixed-key baseline must sit there (measured 0.656 at seed 0 with 30 columns)
    import math

    assert default_result.metrics["corr_fixed"] == pytest.approx(2 / math.pi, abs=0.05)


def test_exact_binomial_test_agrees_with_the_z_test_on_the_default_tables(default_result):
    """The spec's check on the engine's own tables: for disjoint 200-row tables of the watermarked and the plain pool
    (inverted by the engine's DDIM at the default settings), scipy's exact one-sided binomial test on the pooled
    valid-bit matches and the engine's z-test on the mean row score reach the same decision at the 1e-3 level."""
    r, cfg = default_result, eng.Config()
    n, key = cfg.n_rows, cfg.key
    decisions = []
    for pool, watermarked in ((r.z_hat_wm, True), (r.z_hat_plain, False)):
        z = pool.astype(np.float64)
        zz = z[:, : 2 * eng.HALF]
        code = eng.quartile_code(zz, *np.quantile(zz, [0.25, 0.5, 0.75]))[:, np.argsort(eng.permutation(key))]
        a, b = code[:, : eng.HALF], code[:, eng.HALF:]
        valid = a <= 1
        match = valid & (((b == 1) | (b == 3)) == (a == 1))
        s = eng.row_scores(z, "tabwak_star", key)
        for start in range(0, len(z) - n + 1, n):
            rows = slice(start, start + n)
            p = binomtest(int(match[rows].sum()), int(valid[rows].sum()), 0.5, alternative="greater").pvalue
            sr = s[rows][np.isfinite(s[rows])]
            zval = (sr.mean() - r.null_mu) / (r.null_sd / np.sqrt(len(sr)))
            assert (p < 1e-3) == (zval > eng.Z_THRESHOLD), (watermarked, start, p, zval)
            decisions.append((watermarked, p < 1e-3))
    # and the decisions are the right ones: every watermarked table detected, no plain table flagged
    assert all(d == w for w, d in decisions) and len(decisions) == 10


@pytest.mark.parametrize("method", ["tabwak", "tabwak_star", "fixed_key"])
def test_row_scores_depend_only_on_each_tables_own_order_statistics(method):
    """Bits are read against the recovered table's own median (TabWak, fixed key) or quartiles (TabWak*), never
    against 0 or the standard normal's ±0.674: shifting and stretching every latent leaves every score as it was."""
    z = np.random.default_rng(3).standard_normal((300, eng.D))
    a = eng.row_scores(z, method, 0)
    b = eng.row_scores(2.0 * z + 0.75, method, 0)
    np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
    ok = ~np.isnan(a)
    assert np.mean(a[ok] != b[ok]) < 0.01


def test_mean_offdiag_matches_a_loop():
    c = np.random.default_rng(4).normal(size=(7, 7))
    ref = np.mean([c[i, j] for i in range(7) for j in range(7) if i != j])
    assert eng.mean_offdiag(c) == pytest.approx(ref)


def test_ddim_walks_the_whole_time_grid_and_inverts_exactly_for_a_constant_noise_oracle():
    """With a denoiser that always predicts the same noise ε₀, x_t = √ᾱ(t)·c + √(1−ᾱ(t))·ε₀ is a fixed point of
    every DDIM step, so sampling from t = 1 must land exactly at t = 0 of that curve (after visiting every grid time
    from 1 down, once each) and inversion must return to t = 1."""
    import torch

    class ConstantNoise(torch.nn.Module):
        def __init__(self, eps):
            super().__init__()
            self.eps, self.times = eps, []

        def forward(self, x, t):
            self.times.append(float(t[0]))
            return self.eps.expand_as(x)

    g = torch.Generator().manual_seed(5)
    eps0, c = torch.randn(eng.D, generator=g), torch.randn(6, eng.D, generator=g)
    on_curve = lambda t: eng.alpha_bar(torch.tensor(t)).sqrt() * c + (1 - eng.alpha_bar(torch.tensor(t))).sqrt() * eps0  # noqa: E731
    steps = 7
    net = ConstantNoise(eps0)
    out = eng.ddim(net, on_curve(1.0), steps)
    torch.testing.assert_close(out, on_curve(0.0), rtol=1e-5, atol=1e-5)
    grid = np.linspace(0.0, 1.0, steps + 1)
    np.testing.assert_allclose(net.times, grid[:0:-1], atol=1e-7)
    net.times.clear()
    back = eng.ddim(net, out, steps, inverse=True)
    torch.testing.assert_close(back, on_curve(1.0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(net.times, grid[:-1], atol=1e-7)


# ------------------------------------------------------------------ second mutation round: what the page shows
@pytest.fixture(scope="module")
def rebuilt():
    """The default run's pools rebuilt outside run(): the same seeds, calls and batch, so every latent, decoded row
    and inverted latent the page plots can be checked against its own recomputation."""
    return _rebuild(eng.CLAIM2_STRENGTH)


def _rebuild(noise_strength):
    import torch

    cfg = eng.Config()
    rng = eng.seed_everything(cfg.seed, torch_too=True)
    net, _ = eng.get_denoiser()
    z = {"wm": eng.embed(rng, cfg.pool, cfg.method, cfg.key), "plain": rng.standard_normal((cfg.pool, eng.D)),
         "cal": rng.standard_normal((eng.N_CALIB, eng.D)), "tw": eng.embed(rng, eng.N_CLAIM2, "tabwak", cfg.key),
         "tws": eng.embed(rng, eng.N_CLAIM2, "tabwak_star", cfg.key)}
    names = list(z)
    sizes = [len(z[k]) for k in names]
    x = eng.ddim(net, torch.as_tensor(np.concatenate(list(z.values())), dtype=torch.float32), cfg.steps)
    x = x.numpy().astype(np.float64)
    raw, rows = eng.decode(x, bound=False), eng.decode(x)
    parts = dict(zip(names, np.split(rows, np.cumsum(sizes)[:-1])))
    noise_rng = np.random.default_rng(cfg.seed + 99)
    noisy = [eng.attack(parts[k], "noise", noise_strength, noise_rng)[0] for k in ("tw", "tws")]
    enc = eng.encode(np.concatenate([parts["wm"], parts["plain"], parts["cal"], *noisy]))
    h = eng.ddim(net, torch.as_tensor(enc, dtype=torch.float32), cfg.steps, inverse=True).numpy().astype(np.float64)
    return {"cfg": cfg, "z": z, "raw": raw, "rows": rows, "parts": parts,
            "h": dict(zip(names, np.split(h, np.cumsum(sizes)[:-1])))}


def _table_z_loop(scores, n, mu0, sd0, seed, R=eng.R_SUB):
    """z of R sub-tables, drawn as the engine draws them, with the textbook formula (x̄ − μ₀)/(σ₀/√n)."""
    import math

    s = scores[np.isfinite(scores)]
    rng = np.random.default_rng(seed)
    return np.array([(s[rng.choice(len(s), size=n, replace=False)].mean() - mu0) / (sd0 / math.sqrt(n))
                     for _ in range(R)])


def test_table_z_is_the_textbook_z_of_distinct_rows():
    # n equal to the number of finite scores: every sub-table is the whole table (rows drawn without replacement),
    # so each z is exactly (mean - mu0) / (sd0 / sqrt(n)); NaN rows (no valid bits) are dropped first
    s = np.r_[np.arange(10.0), np.nan]
    z, n = eng.table_z(s, 50, 2.0, 3.0, np.random.default_rng(0), R=4)
    assert n == 10
    np.testing.assert_allclose(z, (4.5 - 2.0) / (3.0 / np.sqrt(10)), rtol=1e-12)


def _row_scores_loop(z, method, key):
    """Row scores by plain loops over rows and bit pairs, thresholds from the table's own order statistics."""
    perm = np.asarray(eng.permutation(key))
    zz = z[:, : 2 * eng.HALF]
    med = np.median(zz)
    q25, q50, q75 = np.quantile(zz, [0.25, 0.5, 0.75])
    out = []
    for row in z:
        orig = {int(perm[i]): row[i] for i in range(2 * eng.HALF)}      # latent slot i holds clone position perm[i]
        if method == "fixed_key":
            med_all = np.median(z)
            bits = eng.fixed_key_bits(key)
            out.append(np.mean([(row[j] > med_all) == bool(bits[j]) for j in range(eng.D)]))
        elif method == "tabwak":
            out.append(np.mean([(orig[j] > med) == (orig[j + eng.HALF] > med) for j in range(eng.HALF)]))
        else:
            hits = [(orig[j + eng.HALF] > q50) == (orig[j] >= q75) for j in range(eng.HALF)
                    if orig[j] <= q25 or orig[j] >= q75]
            out.append(np.mean(hits) if hits else np.nan)
    return np.array(out)


@pytest.mark.parametrize("method", ["tabwak", "tabwak_star", "fixed_key"])
def test_row_scores_match_a_loop(method):
    rng = np.random.default_rng(11)
    z = eng.embed(rng, 60, "tabwak_star" if method != "fixed_key" else method, 3) + 0.8 * rng.standard_normal((60, eng.D))
    # one row whose first-half coordinates all sit at the table median: no valid bits, so no score (NaN)
    inv = np.argsort(eng.permutation(3))
    z[0, inv[: eng.HALF]] = np.median(z[:, : 2 * eng.HALF])
    np.testing.assert_allclose(eng.row_scores(z, method, 3), _row_scores_loop(z, method, 3), equal_nan=True)
    if method == "tabwak_star":
        assert np.isnan(eng.row_scores(z, method, 3)[0])


def test_attacks_do_what_the_slider_help_says():
    """noise σ = 0.5·s column stds; a share 0.5·s of cells replaced by values of the same column; round(15·s)
    distinct columns deleted; a row shuffle permutes whole rows."""
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(3000, eng.D)) * np.arange(1, eng.D + 1) + 1000 * np.arange(eng.D)   # values per column
    out, _ = eng.attack(rows, "noise", 0.6, np.random.default_rng(1))
    ratio = (out - rows).std(0) / eng.encoder_stats()[3]
    np.testing.assert_allclose(ratio, 0.3, rtol=0.08)
    out, _ = eng.attack(rows, "alteration", 0.6, np.random.default_rng(2))
    changed = out != rows
    assert changed.mean() == pytest.approx(0.3 * (1 - 1 / len(rows)), abs=0.01)
    for j in (0, 17, 29):
        assert np.isin(out[changed[:, j], j], rows[:, j]).all()
    for s in (0.1, 0.3, 0.5, 1.0):
        _, deleted = eng.attack(rows, "column_deletion", s, np.random.default_rng(3))
        assert len(deleted) == round(15 * s) == len(set(deleted.tolist())) and set(deleted.tolist()) <= set(range(eng.D))
    out, _ = eng.attack(rows, "row_shuffle", 1.0, np.random.default_rng(4))
    assert sorted(map(tuple, out)) == sorted(map(tuple, rows))


def test_shown_values_of_the_default_run_match_their_rebuild(default_result, rebuilt):
    """Scatter, correlation heatmap, column histograms, KS badge, inversion and clipped-row numbers of the default
    run, each recomputed from the rebuilt pools with numpy / scipy."""
    r, m, z, h = default_result, default_result.metrics, rebuilt["z"], rebuilt["h"]
    np.testing.assert_allclose(r.z_true, z["cal"][:, 0], rtol=1e-6)
    np.testing.assert_allclose(r.z_inv, h["cal"][:, 0], rtol=1e-5, atol=1e-5)
    err = np.linalg.norm(h["cal"] - z["cal"], axis=1) / np.linalg.norm(z["cal"], axis=1)
    assert m["inversion_median_row_err"] == pytest.approx(np.median(err), rel=1e-5)
    assert m["inversion_rel_err"] == pytest.approx(np.sqrt(((h["cal"] - z["cal"]) ** 2).sum() / (z["cal"] ** 2).sum()),
                                                   rel=1e-5)
    assert m["clipped_rows"] == pytest.approx(np.mean([np.any(a != b) for a, b in zip(rebuilt["rows"], rebuilt["raw"])]))
    assert 0.2 < m["clipped_rows"] < 0.7                      # the docstring's 43 % of rows with a bounded value
    assert r.corr_method.shape == (50, 50)
    np.testing.assert_allclose(r.corr_method, np.corrcoef(z["wm"][:50]), atol=1e-6)
    assert m["corr_method"] == pytest.approx(eng.mean_offdiag(np.corrcoef(z["wm"][:200])), abs=1e-12)
    assert m["ks_p"] == pytest.approx(kstest(z["wm"][:1000].ravel(), "norm").pvalue, rel=1e-9)
    cols = [list(eng.load_table()[1]).index(n) for n in r.col_names]
    np.testing.assert_allclose(r.wm_cols, rebuilt["parts"]["wm"][:1000, cols].astype(np.float32))
    np.testing.assert_allclose(r.plain_cols, rebuilt["parts"]["plain"][:1000, cols].astype(np.float32))


def test_row_scores_null_and_noise_tprs_match_their_rebuild(default_result, rebuilt):
    """Row-score histograms, the null curve (from the calibration pool, not the plain one), the shown mean scores and
    the noise claim's two TPRs (each against its own method's null), recomputed from the rebuilt inversions."""
    r, m, h, key = default_result, default_result.metrics, rebuilt["h"], rebuilt["cfg"].key
    cal = _row_scores_loop(h["cal"], "tabwak_star", key)
    assert r.null_mu == pytest.approx(np.nanmean(cal), abs=1e-9) and r.null_sd == pytest.approx(np.nanstd(cal), abs=1e-9)
    np.testing.assert_allclose(r.scores_plain, _row_scores_loop(h["plain"], "tabwak_star", key), atol=1e-6,
                               equal_nan=True)
    assert m["score_plain_mean"] == pytest.approx(np.nanmean(r.scores_plain), abs=1e-6)
    assert m["score_wm_mean"] == pytest.approx(np.nanmean(r.scores_wm), abs=1e-6)
    for name, hk in (("tabwak", "tw"), ("tabwak_star", "tws")):
        null = _row_scores_loop(h["cal"], name, key)
        z = _table_z_loop(_row_scores_loop(h[hk], name, key), 200, np.nanmean(null), np.nanstd(null), 3)
        assert m[f"noise_tpr_{name}"] == pytest.approx(np.mean(z > eng.Z_THRESHOLD), abs=1e-12), name


def test_sweep_gets_each_methods_own_null(rebuilt, monkeypatch):
    """The attack sweep scores TabWak against TabWak's null and TabWak* against TabWak*'s (both from the
    calibration pool); swapped nulls would shift both plotted z curves."""
    seen = {}

    def spy(net, config, r_tw, r_tws, null_tw, null_tws, progress=None, key=None):
        seen.update(tw=null_tw, tws=null_tws, key=key)
        return {}

    monkeypatch.setattr(eng, "attack_sweep", spy)
    eng.run(eng.Config(sweep=True))
    for k, name in (("tw", "tabwak"), ("tws", "tabwak_star")):
        s = _row_scores_loop(rebuilt["h"]["cal"], name, rebuilt["cfg"].key)
        np.testing.assert_allclose(seen[k], (np.nanmean(s), np.nanstd(s)), atol=1e-9)
    assert seen["key"] == rebuilt["cfg"].key
    # with a wrong key the sweep scores with key + 1 and calibrates its nulls with that key too
    eng.run(eng.Config(sweep=True, wrong_key=True))
    assert seen["key"] == rebuilt["cfg"].key + 1
    for k, name in (("tw", "tabwak"), ("tws", "tabwak_star")):
        s = _row_scores_loop(rebuilt["h"]["cal"], name, rebuilt["cfg"].key + 1)
        np.testing.assert_allclose(seen[k], (np.nanmean(s), np.nanstd(s)), atol=1e-9)


def test_attack_sweep_with_a_wrong_key_detects_nothing():
    """The page's sweep follows 'Detect with a wrong key': even unattacked (strength 0) no sub-table of either method
    is flagged, where the true key flags all of them (test_attack_sweep)."""
    sw = eng.run(eng.Config(sweep=True, pool=500, wrong_key=True)).sweep
    for name in ("tabwak", "tabwak_star"):
        assert sw[f"tpr_{name}"].max() <= 0.05 and abs(sw[f"z_{name}"][0]) < eng.Z_THRESHOLD, name


@pytest.mark.parametrize("attack,strength", [("column_deletion", 1.0), ("row_deletion", 0.5), ("alteration", 1.0)])
def test_attacks_leave_the_calibration_pool_alone(default_result, attack, strength):
    """The page's null curve comes from a pool that is never attacked, so it is the default run's under any attack;
    a row deletion of strength s audits round(n·(1 − 0.9·s)) rows (the z histogram's title)."""
    r = eng.run(eng.Config(attack=attack, strength=strength))
    assert r.null_mu == default_result.null_mu and r.null_sd == default_result.null_sd
    kept = round(200 * (1 - 0.9 * strength)) if attack == "row_deletion" else 200
    assert r.metrics["n_rows_used"] == kept


def test_noise_tprs_at_a_milder_noise_use_each_methods_null(monkeypatch):
    """At the spec's noise both noise TPRs are 0 whatever null is used; at σ = 0.225 std (measured TPR 0.15 for
    TabWak, 0.49 for TabWak*) the detail's TabWak TPR must come from TabWak's own calibration null."""
    monkeypatch.setattr(eng, "CLAIM2_STRENGTH", 0.45)
    m = eng.run(eng.Config()).metrics
    b = _rebuild(0.45)
    h, key = b["h"], b["cfg"].key
    for name, hk in (("tabwak", "tw"), ("tabwak_star", "tws")):
        null = _row_scores_loop(h["cal"], name, key)
        z = _table_z_loop(_row_scores_loop(h[hk], name, key), 200, np.nanmean(null), np.nanstd(null), 3)
        assert m[f"noise_tpr_{name}"] == pytest.approx(np.mean(z > eng.Z_THRESHOLD), abs=1e-12), name
    assert 0.0 < m["noise_tpr_tabwak"] < 1.0


# ---- added by mutation testing (2026-12-07): each kills a mutant the file above let through ----

@pytest.mark.parametrize("method", ["tabwak", "tabwak_star"])
def test_paired_coordinates_share_the_cell_but_not_the_value(method):
    """Each pair (pi(j), pi(j + h)) lies in the same half (TabWak) or quartile (TabWak*) of N(0, 1), and
    inside it each coordinate is a fresh uniform draw: the positions Phi(z) within the cell are independent,
    uniform, and never equal across the pair (closed form via scipy's normal cdf)."""
    z = eng.embed(np.random.default_rng(0), 3000, method, 217)
    inv = np.argsort(eng.permutation(217))
    zz = z[:, : 2 * eng.HALF][:, inv]
    a, b = norm.cdf(zz[:, : eng.HALF]).ravel(), norm.cdf(zz[:, eng.HALF:]).ravel()
    width = 0.5 if method == "tabwak" else 0.25
    cell_a, cell_b = np.floor(a / width), np.floor(b / width)
    np.testing.assert_array_equal(cell_a, cell_b)                   # same half / same quartile
    pos_a, pos_b = a / width - cell_a, b / width - cell_b          # position inside the cell, U(0, 1)
    assert np.mean(np.isclose(a, b, rtol=0, atol=1e-12)) == 0.0
    assert abs(spearmanr(pos_a, pos_b)[0]) < 0.05                  # fresh U per coordinate (n = 45 000 pairs)
    assert abs(pos_a.mean() - 0.5) < 0.01 and abs(pos_b.mean() - 0.5) < 0.01


# ---- direct tests (2026-12-07) for mutants caught before only by a thin badge margin or a snapshot ----

_fmt4 = np.vectorize(lambda v: float(f"{v:.3e}"))      # Python's own formatting: 4 significant figures


def _on_4_figure_grid(x):
    """Values that print unchanged with 4 significant figures."""
    return np.isclose(x, _fmt4(x), rtol=1e-12, atol=0)


def test_source_table_is_recorded_to_4_significant_figures():
    """The premise of the decoder's rounding: scikit-learn's breast-cancer table has 4 significant figures in
    every column, which is not 4 decimals (a 4-decimal grid would hold neither 0.0008948 nor many values of
    the small columns, and the area columns carry a single decimal)."""
    real, _ = eng.load_table()
    assert np.all(_on_4_figure_grid(real))
    assert not np.all(np.isclose(real, np.round(real, 4), rtol=0, atol=1e-12))
    assert np.all(np.isclose(real[:, 3], np.round(real[:, 3], 1), rtol=0, atol=1e-9))     # mean area


def test_decoder_rounds_to_the_source_precision():
    """Spec, decoder D: x = k_c·sinh(e·s_c + m_c), then round to the source precision (4 significant figures,
    see above). The column statistics are rebuilt here from scikit-learn's table; every decoded value sits on
    the grid, equals the closed form formatted to 4 figures, and differs from the unrounded one by at most
    half a unit in the 4th figure (and does differ: the rounding is the 'realistic mild perturbation' the
    spec asks to keep)."""
    from sklearn.datasets import load_breast_cancer

    x = load_breast_cancer().data.astype(np.float64)
    k = np.median(x, 0)
    k = np.where(k > 0, k, 1.0)
    a = np.arcsinh(x / k)
    e = np.random.default_rng(0).normal(size=(400, eng.D))
    exact = k * np.sinh(e * a.std(0) + a.mean(0))
    for bound in (False, True):
        assert np.all(_on_4_figure_grid(eng.decode(e, bound=bound)))
    dec = eng.decode(e, bound=False)
    np.testing.assert_allclose(dec, _fmt4(exact), rtol=1e-12, atol=0)
    rel = np.abs(dec - exact) / np.abs(exact)
    assert rel.max() <= 0.5e-3 + 1e-12 and np.median(rel) > 1e-5
    np.testing.assert_array_equal(eng.decode(e), np.clip(dec, x.min(0), x.max(0)))
    # the perturbation reaches the latent the detector reads: a decode/encode round trip is no longer exact
    # (mild: at most half a unit in the 4th figure)
    shift = np.abs(eng.encode(dec) - e)
    assert shift.max() > 1e-5 and np.median(shift) < 1e-3


def test_synthesised_tables_carry_at_most_4_significant_figures(rebuilt):
    """Every value of the default run's generated pools (watermarked, plain, calibration and the claim-2
    tables) has at most 4 significant figures, before and after the range bound (the real extremes the
    bound clips to have 4 as well)."""
    assert np.all(_on_4_figure_grid(rebuilt["raw"])) and np.all(_on_4_figure_grid(rebuilt["rows"]))
    for part in rebuilt["parts"].values():
        assert np.all(_on_4_figure_grid(part))
    # and not a 4-decimal grid: the small columns (about 1e-3) keep digits beyond the 4th decimal
    rows = rebuilt["rows"]
    assert np.mean(~np.isclose(rows, np.round(rows, 4), rtol=0, atol=1e-12)) > 0.1


def test_z_histogram_title_says_when_every_draw_is_the_whole_pool():
    """With n_rows as large as the pool's scored rows, the 100 'random tables' are one table drawn 100 times: the
    histogram's title says so (and does not at the default 200 rows)."""
    from tests.pagetext import open_page

    at = open_page("tabwak", {"n_rows": "1000"})
    specs = [c.proto.spec for c in at.get("plotly_chart")]
    assert any("same table each time" in s for s in specs)
    r = eng.run(eng.Config())
    assert r.metrics["n_rows_used"] < r.metrics["n_rows_scored"]
    at = open_page("tabwak", seed=(("engine.tabwak", eng.Config(), r),))
    assert not any("same table each time" in c.proto.spec for c in at.get("plotly_chart"))


def test_caveat_quotes_the_seed_tables_seed_1_noise_ratio():
    """The caveat says TabWak*'s valid bits keep more signal at seeds 0–2 but at seed 1 only by a ratio of 1.13, under
    the badge's 1.2: the stored seed sweep (python -m tests.seeds) has that ratio, above 1 at every seed."""
    import json

    from components import seed_notes

    flips = json.loads(seed_notes.PATH.read_text())["pages"]["tabwak"]["flips"]
    ratio = {seed: value for seed, _, value in flips["(s̄* − ½)/(s̄ − ½) under noise σ = 0.3 std"]}
    assert f"{ratio[1]:.2f}" == "1.13" and ratio[1] < 1.2 and min(ratio.values()) > 1
    page = open("pages/tabwak.py", encoding="utf-8").read()
    assert "ratio of only 1.13, under the badge's 1.2" in page
