"""COPER multi-view clustering: claims at the default config and independent checks of the pieces."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from sklearn.cross_decomposition import CCA
from sklearn.metrics import normalized_mutual_info_score

from engine import multiview_clustering as eng
from tests.pagetext import charts, figures, open_page, values


@pytest.fixture(scope="module")
def default_result():
    return eng.run(eng.Config())


ABLATION_LABEL = "NMI(COPER) − NMI(no permutations)"


def test_claims_pass_at_default(default_result):
    # the ablation badge is excluded: at the default it measures +0.014 (0.884 vs 0.870; +0.019 on an x86_64
    # AVX512_SPR machine) against its 0.02 bar and fails; it is kept on the page as measured (see test_ablation_badge_at_default)
    failed = [c.describe() for c in eng.claims(default_result) if not c.passed and c.label != ABLATION_LABEL]
    assert not failed, failed


def test_ablation_badge_at_default(default_result):
    m = default_result.metrics
    badges = [c for c in eng.claims(default_result) if c.label == ABLATION_LABEL]
    assert len(badges) == 1
    assert badges[0].threshold == 0.02
    assert badges[0].measured == m["nmi_coper"] - m["nmi_noperm"]
    assert m["nmi_noperm"] == default_result.scores[eng.ABLATION]["NMI"]
    assert m["acc_noperm"] == default_result.scores[eng.ABLATION]["ACC"]
    assert m["nmi_noperm"] != m["nmi_coper"]  # the ablation is a separate run, not a copy of COPER's scores


def test_ablation_is_paired(monkeypatch):
    # with the permutation made the identity, the main run trains exactly like the ablation: same seed, data
    # and initial weights must then give the same clusters, bit for bit
    monkeypatch.setattr(eng, "within_cluster_permutation", lambda pseudo, rng: np.arange(len(pseudo)))
    r = eng.run(eng.Config(n_samples=400, epochs=60, warmup=20))
    assert r.scores[eng.ABLATION] == r.scores["COPER"]
    assert eng.claims(r)[-1].measured == 0.0


def test_no_ablation_badge_when_permutations_off():
    r = eng.run(eng.Config(permute=False, n_samples=400, epochs=60, warmup=20))
    assert eng.ABLATION not in r.scores and "nmi_noperm" not in r.metrics
    assert all(c.label != ABLATION_LABEL for c in eng.claims(r))
    assert len(eng.claims(r)) == 4


def test_result_small_and_picklable(default_result):
    assert len(pickle.dumps(default_result)) < 2_000_000
    assert default_result.confusion.sum() == len(default_result.labels)


def test_scores_use_sklearn_nmi_and_matched_accuracy(default_result):
    r = default_result
    assert r.scores["COPER"]["NMI"] == pytest.approx(normalized_mutual_info_score(r.labels, r.pred))
    # matched accuracy equals the diagonal of the Hungarian-matched confusion matrix
    assert r.scores["COPER"]["ACC"] == pytest.approx(np.trace(r.confusion) / len(r.labels))


@pytest.mark.parametrize("seed", range(6))
def test_hungarian_accuracy_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    k_true, k_pred = int(rng.integers(2, 6)), int(rng.integers(2, 6))
    y = rng.integers(0, k_true, size=60)
    p = rng.integers(0, k_pred, size=60)
    p[:20] = (y[:20] + 1) % k_pred  # some structure
    assert eng.cluster_accuracy(y, p) == pytest.approx(eng.brute_force_accuracy(y, p))


def test_accuracy_is_permutation_invariant():
    y = np.array([0, 0, 1, 1, 2, 2, 2])
    assert eng.cluster_accuracy(y, (y + 1) % 3) == 1.0
    assert eng.cluster_accuracy(y, np.zeros_like(y)) == pytest.approx(3 / 7)


def test_cca_loss_matches_qr_canonical_correlations():
    import torch

    rng = np.random.default_rng(0)
    n = 400
    z = rng.normal(size=(n, 2))
    a = np.hstack([z, rng.normal(size=(n, 2))]) @ rng.normal(size=(4, 4))
    b = np.hstack([z + 0.5 * rng.normal(size=(n, 2)), rng.normal(size=(n, 2))]) @ rng.normal(size=(4, 4))
    qa, _ = np.linalg.qr(a - a.mean(0))
    qb, _ = np.linalg.qr(b - b.mean(0))
    ref = np.linalg.svd(qa.T @ qb, compute_uv=False)  # canonical correlations (Björck-Golub)
    ours = -float(eng.cca_loss(torch.tensor(a), torch.tensor(b), eps=1e-10)) * 4
    assert ours == pytest.approx(ref.sum(), rel=1e-6)
    # and the first one agrees with scikit-learn's CCA
    u, v = CCA(n_components=1, max_iter=2000, tol=1e-10).fit(a, b).transform(a, b)
    assert abs(np.corrcoef(u[:, 0], v[:, 0])[0, 1]) == pytest.approx(ref[0], rel=1e-4)


def test_within_cluster_permutation():
    rng = np.random.default_rng(0)
    pseudo = np.array([0, 1, -1, 0, 1, 0, -1, 2])
    perm = eng.within_cluster_permutation(pseudo, rng)
    assert sorted(perm) == list(range(len(pseudo)))
    assert np.all(pseudo[perm] == pseudo)  # stays inside its pseudo-cluster
    assert np.all(perm[pseudo < 0] == np.nonzero(pseudo < 0)[0])  # unlabelled samples stay put


def test_pseudo_labels_require_agreeing_views():
    h = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    p = np.array([[0.9, 0.1], [0.8, 0.2], [0.1, 0.9], [0.2, 0.8]])
    lab = eng.pseudo_labels(h, p, p, p, threshold=0.5)
    assert list(lab) == [0, 0, 1, 1]
    p2 = p.copy()
    p2[1] = [0.1, 0.9]  # view 2 disagrees on sample 1
    lab = eng.pseudo_labels(h, p, p, p2, threshold=0.5)
    assert list(lab) == [0, -1, 1, 1]
    # a strict threshold keeps only the samples that coincide with their prototype (here one per cluster)
    assert list(eng.pseudo_labels(h, p, p, p, threshold=0.9999)) == [0, -1, 1, -1]


def test_digit_views_share_only_the_class():
    rng = np.random.default_rng(0)
    v1, v2, y = eng.make_digits_views(rng, 200, 5, 0.5)
    assert v1.shape == v2.shape == (200, 64) and set(np.unique(y)) <= set(range(5))
    imgs, labels = eng._digits()
    flat = imgs.reshape(len(imgs), -1)
    # view 2 (noise-free part) comes from a different image of the same class: no exact copy of the sample
    noiseless = eng.make_digits_views(np.random.default_rng(0), 200, 5, 0.0)[1]
    for i in range(20):
        j = np.nonzero(np.all(np.isclose(flat, noiseless[i]), axis=1))[0]
        assert len(j) >= 1 and labels[j[0]] == y[i]


def test_bad_combination_rejected():
    with pytest.raises(ValueError):
        eng.Config(warmup=200, epochs=100)


def test_without_the_balance_term_clusters_merge(default_result):
    """The page's caveat: with the entropy (cluster-balance) term off, self-training leaves some of the 10 digit
    clusters empty at seeds 0-2 (8 or 9 in use); the default keeps all of them."""
    for seed in (0, 1, 2):
        r = eng.run(eng.Config(balance=0.0, seed=seed))
        used = np.unique(r.pred).size
        assert used in (8, 9), (seed, used)
    assert np.unique(default_result.pred).size == eng.Config().clusters


def test_view_two_is_never_the_samples_own_image():
    """View 2's partner is another image of the same class. The samples are the generator's first draw, so they
    can be redrawn here; with noise 0 view 2 is the partner image itself."""
    imgs, labels = eng._digits()
    flat = imgs.reshape(len(imgs), -1)
    n, k = 300, 5
    v2, y = eng.make_digits_views(np.random.default_rng(4), n, k, 0.0)[1:]
    idx = np.random.default_rng(4).choice(np.nonzero(labels < k)[0], size=n, replace=False)
    assert np.array_equal(labels[idx], y)
    own = np.all(np.isclose(v2, flat[idx]), axis=1)
    assert not own.any(), np.flatnonzero(own)


def test_within_cluster_permutation_leaves_every_unlabelled_sample_in_place():
    rng = np.random.default_rng(1)
    pseudo = np.where(rng.random(400) < 0.4, -1, rng.integers(0, 6, 400))
    perm = eng.within_cluster_permutation(pseudo, rng)
    assert sorted(perm) == list(range(400)) and np.all(pseudo[perm] == pseudo)
    assert np.array_equal(perm[pseudo < 0], np.flatnonzero(pseudo < 0))
    assert (perm[pseudo >= 0] != np.flatnonzero(pseudo >= 0)).mean() > 0.5     # the labelled ones do move


# ----------------------------------------------------------------------------- what the page shows, rebuilt

def _std(x):
    sd = x.std(axis=0)
    return (x - x.mean(axis=0)) / np.where(sd > 1e-8, sd, 1.0)


def _pc_match(ours, ref):
    """Equal up to the sign of each principal component."""
    for j in range(2):
        s = np.sign(np.dot(ours[:, j], ref[:, j])) or 1.0
        np.testing.assert_allclose(ours[:, j], s * ref[:, j], atol=1e-6 * (1 + np.abs(ref).max()))


def test_metrics_and_badges_read_the_right_scores(default_result):
    r = default_result
    sc, m = r.scores, r.metrics
    names = {"coper": "COPER", "kmeans": "k-means on both views", "cca": "linear CCA + k-means",
             "dcca": "deep CCA + k-means (no permutations)", "noperm": eng.ABLATION}
    for short, name in names.items():
        for metric in ("NMI", "ACC"):
            assert m[f"{metric.lower()}_{short}"] == sc[name][metric], (short, metric)
    for name, lab in r.baselines.items():
        assert sc[name]["NMI"] == pytest.approx(normalized_mutual_info_score(r.labels, lab))
        assert sc[name]["ACC"] == pytest.approx(eng.cluster_accuracy(r.labels, lab))
    want = [sc["COPER"]["NMI"] - sc[names["kmeans"]]["NMI"], sc["COPER"]["ACC"] - sc[names["kmeans"]]["ACC"],
            sc["COPER"]["NMI"] - sc[names["cca"]]["NMI"], sc["COPER"]["ACC"] - sc[names["cca"]]["ACC"],
            sc["COPER"]["NMI"] - sc[eng.ABLATION]["NMI"]]
    assert [c.measured for c in eng.claims(r)] == pytest.approx(want)


def test_training_curves(default_result):
    """The training plot and CSV: epochs 1..E, the mean canonical correlation in [0, 1] (high at the end), and the
    pseudo-labelled share, zero before the warm-up ends and equal to the final share of samples with a label."""
    r, cfg = default_result, default_result.config
    h = r.history
    np.testing.assert_array_equal(h["epoch"], np.arange(1, cfg.epochs + 1))
    assert np.all((h["corr"] > 0) & (h["corr"] <= 1 + 1e-6)) and h["corr"][-1] > 0.5
    assert np.all(h["labelled"][: cfg.warmup - 1] == 0) and h["labelled"].max() > 0
    assert h["labelled"][-1] == pytest.approx(r.metrics["labelled_share"])
    assert np.all(h["ce"][: cfg.warmup] == 0)


def test_confusion_is_a_column_permutation_of_the_contingency_table(default_result):
    from sklearn.metrics.cluster import contingency_matrix

    r = default_result
    cont = contingency_matrix(r.labels, r.pred)             # classes x clusters (as numbered)
    conf = r.confusion
    np.testing.assert_array_equal(conf.sum(1), np.bincount(r.labels, minlength=conf.shape[0]))
    cols = {tuple(c) for c in cont.T}
    for j in range(conf.shape[1]):
        if conf[:, j].any():
            assert tuple(conf[:, j]) in cols
    assert np.trace(conf) == pytest.approx(r.scores["COPER"]["ACC"] * len(r.labels))


def test_views_examples_and_baselines_rebuilt_with_sklearn(default_result):
    """Redraw the digit views from the seed, then: the example images are the first sample of classes 0..4 in each
    view; the k-means bar comes from scikit-learn's KMeans on both standardised views; the raw scatter is scikit-learn's PCA of both views."""
    from sklearn.cluster import KMeans
    from sklearn.decomposition import PCA

    r, cfg = default_result, default_result.config
    v1, v2, y = eng.make_digits_views(np.random.default_rng(cfg.seed), cfg.n_samples, cfg.clusters, cfg.view_noise)
    np.testing.assert_array_equal(y, r.labels)
    first = [int(np.argmax(y == c)) for c in range(5)]
    ex = r.views_example
    np.testing.assert_array_equal(ex["labels"], np.arange(5))
    np.testing.assert_allclose(ex["view1"], v1[first].reshape(-1, 8, 8))
    np.testing.assert_allclose(ex["view2"], v2[first].reshape(-1, 8, 8))
    both = np.hstack([_std(v1), _std(v2)])
    km = KMeans(n_clusters=cfg.clusters, n_init=10, random_state=cfg.seed).fit_predict(both)
    assert normalized_mutual_info_score(km, r.baselines["k-means on both views"]) == pytest.approx(1.0)
    _pc_match(r.embed2d_raw, PCA(n_components=2, svd_solver="full").fit_transform(both))


def test_coper_outputs_follow_the_trained_networks(monkeypatch):
    """Capture what training returns: the embedding scatter is the PCA of the final fused embedding, the deep-CCA bar
    is k-means of the warm-up embedding, and COPER's clusters are the argmax of a linear head on the fused embedding,
    so they are linearly separable there (a linear classifier fits them exactly)."""
    from sklearn.cluster import KMeans
    from sklearn.decomposition import PCA
    from sklearn.svm import LinearSVC

    seen = []
    real = eng.train_coper

    def spy(*a, **kw):
        out = real(*a, **kw)
        seen.append(out)
        return out

    monkeypatch.setattr(eng, "train_coper", spy)
    cfg = eng.Config(n_samples=400, epochs=60, warmup=20, clusters=5, permute=False)
    r = eng.run(cfg)
    pred, emb, warm = seen[0][:3]
    np.testing.assert_array_equal(r.pred, pred)
    _pc_match(r.embed2d, PCA(n_components=2, svd_solver="full").fit_transform(emb))
    kw = KMeans(n_clusters=cfg.clusters, n_init=10, random_state=cfg.seed).fit_predict(_std(warm))
    assert normalized_mutual_info_score(kw, r.baselines["deep CCA + k-means (no permutations)"]) == pytest.approx(1.0)
    svm = LinearSVC(C=1e4, max_iter=200_000).fit(emb, pred)
    assert (svm.predict(emb) == pred).mean() >= 0.995
    # the pseudo-label accuracy scores the pseudo-labels themselves (not the final clusters) on the labelled samples
    from scipy.optimize import linear_sum_assignment
    from sklearn.metrics.cluster import contingency_matrix

    pseudo = seen[0][3]
    lab = pseudo >= 0
    table = contingency_matrix(r.labels[lab], pseudo[lab])
    rows, cols = linear_sum_assignment(-table)
    assert r.metrics["pseudo_label_acc"] == pytest.approx(table[rows, cols].sum() / lab.sum())


def test_synthetic_distractor_strength_follows_the_widget():
    """The 'View-2 noise' widget sets the strength of each view's private grouping in the synthetic set: with the
    same draws, the views at strength 1 are the views at 0 plus the distractor centres, which are 3·√20 long."""
    a1, a2, ya = eng.make_synthetic_views(np.random.default_rng(0), 300, 4, 0.0)
    b1, b2, yb = eng.make_synthetic_views(np.random.default_rng(0), 300, 4, 1.0)
    np.testing.assert_array_equal(ya, yb)
    for a, b in ((a1, b1), (a2, b2)):
        shift = np.linalg.norm(b - a, axis=1)
        np.testing.assert_allclose(shift, 3.0 * np.sqrt(20), rtol=1e-9)


def test_linear_cca_embedding_uses_both_views():
    """The linear-CCA baseline embeds each view with its own canonical weights: scikit-learn's CCA scores of view 1
    and of view 2, side by side and standardised; paired columns are the canonical pairs (highly correlated)."""
    rng = np.random.default_rng(2)
    z = rng.normal(size=(300, 3))
    x1 = _std(np.hstack([z, rng.normal(size=(300, 5))]) @ rng.normal(size=(8, 8)))
    x2 = _std(np.hstack([z + 0.3 * rng.normal(size=(300, 3)), rng.normal(size=(300, 4))]) @ rng.normal(size=(7, 7)))
    emb = eng.linear_cca_embedding(x1, x2, 3)
    u, v = CCA(n_components=3, max_iter=1000).fit(x1, x2).transform(x1, x2)
    np.testing.assert_allclose(emb, _std(np.hstack([u, v])), atol=1e-8)
    assert np.corrcoef(emb[:, 0], emb[:, 3])[0, 1] > 0.9


# ----------------------------------------------------------------------------- what the page draws


def test_page_scores_colours_and_confusion_follow_the_result(default_result):
    """The default page, read back: COPER's NMI and ACC tiles equal scikit-learn's NMI and the Hungarian-matched
    accuracy of the predicted clusters (recomputed here), the ablation tiles carry the ablation's own NMI and ACC,
    both embedding scatters are coloured by the true class, the pseudo-label line is the labelled share, and the
    confusion map has one row per class (row sums = class sizes) with the matched hits on its diagonal."""

    from scipy.optimize import linear_sum_assignment

    res = default_result
    at = open_page("multiview_clustering", seed=(("engine.multiview_clustering", eng.Config(), default_result),))
    figs = charts(at)

    y, pred = np.asarray(res.labels), np.asarray(res.pred)
    k = int(max(y.max(), pred.max())) + 1
    counts = np.zeros((k, k))
    np.add.at(counts, (y, pred), 1)
    rows, cols = linear_sum_assignment(-counts)
    acc = counts[rows, cols].sum() / len(y)
    tiles = {mt.label: mt.value for mt in at.metric}
    assert tiles["COPER NMI"] == f"{normalized_mutual_info_score(y, pred):.3f}"
    assert tiles["COPER ACC"] == f"{acc:.3f}"
    abl = res.scores[eng.ABLATION]
    assert abl["NMI"] != pytest.approx(abl["ACC"], abs=5e-4)
    assert tiles["NMI, no permutations"] == f"{abl['NMI']:.3f}"
    assert tiles["ACC, no permutations"] == f"{abl['ACC']:.3f}"

    # one trace per true class, each with its own colour, holding exactly that class's points
    for key, xy in (("raw", res.embed2d_raw), ("emb", res.embed2d)):
        traces = {t["name"]: t for t in figs[key]}
        classes = np.unique(y)
        assert set(traces) == {f"class {c}" for c in classes}
        for c in classes:
            np.testing.assert_allclose(values(traces[f"class {c}"]["x"]), xy[y == c, 0])
            np.testing.assert_allclose(values(traces[f"class {c}"]["y"]), xy[y == c, 1])
        assert len({t["marker"]["color"] for t in traces.values()}) == len(classes)

    train = {t["name"]: values(t["y"]) for t in figs["train"] if t.get("name")}
    np.testing.assert_allclose(train["share of samples with a pseudo-label"], res.history["labelled"])
    np.testing.assert_allclose(train["mean canonical correlation"], res.history["corr"])

    # the dotted line marks the first epoch with pseudo-labels
    labelled = np.asarray(res.history["labelled"])
    first = int(np.asarray(res.history["epoch"])[np.argmax(labelled > 0)])
    assert labelled.max() > 0
    train_spec = figures(at)["train"]
    assert [s["x0"] for s in train_spec["layout"]["shapes"]] == [first]

    z = values(next(t for t in figs["confusion"] if t["type"] == "heatmap")["z"])
    np.testing.assert_array_equal(z.sum(axis=1), np.bincount(y, minlength=len(z)))
    assert np.trace(z) / len(y) == pytest.approx(acc)


# ---- added by mutation testing (2026-12-07): each kills a mutant the file above let through ----

def test_cross_entropy_trains_the_head_on_fused_and_per_view_logits(monkeypatch):
    """Every cross-entropy call after the warm-up gets three blocks of logits for the same pseudo-labelled
    samples: fused, view 1 alone, view 2 alone, with the same targets. The head is linear (with a bias), so
    head((h1 + h2) / 2) = (head(h1) + head(h2)) / 2: the fused block must be the mean of the two view blocks,
    and the view blocks must differ from it (a head trained on the fused logits three times would pass the
    first check only)."""
    calls = []

    class Recording(torch.nn.CrossEntropyLoss):
        def forward(self, inp, target):
            calls.append((inp.detach().clone(), target.clone()))
            return super().forward(inp, target)

    monkeypatch.setattr(torch.nn, "CrossEntropyLoss", Recording)
    cfg = eng.Config(n_samples=400, epochs=40, warmup=20, clusters=5, permute=False)
    eng.run(cfg)
    assert len(calls) >= cfg.epochs - cfg.warmup - 2
    for inp, t in calls[-3:]:
        m = len(t) // 3
        assert len(t) == 3 * m and m > 0
        assert torch.equal(t[:m], t[m:2 * m]) and torch.equal(t[:m], t[2 * m:])
        fused, v1, v2 = inp[:m], inp[m:2 * m], inp[2 * m:]
        np.testing.assert_allclose(fused.numpy(), ((v1 + v2) / 2).numpy(), atol=1e-5)
        assert float((v1 - fused).abs().max()) > 1e-2 and float((v2 - fused).abs().max()) > 1e-2


# ---- direct tests (2026-12-07) for mutants caught before only by a thin badge margin or a snapshot ----

def _pseudo_labels_loop(h, p, p1, p2, threshold, top_frac=0.5):
    """The pseudo-label rule written out with loops: per cluster the ceil(top_frac·N/K) most probable samples,
    the mean of their unit embeddings rescaled to unit length (the prototype), then the cosine test and the
    agreement of both views' argmax."""
    import math

    n, k = p.shape
    m = max(1, math.ceil(top_frac * n / k))
    unit = [row / max(np.linalg.norm(row), 1e-12) for row in h]
    protos = []
    for c in range(k):
        top = sorted(range(n), key=lambda i: -p[i, c])[:m]
        centre = sum(unit[i] for i in top) / m
        protos.append(centre / max(np.linalg.norm(centre), 1e-12))
    out = []
    for i in range(n):
        sims = [float(unit[i] @ protos[c]) for c in range(k)]
        c = int(np.argmax(sims))
        keep = sims[c] >= threshold and int(np.argmax(p1[i])) == c and int(np.argmax(p2[i])) == c
        out.append(c if keep else -1)
    return np.array(out)


def test_pseudo_label_prototypes_are_unit_vectors():
    """Hand case (K = 2, N = 6, so 2 prototype samples per cluster): cluster 0's prototype samples point along
    (1, 0) and (0, 1), whose mean (0.5, 0.5) has length 0.707; rescaled, the prototype is the unit vector at
    45°, so sample 2, lying exactly on it, has cosine 1 and passes even λ = 0.9. Sample 5 lies at 110°:
    cos(65°) = 0.42 to prototype 0 beats cos(70°) = 0.34 to prototype 1 at (-1, 0); with an unrescaled
    prototype 0 it would lose (0.707·0.42 = 0.30 < 0.34) and its views (which say 0) would then disagree."""
    a = np.deg2rad(110)
    h = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 0.0], [-2.0, 0.0], [np.cos(a), np.sin(a)]])
    p = np.array([[0.9, 0.1], [0.9, 0.1], [0.6, 0.4], [0.1, 0.9], [0.1, 0.9], [0.55, 0.45]])
    assert list(eng.pseudo_labels(h, p, p, p, threshold=0.9)) == [-1, -1, 0, 1, 1, -1]
    assert list(eng.pseudo_labels(h, p, p, p, threshold=0.0)) == [0, 0, 0, 1, 1, 0]


@pytest.mark.parametrize("seed", range(4))
def test_pseudo_labels_match_a_loop(seed):
    rng = np.random.default_rng(seed)
    n, k, d = 40, 4, 5
    centres = rng.normal(size=(k, d))
    y = rng.integers(0, k, size=n)
    h = centres[y] + 0.8 * rng.normal(size=(n, d))
    logit = rng.normal(size=(3, n, k)) + 2.0 * np.eye(k)[y]
    p, p1, p2 = np.exp(logit) / np.exp(logit).sum(-1, keepdims=True)
    for thr in (0.0, 0.5, 0.8):
        ref = _pseudo_labels_loop(h, p, p1, p2, thr)
        np.testing.assert_array_equal(eng.pseudo_labels(h, p, p1, p2, thr), ref)
    assert (_pseudo_labels_loop(h, p, p1, p2, 0.5) >= 0).sum() >= 5  # the case is not vacuous


def _instrumented_training(monkeypatch, cfg):
    """Train COPER on small synthetic views while recording, for every pseudo-label call, its arguments and
    output, what the networks gave just before that epoch's optimiser step (both encoders' embeddings and the
    head's weights: the forward pass of the epoch), and the pseudo-labels handed to each permutation."""
    import engine.core.nn as tnn

    x1, x2, _ = eng.make_synthetic_views(np.random.default_rng(cfg.seed), cfg.n_samples, cfg.clusters,
                                         cfg.view_noise)
    x1, x2 = eng._standardise(x1), eng._standardise(x2)
    X1, X2 = torch.tensor(x1, dtype=torch.float32), torch.tensor(x2, dtype=torch.float32)
    encoders, heads, before_step, calls, perms = [], [], [], [], []
    real_mlp, real_opt = tnn.mlp, tnn.make_optimizer
    real_pl, real_perm = eng.pseudo_labels, eng.within_cluster_permutation

    def mlp(*a, **kw):
        encoders.append(real_mlp(*a, **kw))
        return encoders[-1]

    def make_optimizer(params, *a, **kw):
        params = list(params)
        opt = real_opt(params, *a, **kw)
        if len(params) > 2:  # the main optimiser (the head refit at the warm-up gets its own, 2 parameters)
            heads.append(params[-2:])
            step = opt.step

            def recording_step(*sa, **skw):
                with torch.no_grad():
                    w, b = (t.detach().clone().numpy() for t in heads[0])
                    before_step.append((encoders[0](X1).numpy().copy(), encoders[1](X2).numpy().copy(), w, b))
                return step(*sa, **skw)

            opt.step = recording_step
        return opt

    def pseudo_labels(h, p, p1, p2, threshold, *a, **kw):
        out = real_pl(h, p, p1, p2, threshold, *a, **kw)
        w, b = (t.detach().clone().numpy() for t in heads[0])  # the head as it is now (after the refit)
        calls.append(dict(epoch=len(before_step) - 1, h=h.copy(), p=p.copy(), p1=p1.copy(), p2=p2.copy(),
                          out=out.copy(), head_now=(w, b)))
        return out

    def within_cluster_permutation(pseudo, rng):
        perms.append((len(before_step), pseudo.copy()))
        return real_perm(pseudo, rng)

    monkeypatch.setattr(tnn, "mlp", mlp)
    monkeypatch.setattr(tnn, "make_optimizer", make_optimizer)
    monkeypatch.setattr(eng, "pseudo_labels", pseudo_labels)
    monkeypatch.setattr(eng, "within_cluster_permutation", within_cluster_permutation)
    out = eng.train_coper(x1, x2, cfg, np.random.default_rng(cfg.seed))
    return out, before_step, calls, perms


_SMALL = eng.Config(dataset="synthetic", n_samples=300, clusters=4, epochs=30, warmup=10)


def _softmax(z):
    z = z - z.max(1, keepdims=True)
    return np.exp(z) / np.exp(z).sum(1, keepdims=True)


def test_pseudo_labels_are_recomputed_from_the_current_network_every_epoch(monkeypatch):
    """From the last warm-up epoch on, every epoch ends with a fresh call of the pseudo-label rule on that
    epoch's fused embedding (h1 + h2) / 2, recomputed here from the encoders' outputs; the next epoch's
    within-cluster permutation gets exactly that call's labels, and the labels returned are the last call's.
    The labels do move during training (they are not the warm-up's partition kept frozen)."""
    cfg = _SMALL
    (_, _, _, pseudo, _), before_step, calls, perms = _instrumented_training(monkeypatch, cfg)
    assert len(before_step) == cfg.epochs
    assert [c["epoch"] for c in calls] == list(range(cfg.warmup - 1, cfg.epochs))
    for c in calls:
        h1, h2 = before_step[c["epoch"]][:2]
        np.testing.assert_allclose(c["h"], (h1 + h2) / 2, atol=1e-6)
    assert [e for e, _ in perms] == list(range(cfg.warmup, cfg.epochs))
    outs = {c["epoch"]: c["out"] for c in calls}
    for e, given in perms:
        np.testing.assert_array_equal(given, outs[e - 1])
    np.testing.assert_array_equal(pseudo, calls[-1]["out"])
    changed = sum(not np.array_equal(a["out"], b["out"]) for a, b in zip(calls, calls[1:]))
    assert changed >= 3 and not np.array_equal(calls[0]["out"], calls[-1]["out"])


def test_pseudo_label_rule_gets_each_views_own_probabilities(monkeypatch):
    """The rule's consistency check needs the head applied to each view's embedding alone: recomputed here
    from the encoders' outputs of that epoch and the linear head's weights, p1 = softmax(W h1 + b),
    p2 = softmax(W h2 + b) and the fused p = softmax(W (h1 + h2)/2 + b). The views genuinely disagree with
    the fused head on some samples, so passing the fused probabilities three times would not do."""
    cfg = _SMALL
    _, before_step, calls, _ = _instrumented_training(monkeypatch, cfg)
    disagree = 0
    for i, c in enumerate(calls):
        h1, h2, w, b = before_step[c["epoch"]]
        if i == 0:  # the warm-up's last epoch: the head was just refitted on k-means, after the step
            w, b = c["head_now"]
        np.testing.assert_allclose(c["p"], _softmax((h1 + h2) / 2 @ w.T + b), atol=1e-5)
        np.testing.assert_allclose(c["p1"], _softmax(h1 @ w.T + b), atol=1e-5)
        np.testing.assert_allclose(c["p2"], _softmax(h2 @ w.T + b), atol=1e-5)
        fused = c["p"].argmax(1)
        disagree += int(np.sum((c["p1"].argmax(1) != fused) | (c["p2"].argmax(1) != fused)))
    assert disagree > 0
    assert float(np.abs(calls[-1]["p1"] - calls[-1]["p"]).max()) > 1e-2
