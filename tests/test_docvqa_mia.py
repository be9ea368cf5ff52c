import math

import numpy as np
import pytest
import torch
from sklearn.cluster import KMeans
from sklearn.metrics import roc_auc_score

from engine import docvqa_mia as eng
from tests.pagetext import figures, open_page, values


@pytest.fixture(scope="module")
def default_result():
    return eng.run(eng.Config())


# The three "beats the loss baselines" claims are shown failing on purpose: in this toy the loss is the stronger
# signal, both to rank (its threshold-free AUC) and to decide (2-means on the loss); the page explains it.
LOSS_AUC_LABELS = {"AUC white-box − max(AUC loss threshold, chance bar)",
                   "AUC black-box − max(AUC loss threshold, chance bar)",
                   "min(accuracy white, black) − max(accuracy of the loss rules, chance bar)"}


def test_claims_pass_at_default(default_result):
    for c in eng.claims(default_result):
        if c.label not in LOSS_AUC_LABELS:
            assert c.passed, c.describe()


def test_decision_badge_counts_the_label_free_loss_rule(default_result):
    """The decision badge compares with the best loss rule, 2-means on the loss included (0.94 at the default,
    against 0.86 / 0.79 for DocMIA): it fails, as the spec expects of this toy, instead of passing against the
    weaker mean-training-loss threshold alone (0.75)."""
    m = default_result.metrics
    (c,) = [c for c in eng.claims(default_result) if c.label in LOSS_AUC_LABELS and "accuracy" in c.label]
    assert m["acc_best_loss_rule"] == max(m["acc_loss"], m["acc_loss_cluster"])
    assert c.measured == pytest.approx(min(m["acc_white"], m["acc_black"])
                                       - max(m["acc_best_loss_rule"], m["acc_chance_bar"]))
    assert m["acc_loss_cluster"] > m["acc_loss"] and not c.passed


def test_closed_form_matches_autograd_descent():
    rng = np.random.default_rng(0)
    P, H, V = 6, 64, 64
    h = np.abs(rng.normal(size=(P, H))) * 0.3
    W0, b0 = rng.normal(size=(V, H)) * 0.1, rng.normal(size=V) * 0.1
    read = rng.normal(size=(P, V))
    z0 = h @ W0.T + b0 + read
    y = rng.integers(0, V, P)
    lr, tau, smax = 0.1, 0.1, 200
    steps, dist, _ = eng.fit_features(h, z0, y, lr, tau, smax)
    for i in range(P):
        W = torch.tensor(W0, requires_grad=True)
        b = torch.tensor(b0, requires_grad=True)
        hi, ri = torch.tensor(h[i]), torch.tensor(read[i])
        s = smax
        for t in range(smax + 1):
            loss = torch.nn.functional.cross_entropy((W @ hi + b + ri)[None], torch.tensor([int(y[i])]))
            if loss.item() < tau:
                s = t
                break
            if t == smax:
                break
            W.grad = b.grad = None
            loss.backward()
            with torch.no_grad():
                W -= lr * W.grad
                b -= lr * b.grad
        d = np.sqrt(np.sum((W.detach().numpy() - W0) ** 2) + np.sum((b.detach().numpy() - b0) ** 2))
        assert steps[i] == s
        assert dist[i] == pytest.approx(d, rel=1e-6, abs=1e-9)


def test_already_fitted_pairs_give_zero():
    z0 = np.zeros((3, 5))
    z0[0, 2] = 20.0  # loss ≈ 0 < τ
    steps, dist, _ = eng.fit_features(np.ones((3, 4)), z0, np.array([2, 1, 0]), 0.1, 0.1, 50)
    assert steps[0] == 0 and dist[0] == 0.0
    assert steps[1] > 0 and dist[1] > 0


def test_kmeans_and_roc_match_sklearn(default_result):
    r = default_result
    X = r.desc_white
    Xs = (X - X.mean(0)) / X.std(0)
    lab, _ = eng.kmeans2(Xs, 0)
    sk = KMeans(2, n_init=10, random_state=0).fit(Xs).labels_
    agree = max(np.mean(lab == sk), np.mean(lab != sk))
    assert agree > 0.99
    rng = np.random.default_rng(1)
    for _ in range(5):
        labels = rng.random(300) < 0.5
        score = rng.normal(size=300) + labels * rng.uniform(0, 2)
        score = np.round(score, 1)  # include ties
        assert eng.roc_points(labels, score)[2] == pytest.approx(roc_auc_score(labels, score), abs=1e-12)
    fpr, tpr = r.roc["white-box DocMIA"]
    assert np.trapezoid(tpr, fpr) == pytest.approx(r.auc["white-box DocMIA"])


def test_member_cluster_chosen_without_labels(default_result):
    r = default_result
    pred = r.pred_white
    dbar = np.exp(r.desc_white[:, 0])
    assert dbar[pred].mean() < dbar[~pred].mean()


def test_null_untrained_target():
    res = eng.run(eng.Config(epochs=0, n_docs=200))
    assert abs(res.metrics["auc_white"] - 0.5) < 0.08
    assert abs(res.metrics["auc_black"] - 0.5) < 0.08
    assert not any(c.passed for c in eng.claims(res)[1:5])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_untrained_target_fails_the_beats_baseline_claims(seed):
    # with no membership signal the loss-threshold AUC / accuracy can drift below 0.5; a chance-level attack
    # must still not "beat the baseline" (before the chance bar it did, at each of these seeds)
    res = eng.run(eng.Config(epochs=0, seed=seed))
    by_label = {c.label: c for c in eng.claims(res)}
    beats = [lbl for lbl in by_label if "max(" in lbl]
    assert len(beats) == 3
    for lbl in beats:
        assert not by_label[lbl].passed, by_label[lbl].describe()


def test_chance_bars_match_simulated_null_spread():
    rng = np.random.default_rng(0)
    labels = np.r_[np.ones(200, bool), np.zeros(200, bool)]
    aucs = [eng.roc_points(labels, rng.normal(size=400))[2] for _ in range(2000)]
    assert eng.auc_chance_bar(200, 200) == pytest.approx(0.5 + 3 * np.std(aucs), abs=0.01)
    accs = [np.mean((rng.random(400) < 0.5) == labels) for _ in range(2000)]
    assert eng.acc_chance_bar(400) == pytest.approx(0.5 + 3 * np.std(accs), abs=0.01)


def test_proxy_has_its_own_initialisation(monkeypatch):
    # the black-box attacker does not know the target's initial weights
    t, p = eng._model(1000), eng._model(eng.proxy_init_seed(0))
    assert not torch.equal(t.out.weight, p.out.weight)
    cfg = eng.Config(epochs=0, n_docs=200)
    res = eng.run(cfg)
    assert res.metrics["auc_black"] != res.metrics["auc_white"]
    # why white- and black-box AUCs used to coincide at epochs = 0: the proxy started from the target's
    # initialisation and was trained for 0 epochs, so it *was* the target and the two attacks were one
    monkeypatch.setattr(eng, "proxy_init_seed", lambda seed: 1000 + seed)
    shared = eng.run(cfg)
    assert shared.metrics["auc_black"] == shared.metrics["auc_white"]
    assert shared.metrics["acc_black"] == shared.metrics["acc_white"]


def test_shuffled_labels_give_chance(default_result):
    """The white-box descriptor separates members because of which documents were trained on: the same scores
    (−log Δ̄, the mean optimisation distance) against shuffled membership labels fall to chance (20 shuffles), and
    against the true labels stand far above the shuffles' spread."""
    r = default_result
    rng = np.random.default_rng(3)
    score = r.desc_white[:, 0] * -1
    true_auc = eng.roc_points(r.membership, score)[2]
    shuffled = [eng.roc_points(rng.permutation(r.membership), score)[2] for _ in range(20)]
    assert abs(np.mean(shuffled) - 0.5) < 0.03
    assert true_auc - 0.5 > 3 * np.std(shuffled)


def test_auc_grows_with_training(default_result):
    # snapshots of the default run: 2, 4, 8, 16 epochs
    a = default_result.auc_vs_epochs
    assert np.all(np.diff(a) >= -0.02), a


def test_auc_grows_from_8_to_16_to_24_epochs(default_result):
    """The spec's check on separate targets: the white-box AUC does not fall as training goes 8 → 16 → 24 epochs
    (the default is 16; at 24 the snapshots 3, 6, 12, 24 of that run rise too)."""
    r8, r24 = eng.run(eng.Config(epochs=8)), eng.run(eng.Config(epochs=24))
    a = [r8.metrics["auc_white"], default_result.metrics["auc_white"], r24.metrics["auc_white"]]
    assert np.all(np.diff(a) >= -0.02), a
    assert a[-1] > a[0] + 0.1
    assert np.all(np.diff(r24.auc_vs_epochs) >= -0.02), r24.auc_vs_epochs


def test_proxy_on_true_answers_leaks_nothing():
    cfg = eng.Config(n_docs=200)
    rng = eng.seed_everything(0, torch_too=True)
    values, ocr, emb, fields, member = eng.make_documents(rng, 200, 0.5, 6)
    pairs = eng._pairs(np.arange(200), fields, values, ocr, emb)
    proxy = eng._model(7)
    eng.train_model(proxy, pairs[4], pairs[1], pairs[3], pairs[2], 16, 0.0, 1, torch.device("cpu"))
    s, d, _, _ = eng._attack(proxy, pairs, 6, cfg, torch.device("cpu"))
    desc, dbar = eng.descriptors(s, d, 200, 6, cfg.max_steps)
    _, score = eng.cluster_decide(desc, dbar, "both", 0)
    assert abs(eng.roc_points(member, score)[2] - 0.5) < 0.1


def test_loss_threshold_baseline(default_result):
    r = default_result
    # the baseline's ROC is the ROC of −(mean loss over the document's questions): recompute with sklearn
    assert r.auc["loss threshold (document mean)"] == pytest.approx(roc_auc_score(r.membership, -r.doc_loss))
    pair_loss = np.array([[0.1, 0.3], [2.0, 1.0], [0.5, 0.5]]).ravel()
    score, pred = eng.loss_threshold_attack(pair_loss, 3, 2, threshold=0.6)
    np.testing.assert_allclose(score, [-0.2, -1.5, -0.5])
    np.testing.assert_array_equal(pred, [True, False, True])


@pytest.fixture(scope="module")
def sweep_200():
    return eng.sweep(eng.Config(n_docs=200))


def test_sweeps_fall_toward_chance(sweep_200):
    sr = sweep_200
    assert list(sr.train_docs) == [100, 200, 400, 800, 1600]
    for c in eng.sweep_claims(sr):
        assert c.passed, c.describe()
    w = sr.auc_size["white-box DocMIA"]
    assert np.all(np.diff(w) <= 0.03), w


@pytest.mark.parametrize("kw", [{"p_read": 0.8}, {"p_read": 0.95}, {"epochs": 40}])
def test_loss_stays_ahead_with_easier_reading_or_longer_training(kw):
    """The page says so under the failing 'beats the loss baseline' badge."""
    m = eng.run(eng.Config(**kw)).metrics
    assert m["auc_loss"] > m["auc_white"] and m["auc_loss"] > m["auc_black"]


def test_gradient_noise_defence_weakens_the_attacks_and_costs_memorisation(default_result):
    """DP-style noise on the target's training: more noise, weaker white-box and loss attacks, and the target
    answers fewer of its own training questions (what the attack detects is what it memorised)."""
    m0 = default_result.metrics
    runs = {s: eng.run(eng.Config(grad_noise=s)).metrics for s in (1.0, 8.0)}
    assert m0["auc_white"] > runs[1.0]["auc_white"] > runs[8.0]["auc_white"]
    assert m0["auc_loss"] > runs[1.0]["auc_loss"] > runs[8.0]["auc_loss"]
    assert runs[8.0]["auc_white"] < m0["auc_chance_bar"] + 0.05
    assert runs[8.0]["answer_acc_members"] < m0["answer_acc_members"]
    # σ = 0 neither clips nor adds noise: exactly the default target
    assert eng.run(eng.Config(grad_noise=0.0)).metrics["auc_white"] == m0["auc_white"]


def test_page_deciding_sentence_follows_the_run():
    # after 4 epochs DocMIA's 2-means decides worse than Yeom's rule (measured 0.59 / 0.53 vs 0.67): the page must
    # not say the loss rule loses in deciding
    from tests.pagetext import page_texts

    full = " ".join(page_texts("docvqa_mia"))
    assert "Yeom's rule does lose in *deciding*" in full and "ahead of DocMIA's decisions too" in full
    short = " ".join(page_texts("docvqa_mia", {"epochs": "4"}))
    assert "DocMIA is not ahead of Yeom's rule on this run either" in short and "does lose" not in short


def test_tpr_at_1pct_fpr_matches_a_hand_built_roc_and_sklearn():
    """TPR at 1 % FPR: 5 positives above 100 negatives above 5 positives gives exactly 0.5 (one false positive
    costs 1 %); on random tied scores it equals np.interp on sklearn's full ROC curve."""
    from sklearn.metrics import roc_curve

    labels = np.r_[np.ones(5, bool), np.zeros(100, bool), np.ones(5, bool)]
    score = -np.arange(110.0)
    assert eng.roc_points(labels, score)[3] == pytest.approx(0.5)
    rng = np.random.default_rng(4)
    for _ in range(5):
        labels = rng.random(500) < 0.5
        score = np.round(rng.normal(size=500) + labels * rng.uniform(0.5, 2), 1)
        fpr, tpr, _ = roc_curve(labels, score, drop_intermediate=False)
        assert eng.roc_points(labels, score)[3] == pytest.approx(np.interp(0.01, fpr, tpr), abs=1e-12)


@pytest.mark.parametrize("how", ["mean", "median", "max"])
def test_descriptor_follows_the_spec_formula(how):
    """φ(D) = [log(Δ̄ + 0.05·median_D Δ̄), s̄ / s_max] with Δ̄, s̄ aggregated over each document's own questions
    (pairs are stored document by document), recomputed with plain loops on 3 documents × 3 questions."""
    import statistics

    agg = {"mean": statistics.mean, "median": statistics.median, "max": max}[how]
    steps = np.array([[0, 10, 20], [200, 200, 100], [5, 5, 50]])
    dist = np.array([[0.0, 0.4, 0.8], [3.0, 2.0, 5.0], [0.1, 0.1, 0.7]])
    desc, dbar = eng.descriptors(steps.ravel(), dist.ravel(), 3, 3, 200, how)
    ref_dbar = [agg(list(row)) for row in dist]
    off = 0.05 * statistics.median(ref_dbar)
    np.testing.assert_allclose(dbar, ref_dbar)
    np.testing.assert_allclose(desc[:, 0], [math.log(d + off) for d in ref_dbar])
    np.testing.assert_allclose(desc[:, 1], [agg([int(s) for s in row]) / 200 for row in steps])
    assert np.all((desc[:, 1] >= 0) & (desc[:, 1] <= 1))


def test_gradient_noise_has_the_documented_scale(monkeypatch):
    """train_model's contract: with σ > 0 every coordinate of the clipped (norm ≤ 1) batch gradient gets
    N(0, (σ·C/128)²) noise. The gradients the optimiser receives then have norm within C of √D·σ/128
    (a chi variable with D ≈ 5 800 degrees of freedom spreads by ~1 %)."""
    import engine.core.nn as cnn

    seen = []
    real = cnn.make_optimizer

    def spy(params, *a, **kw):
        params = list(params)
        opt = real(params, *a, **kw)
        step = opt.step

        def recording_step(*sa, **skw):
            seen.append(torch.cat([p.grad.reshape(-1) for p in params if p.grad is not None]))
            return step(*sa, **skw)

        opt.step = recording_step
        return opt

    monkeypatch.setattr(cnn, "make_optimizer", spy)
    rng = np.random.default_rng(0)
    n = 256
    e = rng.normal(size=(n, eng.EMB)).astype(np.float32)
    f, o, y = rng.integers(0, eng.F_FIELDS, n), rng.integers(0, eng.VOCAB, n), rng.integers(0, eng.VOCAB, n)
    sigma = 8.0
    eng.train_model(eng._model(0), e, f, o, y, 1, 0.0, 0, torch.device("cpu"), grad_noise=sigma)
    assert len(seen) == 2                                    # 256 pairs, batch 128
    for g in seen:
        expected = math.sqrt(g.numel()) * sigma * eng.DP_CLIP / 128
        assert abs(float(g.norm()) - expected) <= eng.DP_CLIP + 0.05 * expected


# ------------------------------------------------------------------ second mutation round: what the page shows
@pytest.fixture(scope="module")
def rebuilt():
    """The default run's target, proxy and per-pair features rebuilt outside run(): same seeds, same calls."""
    from engine.core.nn import set_cpu_threads

    cfg = eng.Config()
    set_cpu_threads(1)
    rng = eng.seed_everything(cfg.seed, torch_too=True)
    dev = torch.device("cpu")
    n, q = cfg.n_docs, cfg.questions
    values, ocr, emb, fields, member = eng.make_documents(rng, n, cfg.p_read, q)
    pairs = eng._pairs(np.arange(n), fields, values, ocr, emb)
    tr = eng._pairs(np.nonzero(member)[0], fields, values, ocr, emb)
    target = eng._model(1000 + cfg.seed)
    eng.train_model(target, tr[4], tr[1], tr[3], tr[2], cfg.epochs, cfg.weight_decay, cfg.seed, dev)
    h, z0 = eng.head_inputs(target, pairs[4], pairs[1], pairs[3], dev)
    steps, dist, _ = eng.fit_features(h, z0, pairs[2], cfg.attack_lr, cfg.tau, cfg.max_steps)
    answer = np.argmax(z0, 1)
    proxy = eng._model(eng.proxy_init_seed(cfg.seed))
    eng.train_model(proxy, pairs[4], pairs[1], pairs[3], answer, cfg.epochs, 0.0, cfg.seed + 1, dev)
    ph, pz0 = eng.head_inputs(proxy, pairs[4], pairs[1], pairs[3], dev)
    psteps, pdist, _ = eng.fit_features(ph, pz0, pairs[2], cfg.attack_lr, cfg.tau, cfg.max_steps)
    return {"cfg": cfg, "member": member, "y": pairs[2], "z0": z0, "answer": answer, "steps": steps.reshape(n, q),
            "dist": dist.reshape(n, q), "psteps": psteps.reshape(n, q), "pdist": pdist.reshape(n, q)}


def _cross_entropy(z0, y):
    from scipy.special import logsumexp

    return logsumexp(z0, axis=1) - z0[np.arange(len(y)), y]


def test_shown_accuracies_and_losses_match_their_rebuild(default_result, rebuilt):
    """The caption's answer accuracies (pairs are stored document by document), the loss baseline's per-document
    losses (cross-entropy of the TRUE answer, scipy's logsumexp) and Yeom's accuracy at the mean training loss."""
    r, m, b = default_result, default_result.metrics, rebuilt
    assert np.array_equal(r.membership, b["member"])
    ok = (b["answer"] == b["y"]).reshape(-1, b["cfg"].questions)
    assert r.train_acc["members"] == pytest.approx(ok[b["member"]].mean())
    assert r.train_acc["non-members"] == pytest.approx(ok[~b["member"]].mean())
    assert r.train_acc["members"] > r.train_acc["non-members"] + 0.2          # memorised (measured 0.68 vs 0.25)
    doc_loss = _cross_entropy(b["z0"], b["y"]).reshape(-1, b["cfg"].questions).mean(1)
    np.testing.assert_allclose(r.doc_loss, doc_loss, rtol=1e-9)
    threshold = doc_loss[b["member"]].mean()                 # mean training loss (equal questions per document)
    assert m["acc_loss"] == pytest.approx(np.mean((doc_loss < threshold) == b["member"]))


def test_boxes_single_question_auc_and_decisions_match_their_rebuild(default_result, rebuilt):
    """The per-question distance boxes (members vs non-members), the single-question AUC (sklearn, score −Δ₁), the
    last point of AUC-vs-questions (all Q questions: the document AUC), the white-box decisions (sklearn's KMeans on
    the standardised descriptors, member cluster = smaller mean Δ̄) and the black-box accuracy from the proxy's
    own features."""
    r, m, b = default_result, default_result.metrics, rebuilt
    mem, d = b["member"], b["dist"]
    np.testing.assert_allclose(r.delta_pairs_member, d[mem].ravel(), rtol=1e-9)
    np.testing.assert_allclose(r.delta_pairs_nonmember, d[~mem].ravel(), rtol=1e-9)
    assert m["auc_single"] == pytest.approx(roc_auc_score(mem, -d[:, 0]), abs=1e-12)
    assert len(r.auc_vs_q) == len(r.q_values) == b["cfg"].questions
    assert list(r.q_values) == list(range(1, b["cfg"].questions + 1))
    assert r.auc_vs_q[-1] == pytest.approx(m["auc_white"], abs=1e-12)
    X = r.desc_white
    lab = KMeans(2, n_init=10, random_state=0).fit((X - X.mean(0)) / X.std(0)).labels_
    dbar = d.mean(1)
    member_cluster = int(np.argmin([dbar[lab == c].mean() for c in (0, 1)]))
    assert np.mean(r.pred_white == (lab == member_cluster)) > 0.99
    assert m["acc_white"] == pytest.approx(np.mean(r.pred_white == mem))
    pdesc, pdbar = eng.descriptors(b["psteps"].ravel(), b["pdist"].ravel(), len(mem), b["cfg"].questions,
                                   b["cfg"].max_steps)
    Xp = pdesc
    plab = KMeans(2, n_init=10, random_state=0).fit((Xp - Xp.mean(0)) / Xp.std(0)).labels_
    pc = int(np.argmin([pdbar[plab == c].mean() for c in (0, 1)]))
    assert m["acc_black"] == pytest.approx(np.mean((plab == pc) == mem), abs=0.01)
    assert m["acc_black"] != m["acc_white"]                   # measured 0.79 vs 0.86 at the default


def test_chance_bars_in_the_run_are_for_the_whole_candidate_set(default_result):
    n = eng.Config().n_docs
    m = default_result.metrics
    assert m["acc_chance_bar"] == pytest.approx(0.5 + 3 * 0.5 / math.sqrt(n))
    assert m["auc_chance_bar"] == pytest.approx(eng.auc_chance_bar(n // 2, n // 2))


@pytest.mark.parametrize("epochs", [2, 4])
def test_epoch_curve_points_are_targets_trained_that_long(default_result, epochs):
    """The AUC-vs-epochs curve attacks snapshots 2, 4, 8, 16 of the default run; a snapshot after e epochs is the
    target a fresh run with epochs = e trains (same seed, same mini-batch order), so its AUC is that run's."""
    r = default_result
    assert list(r.epoch_values) == [2, 4, 8, 16]
    i = list(r.epoch_values).index(epochs)
    assert r.auc_vs_epochs[i] == pytest.approx(eng.run(eng.Config(epochs=epochs)).metrics["auc_white"], abs=1e-12)
    assert r.metrics["auc_epoch_first"] == r.auc_vs_epochs[0] and r.auc_vs_epochs[-1] == r.metrics["auc_white"]


def test_documents_have_distinct_fields_and_half_are_members():
    rng = np.random.default_rng(5)
    values, ocr, emb, fields, member = eng.make_documents(rng, 300, 0.7, 6)
    assert member.sum() == 150
    assert all(len(set(row)) == 6 for row in fields.tolist())
    # the OCR reads a field right with probability p_read, or by luck 1/VOCAB
    assert np.mean(ocr == values) == pytest.approx(0.7 + 0.3 / eng.VOCAB, abs=0.02)


def test_sweep_estimate_counts_the_points_the_sweep_runs(sweep_200):
    """sweep_seconds prices every point the sweep trains: the target on its training set and the proxy on all
    candidates (pair-epochs), and both attacks on all candidates (pair-steps at the step cap)."""
    c = eng.Config(n_docs=200)
    n_mem = c.n_docs // 2
    train = list(sweep_200.train_docs) + [n_mem] * len(sweep_200.wd_values)
    assert sweep_200.train_docs[0] == n_mem and len(sweep_200.wd_values) == len(eng.WD_SWEEP)
    pair_epochs = c.questions * c.epochs * (sum(train) + c.n_docs * len(train))
    pair_steps = 2 * c.n_docs * c.questions * c.max_steps * len(train)
    assert eng.sweep_seconds(c) == pytest.approx(eng.SWEEP_SEC_PER_PAIR_EPOCH * pair_epochs
                                                 + eng.SWEEP_SEC_PER_PAIR_STEP * pair_steps, rel=1e-12)
    assert eng.sweep_seconds(eng.Config()) <= eng.SWEEP_MAX_SECONDS


def test_sweep_over_its_time_limit_is_refused_before_any_training(monkeypatch):
    """At the largest settings the sweeps would take minutes (88 s measured at HEAVY_CONFIG): refused with the
    estimate and what to lower, before any model is built."""
    from engine.core import InputError

    monkeypatch.setattr(eng, "make_documents", lambda *a, **k: pytest.fail("the refused sweep started working"))
    assert eng.sweep_seconds(eng.HEAVY_CONFIG) > eng.SWEEP_MAX_SECONDS
    with pytest.raises(InputError, match=r"about \d+ s \(limit 25 s.*Lower the training epochs"):
        eng.sweep(eng.HEAVY_CONFIG)


def test_sweep_summary_numbers_are_read_off_the_plotted_curves(sweep_200):
    """The sweep badges' details and the caption quote drops from the plotted curves: first point minus last."""
    sr = sweep_200
    m = sr.metrics
    for key, curve, name in (("size_drop", sr.auc_size, "white-box DocMIA"), ("wd_drop", sr.auc_wd, "white-box DocMIA")):
        assert m[f"{key}_white"] == pytest.approx(curve[name][0] - curve[name][-1], abs=1e-12)
    for key, curve in (("size_drop", sr.auc_size), ("wd_drop", sr.auc_wd)):
        assert m[f"{key}_black"] == pytest.approx(curve["black-box DocMIA (proxy)"][0]
                                                  - curve["black-box DocMIA (proxy)"][-1], abs=1e-12)
        assert m[f"{key}_loss"] == pytest.approx(curve["loss threshold"][0] - curve["loss threshold"][-1], abs=1e-12)
    assert m["largest_train_docs"] == sr.train_docs[-1]
    assert m["auc_white_largest_wd"] == sr.auc_wd["white-box DocMIA"][-1]


def test_page_sweeps_toggle_is_part_of_the_shared_link(default_result, sweep_200):
    """The sweeps are a view setting bound to the URL: a link with sweeps=true opens with the two sweep charts and
    their claims, and a link without it opens without them and writes sweeps=false back."""
    from components import runner

    runner.result_store().put(runner.cache_key("engine.docvqa_mia", eng.Config(n_docs=200), fn="sweep"), sweep_200)
    at = open_page("docvqa_mia", {"n_docs": "200", "sweeps": "true"})
    assert at.query_params["sweeps"] in ("true", ["true"])
    figs = figures(at)
    assert {"auc_size", "auc_wd"} <= set(figs)
    np.testing.assert_allclose(values(figs["auc_size"]["data"][0]["y"]), next(iter(sweep_200.auc_size.values())))
    assert "Claims of the sweeps" in [h.value for h in at.subheader]

    off = open_page("docvqa_mia", seed=(("engine.docvqa_mia", eng.Config(), default_result),))
    assert not {"auc_size", "auc_wd"} & set(figures(off)) and "Claims of the sweeps" not in [h.value for h in off.subheader]
    assert off.query_params["sweeps"] in ("false", ["false"])


def test_page_with_a_refused_sweep_says_so_and_draws_the_rest():
    """A link with the sweeps on at settings over their time limit: the refusal is shown, the page goes on (the
    how-it-works section is still drawn) and no sweep chart appears."""
    at = open_page("docvqa_mia", {"n_docs": "700", "epochs": "4", "questions": "8", "max_steps": "1000",
                                  "attack_lr": "0.01", "sweeps": "true"})
    errors = [e.value for e in at.error]
    assert any("would take about" in e and "Lower the training epochs" in e for e in errors), errors
    assert not {"auc_size", "auc_wd"} & set(figures(at))
    assert any("How it works" in (x.label or "") for x in at.expander), [x.label for x in at.expander]


# ----------------------------------------------------------------------------- what the page draws and quotes


def test_page_scatter_roc_box_and_headline_follow_the_result(default_result):
    """Default page: each ROC line's area (trapezoids over its own points) is the AUC in its legend and in the
    headline; the scatter puts members and non-members under their names with ● for a predicted member and × for a
    predicted non-member; the box labelled members holds the members' per-question distances."""

    r = default_result
    at = open_page("docvqa_mia", seed=(("engine.docvqa_mia", eng.Config(), default_result),))
    figs = figures(at)

    area = {}
    for d in figs["roc"]["data"]:
        if d["name"] == "chance":
            continue
        x, y = values(d["x"]), values(d["y"])
        name = d["name"].rsplit(" (AUC ", 1)[0]
        area[name] = float(np.sum(np.diff(x) * (y[1:] + y[:-1]) / 2))
        assert d["name"] == f"{name} (AUC {area[name]:.2f})"
    assert set(area) == set(r.auc)
    info = " ".join(el.value for el in at.info)
    loss, white, black = (area[k] for k in ("loss threshold (document mean)", "white-box DocMIA",
                                             "black-box DocMIA (proxy)"))
    assert f"(AUC {loss:.3f}, vs {white:.3f} white-box and {black:.3f} black-box)" in info

    # one trace per (truth, call): colour the truth, symbol the call, and every point exactly once
    pts = {d["name"]: d for d in figs["scatter"]["data"]}
    assert len(pts) == 4
    for name, truth in (("member", r.membership), ("non-member", ~r.membership)):
        for called, symbol in ((True, "circle"), (False, "x")):
            sel = truth & (r.pred_white == called)
            d = pts[f"{name}, called {'member' if called else 'non-member'} ({int(sel.sum())})"]
            np.testing.assert_allclose(values(d["x"]), r.desc_white[sel, 0])
            np.testing.assert_allclose(values(d["y"]), r.desc_white[sel, 1])
            assert d["marker"]["symbol"] == symbol
    assert sum(len(values(d["x"])) for d in pts.values()) == len(r.membership)

    boxes = {d["name"]: values(d["y"]) for d in figs["box"]["data"]}
    np.testing.assert_allclose(boxes["members"], r.delta_pairs_member)
    np.testing.assert_allclose(boxes["non-members"], r.delta_pairs_nonmember)


# ---- added by mutation testing (2026-12-07): each kills a mutant the file above let through ----

def test_weight_decay_widget_reaches_the_target(sweep_200):
    """The weight-decay widget: run() with weight decay w trains the same target as the sweep's weight-decay
    point w (same documents, initial weights and mini-batches, no extra training documents), so every AUC
    equals that point's; and a strong decay changes the AUCs (the 200-document sweep measures white-box 0.98
    at no decay, 0.88 at 1.0), so a run that ignored the widget would show."""
    i = list(eng.WD_SWEEP).index(1.0)
    m = eng.run(eng.Config(n_docs=200, weight_decay=1.0)).metrics
    assert m["auc_white"] == pytest.approx(sweep_200.auc_wd["white-box DocMIA"][i], abs=1e-12)
    assert m["auc_loss"] == pytest.approx(sweep_200.auc_wd["loss threshold"][i], abs=1e-12)
    assert m["auc_black"] == pytest.approx(sweep_200.auc_wd["black-box DocMIA (proxy)"][i], abs=1e-12)
    assert abs(sweep_200.auc_wd["white-box DocMIA"][0] - m["auc_white"]) > 0.05


@pytest.mark.parametrize("features, col", [("distance", 0), ("steps", 1)])
def test_single_feature_choice_splits_on_that_feature(features, col):
    """The 'Features' widget: 2-means on one standardised feature is a threshold on that feature, so the
    documents called members and those called non-members are separated by it (column 0 = log(Δ̄ + ε), column
    1 = s̄ of the descriptor). The other feature does not separate them (checked, so the test tells the
    columns apart)."""
    r = eng.run(eng.Config(n_docs=200, features=features))
    pred = r.pred_white
    assert 0 < pred.sum() < len(pred)

    def separated(x):
        return x[pred].max() < x[~pred].min() or x[pred].min() > x[~pred].max()

    assert separated(r.desc_white[:, col])
    assert not separated(r.desc_white[:, 1 - col])


def test_headline_box_says_so_when_no_attack_beats_chance(default_result):
    """With every AUC within the chance bar (e.g. an untrained target), the box says there is no membership signal
    rather than 'DocMIA beats the loss threshold'; the box plot's title quotes the single-question AUC."""
    import copy

    r = copy.deepcopy(default_result)
    r.metrics.update(auc_white=0.511, auc_black=0.49, auc_loss=0.464, auc_chance_bar=0.56,
                     white_minus_loss_or_chance=0.511 - 0.56, black_minus_loss_or_chance=0.49 - 0.56)
    at = open_page("docvqa_mia", seed=(("engine.docvqa_mia", eng.Config(), r),))
    box = next(i.value for i in at.info if "loss threshold" in i.value or "membership signal" in i.value)
    assert box.startswith("**No membership signal on this run:**") and "DocMIA beats" not in box
    at = open_page("docvqa_mia", seed=(("engine.docvqa_mia", eng.Config(), default_result),))
    titles = [c.proto.spec for c in at.get("plotly_chart")]
    assert any(f"one question alone: AUC {default_result.metrics['auc_single']:.3f}" in t for t in titles)
