"""CalNF engine: claims at the default config and checks against independent computations."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from engine import calnf as eng
from tests.pagetext import figures, open_page, values


@pytest.fixture(scope="module")
def default_result():
    return eng.run(eng.Config())


def test_how_it_works_auc_note_holds_at_default(default_result):
    """'How it works' says CalNF's and the plain flow's anomaly scores both reach AUC ≈ 1.00 at the defaults (so the
    detection badge does not show CalNF detecting better)."""
    m = default_result.metrics
    assert round(m["auc"], 2) == 1.0 and round(m["auc_plain"], 2) == 1.0, (m["auc"], m["auc_plain"])


def test_claims_pass_at_default(default_result):
    claims = eng.claims(default_result)
    assert len(claims) == 6
    failed = [c.describe() for c in claims if not c.passed]
    assert not failed, failed


def test_vs_failure_only_is_measured_on_the_same_held_out_points(default_result):
    """The badge's number is the difference of two clipped means over the same 2000 held-out failure points,
    recomputed here from the per-method metrics, and it is not a typed-in constant."""
    m = default_result.metrics
    (vs_fail,) = [c for c in eng.claims(default_result) if c.label == eng.VS_FAILURE_ONLY_LABEL]
    assert vs_fail.measured == pytest.approx(m["held_fail_clip_calnf"] - m["held_fail_clip_failure_only"])
    assert m["held_fail_clip_calnf"] >= m["held_fail_calnf"] and m["held_fail_clip_failure_only"] >= eng.CLIP_LL


def test_optimiser_settings_are_the_authors():
    """BayesAir scripts/two_moons/train.py: --lr 1e-3 with StepLR gamma 1 (constant), --regularization-weight 1
    for the --balance KL between subsample fits, --n-divergence-particles 100."""
    assert eng.FLOW_LR == 1e-3 and not eng.COSINE
    assert eng.BALANCE_WEIGHT == 1.0 and eng.KL_SAMPLES == 100


def _random_flow(K=3, seed=0, scale=0.3):
    torch.manual_seed(seed)
    flow = eng._build_flow(K).double()
    with torch.no_grad():
        for p in flow.parameters():
            p.add_(scale * torch.randn_like(p))
    return flow


def test_log_prob_matches_autograd_jacobian():
    flow = _random_flow()
    c = torch.tensor([[0.2, -0.5, 1.0]], dtype=torch.float64)
    x = torch.randn(5, 2, dtype=torch.float64)
    lp = flow.log_prob(x, c.expand(5, 3))
    for i in range(5):
        J = torch.autograd.functional.jacobian(lambda v: flow.forward_map(v[None], c)[0][0], x[i])
        z = flow.forward_map(x[i:i + 1], c)[0][0]
        z = z.detach()
        ref = -0.5 * float(z @ z) - math.log(2 * math.pi) + math.log(abs(float(torch.linalg.det(J))))
        assert abs(float(lp[i].detach()) - ref) < 1e-8


def test_inverse_and_normalisation():
    flow = _random_flow(seed=1, scale=0.1)
    c = torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64)
    x = torch.randn(200, 2, dtype=torch.float64)
    z, _ = flow.forward_map(x, c.expand(200, 3))
    xr = z
    for layer in reversed(flow.layers):
        xr = layer.inverse(xr, c.expand(200, 3))
    assert torch.max(torch.abs(xr - x)) < 1e-5
    g = torch.linspace(-12, 12, 800, dtype=torch.float64)  # wide box: the perturbed flow has heavy tails
    gx, gy = torch.meshgrid(g, g, indexing="xy")
    pts = torch.stack([gx.ravel(), gy.ravel()], 1)
    with torch.no_grad():
        mass = float(torch.exp(flow.log_prob(pts, c.expand(len(pts), 3))).sum()) * float(g[1] - g[0]) ** 2
    assert abs(mass - 1.0) < 0.01


def test_identity_at_initialisation():
    torch.manual_seed(0)
    flow = eng._build_flow(4)
    x = torch.randn(50, 2)
    ref = torch.distributions.MultivariateNormal(torch.zeros(2), torch.eye(2)).log_prob(x)
    assert torch.allclose(flow.log_prob(x, torch.rand(50, 4)), ref, atol=1e-6)


def test_data_generator_against_fresh_formulas():
    rng = np.random.default_rng(0)
    nom = eng.two_moons(rng, 200_000, False)
    fail = eng.two_moons(rng, 200_000, True)
    assert np.allclose(nom.mean(0), [-0.5, 2 / math.pi - 0.25], atol=0.01)
    assert np.allclose(fail.mean(0), [0.5, 0.25 - 2 / math.pi], atol=0.01)
    # same draws: the failure moon is the nominal moon rotated by pi about the midpoint (0, 0)
    a = eng.two_moons(np.random.default_rng(5), 1000, True)
    b = eng.two_moons(np.random.default_rng(5), 1000, False)
    r = np.random.default_rng(5)
    r.uniform(0.0, math.pi, 1000)
    noise = 0.1 * r.standard_normal((1000, 2))
    assert np.allclose(a + b, 2 * noise)


def test_subsets_are_bootstrap_resamples():
    """K resamples of n indices drawn with replacement: each in range, of size n, and the share of distinct points
    matches the bootstrap's 1 - (1 - 1/n)^n."""
    rng = np.random.default_rng(0)
    for n, K in ((20, 5), (7, 3), (4, 2)):
        subs = eng.make_subsets(rng, n, K)
        assert len(subs) == K and all(len(s) == n and s.min() >= 0 and s.max() < n for s in subs)
    n = 20
    share = np.mean([len(np.unique(s)) / n for _ in range(400) for s in eng.make_subsets(rng, n, 5)])
    assert share == pytest.approx(1 - (1 - 1 / n) ** n, abs=0.01)


def test_self_regularisation_pulls_subsample_fits_together():
    """The KL term between two random subsample labels (the authors' --balance) makes the resample fits closer
    to one another than without it, everything else equal; measured by an independent Monte-Carlo KL."""
    from engine.core.nn import set_cpu_threads

    set_cpu_threads()
    K, n_fail, steps = 3, 12, 120
    r = np.random.default_rng(7)
    nom, fail = eng.two_moons(r, eng.N_NOMINAL, False), eng.two_moons(r, n_fail, True)
    subs = eng.make_subsets(r, n_fail, K)
    eye = torch.eye(K)
    spread = {}
    for w in (0.0, 1.0):
        old = eng.BALANCE_WEIGHT
        try:
            eng.BALANCE_WEIGHT = w
            flow, _, _ = eng.train("calnf", nom, fail, K, steps, 0, "cpu", subsets=subs)
        finally:
            eng.BALANCE_WEIGHT = old
        with torch.no_grad():
            spread[w] = np.mean([float(eng.kl_mc(flow, eye[a:a + 1], eye[b:b + 1], 4000,
                                                 torch.Generator().manual_seed(11))[0])
                                 for a in range(K) for b in range(K) if a != b])
    assert spread[1.0] < spread[0.0]


def test_kl_estimator_matches_gaussian_closed_form():
    """Conditioners that ignore x make every layer an affine map of its coordinate, so each q(.; c) is a
    diagonal Gaussian; its mean and std follow from f(0) and f(e_d) - f(0). MC KL vs the closed form."""
    torch.manual_seed(3)
    flow = eng._build_flow(1).double()
    with torch.no_grad():
        for layer in flow.layers:
            for p in layer.net.parameters():
                p.copy_(0.8 * torch.randn_like(p))
            layer.net[0].weight[:, 0] = 0.0  # no dependence on the other coordinate

    def gaussian(c):
        f0 = flow.forward_map(torch.zeros(1, 2, dtype=torch.float64), c)[0][0]
        scale = flow.forward_map(torch.eye(2, dtype=torch.float64), c.expand(2, 1))[0].diagonal() - f0
        return -f0 / scale, 1.0 / scale.abs()

    c1 = torch.ones(1, 1, dtype=torch.float64)
    c0 = torch.zeros(1, 1, dtype=torch.float64)
    with torch.no_grad():
        m1, s1 = gaussian(c1)
        m0, s0 = gaussian(c0)
        kl = float((torch.log(s0 / s1) + (s1**2 + (m1 - m0) ** 2) / (2 * s0**2) - 0.5).sum())
        est, terms = eng.kl_mc(flow, c1, c0, 20000, torch.Generator().manual_seed(0))
    se = float(terms.std()) / math.sqrt(20000)
    assert kl > 0.05
    assert abs(float(est) - kl) < 3 * se + 1e-9


def test_roc_matches_sklearn():
    from sklearn.metrics import roc_auc_score, roc_curve

    rng = np.random.default_rng(0)
    for n, ties in ((50, False), (200, True), (7, True)):
        y = np.r_[np.ones(n), np.zeros(n)]
        s = rng.normal(size=2 * n) + 0.8 * y
        if ties:
            s = np.round(s, 1)
        fpr, tpr, auc = eng.roc(y, s)
        f_sk, t_sk, _ = roc_curve(y, s)
        np.testing.assert_allclose(fpr, f_sk, atol=1e-12)
        np.testing.assert_allclose(tpr, t_sk, atol=1e-12)
        assert auc == pytest.approx(roc_auc_score(y, s), abs=1e-12)


def test_energy_distance_matches_scipy_cdist():
    from scipy.spatial.distance import cdist

    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(300, 2)), rng.normal(size=(200, 2)) + [0.5, -0.2]
    ref = 2 * cdist(a, b).mean() - cdist(a, a).mean() - cdist(b, b).mean()
    assert eng.energy_distance(a, b) == pytest.approx(ref, rel=1e-10, abs=1e-12)
    assert eng.energy_distance(a, a) == pytest.approx(0.0, abs=1e-12)


def test_stacked_flows_match_the_module_flow():
    """The flat-parameter batch of E flows computes each flow's own log q(x; c), and unstacks to it."""
    import torch

    torch.manual_seed(3)
    K = 4
    flow = eng._build_flow(K)
    with torch.no_grad():
        for p in flow.parameters():
            p.normal_(0, 0.3)
    theta, views = eng._stack_flows(flow, 3)
    with torch.no_grad():
        theta[1] += 0.05 * torch.randn_like(theta[1])
    x, c = torch.randn(3, 40, 2), torch.rand(3, 40, K)
    lp = eng._stacked_log_prob(views(theta), x, c)
    for e in range(3):
        f_e = eng._unstack_flow(views(theta.detach()), e, K)
        with torch.no_grad():
            np.testing.assert_allclose(lp[e].detach().numpy(), f_e.log_prob(x[e], c[e]).numpy(), rtol=1e-5,
                                       atol=1e-5)
    with torch.no_grad():
        np.testing.assert_allclose(lp[0].numpy(), flow.log_prob(x[0], c[0]).numpy(), rtol=1e-5, atol=1e-5)


def _random_stacked_flows(K, E, seed, scale):
    """E flows with N(0, scale^2) weights (far from the identity they start at), and their stacked parameters."""
    torch.manual_seed(seed)
    flows = [eng._build_flow(K) for _ in range(E)]
    for f in flows:
        with torch.no_grad():
            for p in f.parameters():
                p.normal_(0, scale)
    return (flows, *eng._stack_flows(flows))


def test_stacked_inverse_matches_module_sample():
    """The batched base -> data map and its log-density by-product agree with Flow.sample / Flow.log_prob."""
    K = 3
    flows, theta, views = _random_stacked_flows(K, 2, seed=4, scale=0.3)
    z = torch.randn(2, 64, 2)
    c = torch.rand(2, 1, K).expand(2, 64, K)
    with torch.no_grad():
        x, lp = eng._stacked_inverse(views(theta), z, c)
        for e, f in enumerate(flows):
            xr = z[e]
            for layer in reversed(f.layers):
                xr = layer.inverse(xr, c[e])
            np.testing.assert_allclose(x[e].numpy(), xr.numpy(), rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(lp[e].numpy(), f.log_prob(xr, c[e]).numpy(), rtol=1e-4, atol=1e-4)


def test_label_gradient_matches_autograd():
    """The hand-written reverse pass used by calibration gives autograd's d/dc of sum_e mean_i log q(x; c_e)."""
    K = 4
    _, theta, views = _random_stacked_flows(K, 3, seed=5, scale=0.4)
    P = views(theta.detach())
    x = (2.0 * torch.randn(3, 7, 2, dtype=torch.float64)).float()
    c = torch.rand(3, 1, K, requires_grad=True)
    lp = eng._log_prob_xy(P, x.split(1, -1), eng._label_part(P, c)).mean(1).sum()
    (g_auto,) = torch.autograd.grad(lp, [c])
    g = eng._label_grad(P, x.split(1, -1), c.detach())
    assert g.shape == (3, K)
    assert float(g_auto.abs().max()) > 1e-2  # a gradient worth comparing
    np.testing.assert_allclose(g.numpy(), g_auto[:, 0].numpy(), rtol=1e-4, atol=1e-4 * float(g_auto.abs().max()))
    # and a finite difference of the same objective in one label coordinate, in float64
    P64 = [[w.double() for w in grp] for grp in P]
    x64 = [v.double() for v in x.split(1, -1)]

    def obj(cc):
        return float(eng._log_prob_xy(P64, x64, eng._label_part(P64, cc)).mean(1).sum())

    c64, h = c.detach().double(), 1e-6
    dc = torch.zeros_like(c64)
    dc[1, 0, 2] = h
    fd = (obj(c64 + dc) - obj(c64 - dc)) / (2 * h)
    assert abs(fd - float(g[1, 2])) <= 1e-3 * max(1.0, abs(fd))


def test_batched_training_matches_one_by_one_train():
    """train_stacked (used by run, also for 'compare all' with β-NF) against the reference train(), one flow
    at a time: every method, two data sets and three seeds in one batched pass, a few steps each."""
    from engine.core.nn import set_cpu_threads

    set_cpu_threads()  # as run() does: tiny tensors, one thread
    steps, K, n_fail = 12, 4, 12
    data = []
    for s in range(2):
        r = np.random.default_rng(50 + s)
        data.append((eng.two_moons(r, eng.N_NOMINAL, False), eng.two_moons(r, n_fail, True),
                     eng.make_subsets(r, n_fail, K)))
    spec = [("betanf", 0, 3), ("calnf", 0, 3), ("plain", 1, 5), ("betanf", 1, 5), ("failure_only", 1, 5),
            ("calnf", 1, 7), ("pooled", 0, 3)]
    jobs = [eng.Job(m, *data[d], seed) for m, d, seed in spec]
    out = eng.train_stacked(jobs, K, steps, "cpu", cal_lr=0.02, beta=1.0)
    x = torch.randn(200, 2, generator=torch.Generator().manual_seed(0))
    for job, (flow, lab, _) in zip(jobs, out):
        ref, ref_lab, _ = eng.train(job.method, job.nominal, job.failure, K, steps, job.seed, "cpu", cal_lr=0.02,
                                    beta=1.0, subsets=job.subsets)
        np.testing.assert_allclose(lab.numpy(), ref_lab.numpy(), atol=1e-5)
        with torch.no_grad():
            for p, q in zip(flow.parameters(), ref.parameters()):
                np.testing.assert_allclose(p.numpy(), q.numpy(), atol=2e-5, err_msg=job.method)
            for c in (lab, torch.zeros(1, K)):
                np.testing.assert_allclose(flow.log_prob(x, c.expand(200, K)).numpy(),
                                           ref.log_prob(x, c.expand(200, K)).numpy(), rtol=1e-5, atol=1e-4)
        # the flows really trained (different seeds and methods end up different)
        assert float(flow.layers[0].net[-1].weight.detach().abs().max()) > 1e-3


def test_the_earlier_recipe_makes_the_failure_comparison_a_coin_toss(monkeypatch):
    """The page's 'why the learning rate matters': with the earlier recipe (lr 1e-2, cosine decay, no KL term) the
    CalNF − failures-only held-out LL swings in sign and by over a nat across seeds 0-2 (measured +0.73, +0.15,
    −1.42 on an x86_64 AVX512_SPR CPU; +0.73, +0.48, −1.34 on the page's first machine, as the page says: overfitting
    runs amplify float rounding)."""
    monkeypatch.setattr(eng, "FLOW_LR", 1e-2)
    monkeypatch.setattr(eng, "COSINE", True)
    monkeypatch.setattr(eng, "BALANCE_WEIGHT", 0.0)
    gaps = [eng.run(eng.Config(seed=s)).metrics["vs_failure_only"] for s in range(3)]
    assert gaps[0] > 0.3 and gaps[1] > 0.1 and gaps[2] < -0.8 and max(gaps) - min(gaps) > 1.0, gaps


@pytest.mark.parametrize("seed", [1, 2])
def test_nominal_badge_fails_at_the_seeds_the_page_names(seed):
    """The page: at 300 steps CalNF's nominal model is still behind the plain flow's, at seeds 1 and 2 by more than
    the first badge allows (stored by the seed survey: 0.33 and 0.19 nats against a 0.15 bar)."""
    label = "|nominal LL(CalNF) − nominal LL(plain flow)| (nats)"
    c = next(c for c in eng.claims(eng.run(eng.Config(seed=seed))) if c.label == label)
    assert not c.passed and c.measured > 0.15, c.describe()


def test_work_estimate_admits_the_largest_setting_and_refuses_the_worst_with_a_working_suggestion():
    """'Compare all' at 750 steps (default data) fits the work limit; the spec's 1 000 steps do not (they took
    27–34 s on the machine the estimate was refitted on) and, like the largest failure set and K, are refused with
    a step count that then fits; the single run at its widest data is refused the same way."""
    import re
    assert eng.HEAVY_CONFIG.compare_all and eng.HEAVY_CONFIG.steps == 750
    assert eng.estimated_seconds(eng.HEAVY_CONFIG) <= eng.WORK_LIMIT_S
    for kw, most in ((dict(compare_all=True, steps=1000), 750), (dict(compare_all=True, steps=1000, n_failure=200, K=10), 999),
                     (dict(steps=1000, n_failure=200, K=10), 999)):
        with pytest.raises(ValueError, match="use at most") as err:
            eng.Config(**kw)
        fits = int(re.search(r"at most (\d+) steps", str(err.value)).group(1))
        assert 100 <= fits <= most and fits == eng.most_steps(SimpleNamespace(**{**vars(eng.Config()), **kw}))
        eng.Config(**{**kw, "steps": fits})  # accepted
        if fits + 50 <= 1000:
            with pytest.raises(ValueError):
                eng.Config(**{**kw, "steps": fits + 50})   # the suggestion is the largest that fits on the grid
    assert eng.most_steps(eng.Config(), compare_all=True) == 750 and eng.most_steps(eng.Config()) == 1000
    # the page's caption gives the same cap (it is not in the spec, so the page says so)
    at = open_page("calnf")
    assert any("at most 750 training steps" in c.value for c in at.caption), [c.value for c in at.caption]
    # cost grows with every knob the estimate reads
    base = eng.estimated_seconds(eng.Config())
    for kw in (dict(steps=600), dict(n_failure=80), dict(K=9), dict(compare_all=True)):
        assert eng.estimated_seconds(eng.Config(**kw)) > base


def _install_spies(mp):
    """Wrap train_stacked and two_moons so that a run records the flows it trained (``seen``) and every data set it
    drew (``moons``: (n, failure, extra args, points)); the wrappers return the engine's own values."""
    seen, moons = {}, []
    real_train, real_moons = eng.train_stacked, eng.two_moons

    def spy_train(jobs, *a, **kw):
        out = real_train(jobs, *a, **kw)
        seen.update(jobs=jobs, out=out, held_f=kw["held_failure"])
        return out

    def spy_moons(rng, n, failure, *a):
        x = real_moons(rng, n, failure, *a)
        moons.append((n, failure, a, x))
        return x

    mp.setattr(eng, "train_stacked", spy_train)
    mp.setattr(eng, "two_moons", spy_moons)
    return seen, moons


def test_reported_metrics_recomputed_from_the_trained_flow(monkeypatch):
    """The badges' numbers follow their definitions on the flow run() trained: calibration is measured against
    the starting label (1/K, ..., 1/K), the label gain uses clipped means at c* and at c = 0, and the ROC-AUC of
    log q(x; c*) - log q(x; 0) on held-out failure vs nominal points matches scikit-learn."""
    from sklearn.metrics import roc_auc_score

    seen, moons = _install_spies(monkeypatch)
    cfg = eng.Config(steps=100, K=3)
    res = eng.run(cfg)
    m, K = res.metrics, cfg.K
    assert seen["jobs"][0].method == "calnf"
    flow, c_star, _ = seen["out"][0]
    held_f = seen["held_f"]
    (held_n,) = [x for n, f, _, x in moons if n == eng.N_HELDOUT and not f]

    def lp(x, c):
        with torch.no_grad():
            return flow.log_prob(torch.as_tensor(x, dtype=torch.float32), c.expand(len(x), K)).double().numpy()

    c0, cu = torch.zeros(1, K), torch.full((1, K), 1.0 / K)
    np.testing.assert_allclose(res.c_star, c_star.numpy()[0])
    assert m["c_star_shift"] == pytest.approx(float(np.linalg.norm(res.c_star - 1.0 / K)), abs=1e-6)
    assert m["train_fail_cinit"] == pytest.approx(lp(seen["jobs"][0].failure, cu).mean(), abs=1e-4)
    assert m["held_fail_clip_calnf_c0"] == pytest.approx(np.maximum(lp(held_f, c0), eng.CLIP_LL).mean(), abs=1e-4)
    assert m["held_fail_clip_calnf_c0"] >= eng.CLIP_LL
    score = np.r_[lp(held_f, c_star) - lp(held_f, c0), lp(held_n, c_star) - lp(held_n, c0)]
    y = np.r_[np.ones(len(held_f)), np.zeros(len(held_n))]
    assert m["auc"] == pytest.approx(roc_auc_score(y, score), abs=1e-4)
    # the plain conditional flow's own score, log q(x; 1) − log q(x; 0), on the same held-out points
    assert seen["jobs"][1].method == "plain"
    pf, c1 = seen["out"][1][0], torch.ones(1, K)
    score_p = np.r_[_lp(pf, held_f, c1) - _lp(pf, held_f, c0), _lp(pf, held_n, c1) - _lp(pf, held_n, c0)]
    assert m["auc_plain"] == pytest.approx(roc_auc_score(y, score_p), abs=1e-4)
    assert "betanf" not in res.roc_others and "auc_betanf" not in m  # only with "compare all"


def test_compare_all_roc_of_beta_nf_is_its_first_seed_flow(spied_run):
    """With 'compare all' the ROC panel adds β-NF: the flow trained on the page's own data (seed index 0), scored
    with log q(x; 1) − log q(x; 0) like the plain flow; its area matches scikit-learn and the plotted curve."""
    from sklearn.metrics import roc_auc_score

    cfg, res, seen, held_n = spied_run
    (i,) = [i for i, j in enumerate(seen["jobs"]) if j.method == "betanf" and j.failure is seen["jobs"][0].failure]
    flow, K = seen["out"][i][0], cfg.K
    held_f = seen["held_f"]
    c0, c1 = torch.zeros(K), torch.ones(K)
    score = np.r_[_lp(flow, held_f, c1) - _lp(flow, held_f, c0), _lp(flow, held_n, c1) - _lp(flow, held_n, c0)]
    y = np.r_[np.ones(len(held_f)), np.zeros(len(held_n))]
    assert res.metrics["auc_betanf"] == pytest.approx(roc_auc_score(y, score), abs=1e-4)
    fpr, tpr = res.roc_others["betanf"]
    assert fpr[0] == 0 and fpr[-1] == 1 and tpr[-1] == 1
    assert float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2)) == pytest.approx(res.metrics["auc_betanf"], abs=0.01)


# ----------------------------------------------------------------------------- second mutation round
@pytest.fixture(scope="module")
def spied_run():
    """A short 'compare all' run on the shifted geometry (seed 1, K = 4), with every flow, label and data set
    run() used caught by spies that return the engine's own values (so the run is unchanged)."""
    mp = pytest.MonkeyPatch()
    seen, moons = _install_spies(mp)
    try:
        cfg = eng.Config(steps=100, K=4, geometry="shifted", compare_all=True, seed=1)
        res = eng.run(cfg)
    finally:
        mp.undo()
    held_n = [x for n, f, _, x in moons if n == eng.N_HELDOUT and not f]
    assert len(held_n) == 1
    return cfg, res, seen, held_n[0]


def _lp(flow, x, c):
    with torch.no_grad():
        x = torch.as_tensor(np.asarray(x), dtype=torch.float32)
        return flow.log_prob(x, c.reshape(1, -1).float().expand(len(x), -1)).double().numpy()


def _clipped(flow, x, c):
    return float(np.maximum(_lp(flow, x, c), eng.CLIP_LL).mean())


def test_badge_numbers_recomputed_from_each_trained_flow(spied_run):
    """Every held-out failure LL on the page (the four metric tiles and the pooled and nominal badges) is a mean
    over the same held-out points of the flow that method trained, at its own failure label, clipped at −10; the
    calibration gain is measured on the training failure points at c*, and the nominal gap on held-out nominal
    points at c = 0 for both flows."""
    cfg, res, seen, held_n = spied_run
    m, K = res.metrics, cfg.K
    held_f = seen["held_f"]
    by_method = {job.method: out for job, out in zip(seen["jobs"][:4], seen["out"][:4])}
    assert set(by_method) == {"calnf", "plain", "failure_only", "pooled"}
    labels = {"calnf": torch.as_tensor(res.c_star), "plain": torch.ones(K), "failure_only": torch.zeros(K),
              "pooled": torch.zeros(K)}
    clipped = {}
    for meth, (flow, lab, _) in by_method.items():
        np.testing.assert_allclose(lab.numpy()[0], labels[meth].numpy(), atol=1e-6)
        clipped[meth] = _clipped(flow, held_f, labels[meth])
        assert m[f"held_fail_clip_{meth}"] == pytest.approx(clipped[meth], abs=1e-4), meth
        assert m[f"held_fail_{meth}"] == pytest.approx(_lp(flow, held_f, labels[meth]).mean(), abs=1e-4), meth
    assert m["vs_pooled"] == pytest.approx(clipped["calnf"] - clipped["pooled"], abs=2e-4)
    assert m["vs_failure_only"] == pytest.approx(clipped["calnf"] - clipped["failure_only"], abs=2e-4)
    cal, plain = by_method["calnf"][0], by_method["plain"][0]
    fail = seen["jobs"][0].failure
    assert m["train_fail_cstar"] == pytest.approx(_lp(cal, fail, labels["calnf"]).mean(), abs=1e-4)
    assert m["cal_gain"] == pytest.approx(m["train_fail_cstar"] - m["train_fail_cinit"], abs=1e-9)
    nom_cal, nom_plain = _lp(cal, held_n, torch.zeros(K)).mean(), _lp(plain, held_n, torch.zeros(K)).mean()
    assert m["held_nominal_calnf"] == pytest.approx(nom_cal, abs=1e-4)
    assert m["held_nominal_plain"] == pytest.approx(nom_plain, abs=1e-4)
    assert m["nominal_gap"] == pytest.approx(abs(nom_cal - nom_plain), abs=2e-4)


def test_energy_distances_are_each_methods_samples_against_the_held_out_failures(spied_run):
    """The energy distances on the page: 2 000 samples of each method's trained flow at its own failure label
    (noise from the run's seed), against the first 2 000 held-out failure points, recomputed with scipy; the
    pooled flow, which spreads its mass over the nominal moons too, is the farthest."""
    from scipy.spatial.distance import cdist

    cfg, res, seen, _ = spied_run
    m, held_f = res.metrics, np.asarray(seen["held_f"], dtype=np.float64)[:2000]
    by_method = {job.method: out for job, out in zip(seen["jobs"][:4], seen["out"][:4])}
    for meth, (flow, lab, _) in by_method.items():
        with torch.no_grad():
            x = flow.sample(lab, 2000, torch.Generator().manual_seed(cfg.seed)).double().numpy()
        ref = 2 * cdist(x, held_f).mean() - cdist(x, x).mean() - cdist(held_f, held_f).mean()
        assert m[f"energy_{meth}"] == pytest.approx(ref, rel=1e-6, abs=1e-9), meth
    assert m["energy_pooled"] == max(m[f"energy_{k}"] for k in ("calnf", "plain", "failure_only", "pooled"))


def test_compare_all_bars_are_three_seeds_of_each_method(spied_run):
    """'Compare all': each method's list holds one clipped held-out LL per seed, in seed order; the first is the main
    run's number, the others come from that method's own flows trained on other data sets and from other
    initialisations; the bar is their mean and the error bar their (population) standard deviation."""
    _, res, seen, _ = spied_run
    m, held_f = res.metrics, seen["held_f"]
    assert set(res.compare) == {"calnf", "plain", "betanf", "failure_only", "pooled"}
    jobs_of = {}
    for job, out in zip(seen["jobs"], seen["out"]):
        jobs_of.setdefault(job.method, []).append((job, out))
    for meth, vals in res.compare.items():
        runs = jobs_of[meth]
        assert len(vals) == len(runs) == 3, meth
        want = [_clipped(flow, held_f, lab[0]) for _, (flow, lab, _) in runs]
        np.testing.assert_allclose(vals, want, atol=1e-4, err_msg=meth)
        if meth != "betanf":
            assert vals[0] == pytest.approx(m[f"held_fail_clip_{meth}"], abs=1e-9)
        assert m[f"compare_mean_{meth}"] == pytest.approx(np.mean(want), abs=1e-4)
        assert m[f"compare_sd_{meth}"] == pytest.approx(np.std(want), abs=1e-4)
        # three seeds: three initialisations and three failure sets
        assert len({job.seed for job, _ in runs}) == 3, meth
        fails = [job.failure for job, _ in runs]
        assert not np.allclose(fails[0], fails[1]) and not np.allclose(fails[1], fails[2]), meth


def test_density_heatmaps_are_the_flow_on_the_plotted_grid(spied_run):
    """Heatmap row i, column j is the density at (x = g[j], y = g[i]). Nominal panel: CalNF at c = 0; failure panel:
    CalNF at c*; right panel: the plain flow at its failure label c = 1; family panel (j, k): CalNF at λ_k e_j, so
    its λ = 0 column is the nominal panel."""
    cfg, res, seen, _ = spied_run
    K = cfg.K
    cal, plain = seen["out"][0][0], seen["out"][1][0]
    g = res.grid_x
    np.testing.assert_allclose(g, np.linspace(*eng.LIM, eng.GRID))
    rows, cols = np.meshgrid(np.arange(len(g)), np.arange(len(g)), indexing="ij")
    pts = np.stack([g[cols.ravel()], g[rows.ravel()]], 1)

    def dens(flow, c):
        return np.exp(_lp(flow, pts, c)).reshape(len(g), len(g))

    def close(a, b):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-7 * float(np.max(b)))

    close(res.dens_nominal, dens(cal, torch.zeros(K)))
    close(res.dens_cal, dens(cal, torch.as_tensor(res.c_star)))
    close(res.dens_plain, dens(plain, torch.ones(K)))
    assert res.dens_family.shape == (min(K, 3), len(res.family_lambdas), len(g), len(g))
    np.testing.assert_allclose(res.family_lambdas, np.linspace(0, 1, 5))
    for j in range(res.dens_family.shape[0]):
        for k, lam in enumerate(res.family_lambdas):
            close(res.dens_family[j, k], dens(cal, lam * torch.eye(K)[j]))
    assert not np.allclose(res.dens_family[0, -1], res.dens_nominal, rtol=1e-3)


def test_shifted_geometry_reaches_the_held_out_set_too(spied_run):
    """The 'shifted nominal moon' choice: the failure moon is the nominal moon moved by (+0.5, −0.5), so its mean is
    (−0.5 + 0.5, 2/π − 0.25 − 0.5); both the training failure points and the 2000 held-out ones follow it."""
    cfg, res, seen, _ = spied_run
    a = eng.two_moons(np.random.default_rng(3), 1000, True, "shifted")
    b = eng.two_moons(np.random.default_rng(3), 1000, False)
    np.testing.assert_allclose(a - b, np.tile([0.5, -0.5], (1000, 1)), atol=1e-12)
    big = eng.two_moons(np.random.default_rng(4), 200_000, True, "shifted")
    np.testing.assert_allclose(big.mean(0), [0.0, 2 / math.pi - 0.75], atol=0.01)
    held_f = seen["held_f"]
    assert len(held_f) == eng.N_HELDOUT
    np.testing.assert_allclose(held_f.mean(0), [0.0, 2 / math.pi - 0.75], atol=0.06)
    np.testing.assert_allclose(res.held_failure, held_f[:500], atol=1e-6)


def test_plotted_roc_keeps_both_ends_and_its_area(spied_run):
    """The ROC chart is a thinned copy of the full curve: it starts at (0, 0), ends at (1, 1), never decreases, and
    its trapezoid area is the AUC in the chart's title to within the thinning."""
    _, res, _, _ = spied_run
    fpr, tpr = res.roc_fpr, res.roc_tpr
    assert (fpr[0], tpr[0]) == (0.0, 0.0) and (fpr[-1], tpr[-1]) == (1.0, 1.0)
    assert np.all(np.diff(fpr) >= 0) and np.all(np.diff(tpr) >= 0) and len(fpr) <= 200
    area = float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))
    assert area == pytest.approx(res.metrics["auc"], abs=0.01)


def test_training_curves_record_steps_and_clip_only_the_held_out_points(monkeypatch):
    """train_stacked's curves (the page's training-curve chart): points at steps 1, 1 + 25, ... and the last step,
    counted from 1; the held-out curve is the mean of log q clipped at CLIP_LL (raised to −1 here so that the clip
    bites), the training curve the plain mean over the training failure points; both at the flow's final label."""
    from engine.core.nn import set_cpu_threads

    set_cpu_threads()
    monkeypatch.setattr(eng, "CLIP_LL", -1.0)
    K, steps = 3, 30
    r = np.random.default_rng(9)
    nom, fail = eng.two_moons(r, eng.N_NOMINAL, False), eng.two_moons(r, 8, True)
    held = eng.two_moons(r, 300, True)
    jobs = [eng.Job("plain", nom, fail, None, 0), eng.Job("failure_only", nom, fail, None, 1)]
    out = eng.train_stacked(jobs, K, steps, "cpu", held_failure=held, track_every=10)
    for job, (flow, lab, curves) in zip(jobs, out):
        np.testing.assert_array_equal(curves["steps"], [1, 11, 21, 30])
        lp_held, lp_fail = _lp(flow, held, lab[0]), _lp(flow, fail, lab[0])
        assert np.mean(lp_held < -1.0) > 0.05  # the clip matters for this check
        assert curves["held"][-1] == pytest.approx(np.maximum(lp_held, -1.0).mean(), abs=1e-4), job.method
        assert curves["train"][-1] == pytest.approx(lp_fail.mean(), abs=1e-4), job.method
        assert len(curves["held"]) == len(curves["train"]) == 4


def test_page_curves_are_each_methods_own_tracked_curves(spied_run):
    """The training-curve chart and its download: per method, the held-out (clipped) and training curves that its
    own flow recorded, at steps 1, 26, 51, 76 and the last (100), and nothing for the untracked 'compare all'
    flows."""
    cfg, res, seen, _ = spied_run
    np.testing.assert_array_equal(res.curve_steps, [1, 26, 51, 76, 100])
    for job, (_, _, curves) in zip(seen["jobs"][:4], seen["out"][:4]):
        np.testing.assert_array_equal(res.curves[job.method], curves["held"])
        np.testing.assert_array_equal(res.curves_train[job.method], curves["train"])
        assert len(curves["held"]) == len(res.curve_steps)
    assert not np.allclose(res.curves["calnf"], res.curves_train["calnf"])
    assert all(len(out[2]["held"]) == 0 for out in seen["out"][4:])


# ----------------------------------------------------------------------------- what the page draws and quotes
NAMES = {"calnf": "CalNF q(·; c*)", "plain": "plain conditional flow", "failure_only": "failure points only",
         "pooled": "all points pooled"}


@pytest.fixture(scope="module")
def default_page(default_result):
    return open_page("calnf", seed=(("engine.calnf", eng.Config(), default_result),))


def test_page_headline_names_the_methods_that_beat_calnf(default_page, default_result):
    at, m = default_page, default_result.metrics
    tiles = {t.label: t.value for t in at.metric}
    for k, name in NAMES.items():
        assert float(tiles[name]) == pytest.approx(m[f"held_fail_clip_{k}"], abs=0.006), k
    ahead = [NAMES[k] for k in ("plain", "failure_only", "pooled")
             if m[f"held_fail_clip_{k}"] >= m["held_fail_clip_calnf"]]
    said = " ".join(el.value for kind in ("info", "success") for el in at.get(kind))
    if ahead:
        assert f"this run: {', '.join(ahead)} scored at least as high" in said
    else:
        assert "On this run CalNF has the highest held-out failure likelihood" in said
        assert "not reproduced at this scale** on this run" not in said


def test_page_density_roc_and_curve_charts_carry_the_right_arrays(default_page, default_result):
    at, r = default_page, default_result
    figs = figures(at)
    heat = [d for d in figs["dens"]["data"] if d["type"] == "heatmap"]
    for d, want in zip(heat, (r.dens_nominal, r.dens_cal, r.dens_plain), strict=True):
        np.testing.assert_allclose(values(d["z"]), want)
    titles = [a["text"] for a in figs["dens"]["layout"]["annotations"]]
    assert titles[0].startswith("CalNF nominal") and titles[1].startswith("CalNF failure")
    # ROC: false-positive rate on x; its trapezoid area is the AUC the chart's title quotes
    roc = figs["roc"]["data"][0]
    fpr, tpr = values(roc["x"]), values(roc["y"])
    np.testing.assert_allclose(fpr, r.roc_fpr)
    np.testing.assert_allclose(tpr, r.roc_tpr)
    area = float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))
    assert f"(AUC {area:.3f})" in roc["name"]
    # the plain conditional flow's ROC next to it, under its own AUC
    (plain,) = [d for d in figs["roc"]["data"] if d["name"].startswith(NAMES["plain"])]
    np.testing.assert_allclose(values(plain["x"]), r.roc_others["plain"][0])
    np.testing.assert_allclose(values(plain["y"]), r.roc_others["plain"][1])
    assert f"(AUC {r.metrics['auc_plain']:.3f})" in plain["name"]
    # each method's dotted training curve is its training-failure LL, the solid one its held-out LL
    lines = {d["name"]: values(d["y"]) for d in figs["curves"]["data"]}
    for k, v in r.curves.items():
        np.testing.assert_allclose(lines[NAMES[k]], v, err_msg=k)
        if len(r.curves_train.get(k, [])):
            np.testing.assert_allclose(lines[f"{NAMES[k]} (training)"], r.curves_train[k], err_msg=k)


# ---- added by mutation testing (2026-12-07): each kills a mutant the file above let through ----

def test_kl_terms_have_the_specs_direction(monkeypatch):
    """β-NF adds β·KL(q(·; 1) ‖ q(·; 0)) (samples from the failure label 1, scored against the nominal label
    0), CalNF's self-regularisation KL(q(·; e_a) ‖ q(·; e_b)) with a ≠ b one-hot. Checked on the reference
    train() by a spy on kl_mc (train_stacked is tied to train() by
    test_batched_training_matches_one_by_one_train); and the direction is not a symmetric choice."""
    from engine.core.nn import set_cpu_threads

    set_cpu_threads()
    calls = []
    real = eng.kl_mc

    def spy(flow, c_p, c_q, n, generator=None):
        calls.append((c_p.detach().clone(), c_q.detach().clone(), n))
        return real(flow, c_p, c_q, n, generator)

    monkeypatch.setattr(eng, "kl_mc", spy)
    K, r = 3, np.random.default_rng(2)
    nom, fail = eng.two_moons(r, eng.N_NOMINAL, False), eng.two_moons(r, 8, True)
    flow, _, _ = eng.train("betanf", nom, fail, K, 6, 0, "cpu", beta=1.0)
    assert len(calls) == 6
    for c_p, c_q, n in calls:
        assert torch.equal(c_p.reshape(-1), torch.ones(K)) and torch.equal(c_q.reshape(-1), torch.zeros(K))
        assert n == eng.KL_SAMPLES
    calls.clear()
    eng.train("calnf", nom, fail, K, 6, 0, "cpu", subsets=eng.make_subsets(r, 8, K))
    assert len(calls) == 6
    for c_p, c_q, _ in calls:
        a, b = c_p.reshape(-1), c_q.reshape(-1)
        assert sorted(a.tolist()) == [0.0] * (K - 1) + [1.0] and sorted(b.tolist()) == [0.0] * (K - 1) + [1.0]
        assert not torch.equal(a, b)
    monkeypatch.setattr(eng, "kl_mc", real)
    # the direction matters: for a flow whose labels give different densities the two KLs differ
    torch.manual_seed(3)
    f = eng._build_flow(1).double()
    with torch.no_grad():
        for p in f.parameters():
            p.add_(0.5 * torch.randn_like(p))
    one, zero = torch.ones(1, 1, dtype=torch.float64), torch.zeros(1, 1, dtype=torch.float64)
    with torch.no_grad():
        fwd = float(real(f, one, zero, 20000, torch.Generator().manual_seed(0))[0])
        rev = float(real(f, zero, one, 20000, torch.Generator().manual_seed(0))[0])
    assert abs(fwd - rev) > 0.05, (fwd, rev)


# ---- direct tests (2026-12-07) for mutants caught before only by a pinned number or a failing badge ----

def _perturbed_build(monkeypatch, scale=0.4):
    """Make every flow the engine builds label-dependent from the start (random weights, own generator), so
    that a wrong label or a missing block changes the loss."""
    real = eng._build_flow
    g = torch.Generator().manual_seed(123)

    def build(K):
        flow = real(K)
        with torch.no_grad():
            for p in flow.parameters():
                p.add_(scale * torch.randn(p.shape, generator=g))
        return flow

    monkeypatch.setattr(eng, "_build_flow", build)


def _one_loss(monkeypatch):
    """Replace the training loop by one evaluation of loss_fn(0), no optimiser step; returns the values."""
    import engine.core.nn as core_nn

    got = []

    def fake_loop(params, loss_fn, steps, *a, **kw):
        got.append(float(loss_fn(0).detach()))
        return got

    monkeypatch.setattr(core_nn, "train_loop", fake_loop)
    return got


def _spec_calnf_loss(flow, nom, fail, subsets, K, seed):
    """The spec's flow loss, one row per draw: −mean log q(nominal batch; 0) − (1/K) Σ_j mean_{x∈S_j} log q(x;
    e_j) − 1 · mean_{x∈D_t} log q(x; c*), with c* at its start (1/K, …, 1/K) and the nominal batch the first
    draw of the job's generator (seed + 1)."""
    idx = torch.randint(0, len(nom), (eng.NOMINAL_BATCH,), generator=torch.Generator().manual_seed(seed + 1))
    t = torch.as_tensor
    eye = torch.eye(K)
    with torch.no_grad():
        nom_t, fail_t = t(nom, dtype=torch.float32)[idx], t(fail, dtype=torch.float32)
        terms = [flow.log_prob(nom_t, torch.zeros(len(nom_t), K)).double().mean()]
        terms += [flow.log_prob(fail_t[t(s)], eye[j].expand(len(s), K)).double().mean() / K
                  for j, s in enumerate(subsets)]
        terms += [flow.log_prob(fail_t, torch.full((len(fail_t), K), 1.0 / K)).double().mean()]
    return -float(sum(terms)), [float(x) for x in terms]


def _pieces_matter(flow, fail, subsets, K, terms):
    """Dropping the full-failure term, or labelling every resample e_0, would move the loss by > 1e-2."""
    with torch.no_grad():
        f = torch.as_tensor(fail, dtype=torch.float32)
        e0 = sum(flow.log_prob(f[torch.as_tensor(s)], torch.eye(K)[0].expand(len(s), K)).double().mean() / K
                 for s in subsets)
    assert abs(float(e0) - sum(terms[1:-1])) > 1e-2 and abs(terms[-1]) > 1e-2


@pytest.mark.parametrize("trainer", ["train", "train_stacked"])
def test_calnf_flow_loss_is_the_specs_composition(monkeypatch, trainer):
    """The flow loss (self-regularising KL off, calibration frozen at c* = 1/K), for the reference train() and for
    train_stacked (what run() uses; its calnf rows merge repeated resample draws into one weighted row): nominal
    batch at label 0, resample j at its own one-hot e_j with weight 1/K per resample, and the full failure set at
    c* with weight 1 (the spec's w_cal = 1 calibrated term); recomputed here by hand, one row per draw, from the
    same flow. Each piece matters: the full-failure term and the per-resample labels each shift the loss by far
    more than the float tolerance (checked)."""
    from engine.core.nn import set_cpu_threads

    set_cpu_threads()
    monkeypatch.setattr(eng, "BALANCE_WEIGHT", 0.0)
    _perturbed_build(monkeypatch)
    got = _one_loss(monkeypatch)
    K, n, seed = 3, 10, 4
    r = np.random.default_rng(5)
    nom, fail = eng.two_moons(r, eng.N_NOMINAL, False), eng.two_moons(r, n, True)
    subsets = [r.integers(0, n, n) for _ in range(K)]
    if trainer == "train":
        flow, lab, _ = eng.train("calnf", nom, fail, K, 1, seed, "cpu", cal_lr=0.0, subsets=subsets)
    else:
        (flow, lab, _), = eng.train_stacked([eng.Job("calnf", nom, fail, subsets, seed)], K, 1, "cpu", cal_lr=0.0)
    np.testing.assert_allclose(lab.numpy(), np.full((1, K), 1.0 / K))
    want, terms = _spec_calnf_loss(flow, nom, fail, subsets, K, seed)
    assert got == [pytest.approx(want, rel=1e-5, abs=1e-4)]
    _pieces_matter(flow, fail, subsets, K, terms)


def test_make_subsets_are_k_distinct_resamples_with_replacement():
    """K bootstrap resamples are K independent draws: pairwise different (two equal resamples of 20 indices
    have chance 20^-20), each with repeated points somewhere (a draw without repeats has chance 20!/20^20 ≈
    2e-8), and over many calls every index is drawn about equally often (n·K draws per call)."""
    rng = np.random.default_rng(3)
    n, K = 20, 6
    counts = np.zeros(n)
    for _ in range(50):
        subs = eng.make_subsets(rng, n, K)
        assert len(subs) == K
        for a in range(K):
            assert len(np.unique(subs[a])) < n
            for b in range(a):
                assert not np.array_equal(subs[a], subs[b]), (a, b)
        counts += np.bincount(np.concatenate(subs), minlength=n)
    assert counts.sum() == 50 * n * K
    assert np.abs(counts / counts.mean() - 1).max() < 0.25
