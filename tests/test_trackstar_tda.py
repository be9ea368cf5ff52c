"""TrackStar engine: claims at the default config and checks against independent computations."""

import copy
import math

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from engine import trackstar_tda as eng
from engine.core import InputError
from tests.pagetext import charts, open_page, values


@pytest.fixture(scope="module")
def ckpt():
    return eng.load_checkpoint()


@pytest.fixture(scope="module")
def default_result():
    return eng.run(eng.Config())


# claims that hold at this scale must pass; the others must at least be measured (they are shown as
# "not reproduced" on the page: TrackStar's whitening lowers tail-patch influence here, because a single AdamW step
# is first-order (its gain is the one-sided Adam-scaled gradient dot product, r ~ 0.9 with the measured Δ) and the
# gain is carried by high-loss passages that mention the answer word, whose directions dominate R_train; the
# memorised true sources have small gradients, and a step on them raises log p(answer) little)
REPRODUCED = ("z-score vs random passages", "MRR BM25", "MRR_BM25 − MRR_TrackStar", "concentration ratio",
              "MRR_TrackStar − MRR_grad·grad")



def _whitened_cosines(fq, fp, R):
    """Cosines between query and passage features after whitening by R (damped by 1 % of its mean eigenvalue), in
    numpy: the reference for the engine's torch route."""
    d = R.shape[0]
    R = R + 0.01 * np.trace(R) / d * np.eye(d)
    wv, U = np.linalg.eigh(R)
    Rih = (U / np.sqrt(wv)) @ U.T
    a, b = fq @ Rih, fp @ Rih
    return (a / np.linalg.norm(a, axis=1, keepdims=True)) @ (b / np.linalg.norm(b, axis=1, keepdims=True)).T

def test_claims_at_default(default_result):
    cl = eng.claims(default_result)
    assert len(cl) == 7
    by_label = {c.label: c for c in cl}
    failed = [by_label[k].describe() for k in REPRODUCED if not by_label[k].passed]
    assert not failed, failed
    assert all(math.isfinite(c.measured) for c in cl)


def test_checkpoint_and_optimizer_state(ckpt):
    params, m, v, step, recall = ckpt
    assert step == 3000 and recall >= 0.6
    for n, p in params.items():
        assert v[n].shape == p.shape and m[n].shape == p.shape
        assert torch.all(v[n] >= 0)
    # strictly positive wherever a training passage has a gradient (the "." token never appears as
    # context, so its embedding row never gets one and its second moment stays exactly 0)
    X, Y, M = eng.encode_passages(eng.WORLD)
    G = eng.per_example_grads_fast(params, X, Y, M)
    v_flat = torch.cat([v[k].reshape(-1) for k in params])
    touched = G.abs().amax(0) > 0
    assert torch.all(v_flat[touched] > 0)
    assert touched.float().mean() > 0.95
    from engine.core.nn import asset_path

    assert asset_path(eng.CKPT_NAME).stat().st_size < 2 * 2**20


def test_bm25_hand_computation():
    corpus = [["a", "b"], ["a", "c", "c"], ["a", "d"]]
    k1, b = 1.5, 0.75
    avgdl = 7 / 3
    idf_rare = math.log(2.5 / 1.5)                  # b, c, d: in 1 of 3 docs
    idf_a = math.log(0.5 / 3.5)                     # in every doc: negative, gets the floor
    floor = 0.25 * (idf_a + 3 * idf_rare) / 4

    def tf_part(f, dl):
        return f * (k1 + 1) / (f + k1 * (1 - b + b * dl / avgdl))

    expected = np.array([
        floor * tf_part(1, 2),
        floor * tf_part(1, 3) + idf_rare * tf_part(2, 3),
        floor * tf_part(1, 2),
    ])
    got = eng.bm25_scores(corpus, ["a", "c"])
    assert np.allclose(got, expected, atol=1e-12)
    # the vectorised version used by the page agrees
    ids = {"a": 0, "b": 1, "c": 2, "d": 3}
    mat = eng.bm25_matrix([[ids[w] for w in d] for d in corpus], [[0, 2], [1], [3, 3]], 4)
    for row, q in zip(mat, (["a", "c"], ["b"], ["d", "d"])):
        assert np.allclose(row, eng.bm25_scores(corpus, q), atol=1e-12)
    # ties are broken by passage index
    assert list(eng.rank_desc(np.array([1.0, 2.0, 1.0, 2.0]))) == [1, 3, 0, 2]


def test_bm25_matches_rank_bm25_on_every_query_of_the_world():
    """The spec's reference: rank_bm25's BM25Okapi (same k1, b and IDF floor) on the page's corpus and queries."""
    from rank_bm25 import BM25Okapi

    w = eng.WORLD
    ref = BM25Okapi([[str(t) for t in p] for p in w.passages])
    qs = [q + [int(t)] for q, t in zip(w.queries, w.targets)]
    mat = eng.bm25_matrix(w.passages, qs, len(w.vocab))
    for row, q in zip(mat, qs):
        np.testing.assert_allclose(row, ref.get_scores([str(t) for t in q]), atol=1e-9)
    c = [["a", "b"], ["a", "c", "c"], ["a", "d"]]
    np.testing.assert_allclose(eng.bm25_scores(c, ["a", "c"]), BM25Okapi(c).get_scores(["a", "c"]), atol=1e-12)


def test_bm25_matrix_matches_reference_on_world():
    w = eng.WORLD
    qs = [q + [int(t)] for q, t in zip(w.queries[:10], w.targets[:10])]
    mat = eng.bm25_matrix(w.passages, qs, len(w.vocab))
    for row, q in zip(mat, qs):
        assert np.allclose(row, eng.bm25_scores(w.passages, q), atol=1e-9)


def test_per_example_grads_match_loop(ckpt):
    params = ckpt[0]
    X, Y, M = eng.encode_passages(eng.WORLD)
    idx = [0, 5, 100, 700, 1200]
    fast = eng.per_example_grads_fast(params, X[idx], Y[idx], M[idx])
    vm = eng.per_example_grads(params, X[idx], Y[idx], M[idx])
    loop = []
    for i in idx:
        p = {k: t.clone().requires_grad_(True) for k, t in params.items()}
        eng.passage_loss(p, X[i], Y[i], M[i]).backward()
        loop.append(torch.cat([p[k].grad.reshape(-1) for k in params]))
    loop = torch.stack(loop)
    for g in (fast, vm):
        rel = ((g - loop).norm(dim=1) / loop.norm(dim=1)).max()
        assert rel < 1e-5
    # queries: target-token loss only
    qx, qy = eng.encode_prompts(eng.WORLD.queries[:5]), torch.as_tensor(eng.WORLD.targets[:5])
    gq = eng.per_example_grads_fast(params, qx, qy)
    p = {k: t.clone().requires_grad_(True) for k, t in params.items()}
    eng.query_loss(p, qx[3], qy[3]).backward()
    ref = torch.cat([p[k].grad.reshape(-1) for k in params])
    assert (gq[3] - ref).norm() / ref.norm() < 1e-5


def test_adamw_step_matches_torch(ckpt):
    params, m, v, step, _ = ckpt
    X, Y, M = eng.encode_passages(eng.WORLD)
    p = {k: t.clone().requires_grad_(True) for k, t in params.items()}
    opt = torch.optim.AdamW(list(p.values()), lr=eng.LR, betas=eng.BETAS, weight_decay=eng.WD, eps=eng.EPS)
    opt.load_state_dict({"state": {i: {"step": torch.tensor(float(step)), "exp_avg": m[k].clone(),
                                       "exp_avg_sq": v[k].clone()} for i, k in enumerate(p)},
                         "param_groups": opt.state_dict()["param_groups"]})
    eng.passage_loss(p, X[3], Y[3], M[3]).backward()
    opt.step()
    ref = torch.cat([p[k].detach().reshape(-1) for k in p])
    flat = lambda d: torch.cat([d[k].reshape(-1) for k in params])  # noqa: E731
    g = eng.per_example_grads_fast(params, X[3:4], Y[3:4], M[3:4])
    new = eng.adamw_step_batch(flat(params), flat(m), flat(v), step, g)[0]
    assert torch.allclose(new, ref, atol=1e-6, rtol=1e-5)


def test_projection_preserves_scores(ckpt):
    params, _, v, step, _ = ckpt
    X, Y, M = eng.encode_passages(eng.WORLD)
    Gp = eng.per_example_grads_fast(params, X, Y, M)
    Gq = eng.per_example_grads_fast(params, eng.encode_prompts(eng.WORLD.queries[:50]),
                                    torch.as_tensor(eng.WORLD.targets[:50]))
    scale = (torch.cat([v[k].reshape(-1) for k in params]) / (1 - eng.BETAS[1] ** step) + eng.EPS).rsqrt()
    unit = lambda a: a / a.norm(dim=1, keepdim=True)  # noqa: E731
    exact = (unit(Gq * scale) @ unit(Gp * scale).T).numpy().ravel()
    shapes = {k: tuple(t.shape) for k, t in params.items()}
    rho, r = {}, {}
    for d in (64, 512, 2048):
        pr = eng.Projector(shapes, d, seed=0)
        approx = (unit(pr(Gq * scale)) @ unit(pr(Gp * scale)).T).numpy().ravel()
        rho[d] = spearmanr(exact, approx).statistic
        r[d] = np.corrcoef(exact, approx)[0, 1]
    # At this scale gradients are nearly orthogonal (cosine spread ~0.03, the same size as the projection
    # noise at d ~ 1000), so a full-matrix Spearman >= 0.9 is out of reach; we check that the projection
    # tracks the exact scores and gets better with d (an ordering check).
    assert r[2048] >= 0.6
    assert r[64] < r[512] < r[2048]
    assert rho[64] < rho[2048]


def test_whitening_identity():
    rng = np.random.default_rng(0)
    A = torch.as_tensor(rng.normal(size=(300, 80)) * np.linspace(0.1, 10, 80))
    R = A.T @ A / 300
    W, delta = eng.inv_sqrt_psd(R)
    Rd = R.double() + delta * torch.eye(80, dtype=torch.float64)
    err = (W @ Rd @ W - torch.eye(80, dtype=torch.float64)).norm() / math.sqrt(80)
    assert err < 1e-3
    assert abs(delta - 0.01 * float(torch.trace(R)) / 80) < 1e-12


def test_hessian_mix_follows_the_papers_rule(ckpt, default_result):
    """λ is set as in the paper's appendix (sorted spectra of λ·R_query and (1−λ)·R_train cross at ~1.5 % of d),
    not fixed at 0.9, and the TrackStar scores equal a numpy rebuild with that λ (a d × d eigh, damping, cosine;
    at the default d the engine takes the Gram-matrix route, so this also checks that route)."""
    params, _, v, step, _ = ckpt
    w = eng.WORLD
    X, Y, M = eng.encode_passages(w)
    Gp = eng.per_example_grads_fast(params, X, Y, M)
    Gq = eng.per_example_grads_fast(params, eng.encode_prompts(w.queries), torch.as_tensor(w.targets))
    scale = (torch.cat([v[k].reshape(-1) for k in params]) / (1 - eng.BETAS[1] ** step) + eng.EPS).rsqrt()
    pr = eng.Projector({k: tuple(t.shape) for k, t in params.items()}, eng.Config().proj_dim, seed=0)
    fq, fp = pr(Gq * scale).double().numpy(), pr(Gp * scale).double().numpy()
    Rq, Rt = fq.T @ fq / len(fq), fp.T @ fp / len(fp)
    d = Rq.shape[0]
    # the fraction is of the directions the gradients can span: d, or the 240 + 1 248 gradients when d is larger
    k = round(min(d, len(fq) + len(fp)) * 1000 / 65536)
    eq, et = np.linalg.eigvalsh(Rq)[::-1], np.linalg.eigvalsh(Rt)[::-1]
    lam = et[k] / (eq[k] + et[k])
    assert default_result.metrics["lam_used"] == pytest.approx(lam, rel=1e-6)
    assert lam * eq[k] == pytest.approx((1 - lam) * et[k], rel=1e-9)
    # the query term dominates only the top few components (a fixed λ = 0.9 let it dominate ~200 of them here)
    assert np.sum(lam * eq > (1 - lam) * et) <= 3 * k
    ref = _whitened_cosines(fq, fp, lam * Rq + (1 - lam) * Rt)
    got = eng.encodings(eng.Config(), params, v, step)[0]["trackstar"]
    assert np.allclose(got, ref, atol=2e-4)


def test_tail_patch_sanity(ckpt, default_result):
    assert default_result.metrics["tp_self_pos_frac"] >= 0.95
    params, m, v, step, _ = ckpt
    w = eng.WORLD
    shapes = {k: tuple(t.shape) for k, t in params.items()}
    flat = lambda d: torch.cat([d[k].reshape(-1) for k in params])  # noqa: E731
    # counterfactual passages: same subject and relation, a different object
    # on queries the model answers correctly (where a push towards a wrong object has something to undo)
    with torch.no_grad():
        pred = eng.logits_fn(params, eng.encode_prompts(w.queries)).argmax(-1).numpy()
    correct = np.flatnonzero(pred == w.targets)[::4]
    cf, qids = [], []
    for q in correct:
        s, r, o = w.facts[q]
        wrong = f"{eng.OBJ_PREFIX[r]}{(o + 5) % eng.N_OBJ:02d}"
        cf.append(w.queries[q] + [w.vocab.index(wrong), w.vocab.index(".")])
        qids.append(q)
    cw = eng.World(w.vocab, cf, np.zeros(len(cf)), np.zeros(len(cf)), np.zeros(len(cf)), [], np.array([]), [], [])
    X, Y, M = eng.encode_passages(cw)
    g = eng.per_example_grads_fast(params, X, Y, M)
    new = eng.adamw_step_batch(flat(params), flat(m), flat(v), step, g)
    qx, qy = eng.encode_prompts([w.queries[q] for q in qids]), torch.as_tensor(w.targets[qids])
    after = eng.target_logprob_batch(new, shapes, qx, qy)
    # reference: the same step with a zero gradient (only the saved momentum and weight decay act)
    zero = eng.adamw_step_batch(flat(params), flat(m), flat(v), step, torch.zeros_like(g))
    ref = eng.target_logprob_batch(zero, shapes, qx, qy)
    assert float((after - ref).mean()) < 0
    assert float((after - ref < 0).float().mean()) >= 0.7


def _torch_adamw_step(params, m, v, step, loss_fn=None):
    """One plain torch.optim.AdamW step from the saved state (zero gradient when loss_fn is None)."""
    p = {k: t.clone().requires_grad_(True) for k, t in params.items()}
    opt = torch.optim.AdamW(list(p.values()), lr=eng.LR, betas=eng.BETAS, weight_decay=eng.WD, eps=eng.EPS)
    opt.load_state_dict({"state": {i: {"step": torch.tensor(float(step)), "exp_avg": m[k].clone(),
                                       "exp_avg_sq": v[k].clone()} for i, k in enumerate(p)},
                         "param_groups": opt.state_dict()["param_groups"]})
    if loss_fn is None:
        for t in p.values():
            t.grad = torch.zeros_like(t)
    else:
        loss_fn(p).backward()
    opt.step()
    return {k: t.detach() for k, t in p.items()}


def _patch_setup(ckpt):
    """Checkpoint state, world, parameter shapes, a flattener and the encoded passages (shared by the tail-patch tests)."""
    params, m, v, step, _ = ckpt
    shapes = {k: tuple(t.shape) for k, t in params.items()}

    def flat(d):
        return torch.cat([d[k].reshape(-1) for k in params])

    return params, m, v, step, eng.WORLD, shapes, flat, eng.encode_passages(eng.WORLD)


def test_tail_patch_gain_matches_torch_and_removes_the_momentum_drift(ckpt, default_result):
    """Δ = log p after a torch AdamW step on the passage − log p after the same step with a zero gradient."""
    params, m, v, step, w, shapes, flat, (X, Y, M) = _patch_setup(ckpt)
    qx, qy = eng.encode_prompts(w.queries), torch.as_tensor(w.targets)
    still = _torch_adamw_step(params, m, v, step)
    pairs = [(0, int(w.proponents[0][0])), (7, 900), (123, 1100)]          # (query, passage)
    G = eng.per_example_grads_fast(params, X[[p for _, p in pairs]], Y[[p for _, p in pairs]],
                                   M[[p for _, p in pairs]])
    qi = torch.as_tensor([q for q, _ in pairs])
    got = eng.tail_patch_gain(flat(params), flat(m), flat(v), step, shapes, G, qx[qi], qy[qi])
    for (q, pid), g in zip(pairs, got):
        new = _torch_adamw_step(params, m, v, step, lambda p, i=pid: eng.passage_loss(p, X[i], Y[i], M[i]))
        with torch.no_grad():
            ref = -eng.query_loss(new, qx[q], qy[q]) + eng.query_loss(still, qx[q], qy[q])
        assert g == pytest.approx(float(ref), abs=2e-5)
    # a zero gradient has no influence by construction
    z = eng.tail_patch_gain(flat(params), flat(m), flat(v), step, shapes, torch.zeros_like(G), qx[qi], qy[qi])
    assert np.abs(z).max() < 1e-6
    # the drift reported on the page is the torch zero-gradient step measured on the run's tail-patch queries
    tq = default_result.tp_query_ids
    with torch.no_grad():
        drift = np.mean([float(eng.query_loss(params, qx[q], qy[q]) - eng.query_loss(still, qx[q], qy[q]))
                         for q in tq])
    assert default_result.metrics["tp_drift"] == pytest.approx(drift, abs=1e-5)
    assert default_result.metrics["tp_drift"] < -0.005           # the drift is real, so taking it out matters
    # with the drift taken out, random passages sit near zero (within 3 standard errors)
    m_ = default_result.metrics
    assert abs(m_["tp_random"]) < 3 * m_["tp_random_se"]


def test_first_order_gain_predicts_tail_patch(ckpt, default_result):
    """The first-order formula (one-sided Adam-scaled dot product) tracks the exact one-step gain."""
    params, m, v, step, w, shapes, flat, (X, Y, M) = _patch_setup(ckpt)
    rng = np.random.default_rng(3)
    qs, ps = rng.integers(240, size=300), rng.integers(len(w.passages), size=300)
    G = eng.per_example_grads_fast(params, X[ps], Y[ps], M[ps])
    qx, qy = eng.encode_prompts([w.queries[q] for q in qs]), torch.as_tensor(w.targets[qs])
    Gq = eng.per_example_grads_fast(params, qx, qy)
    scale = (flat(v) / (1 - eng.BETAS[1] ** step) + eng.EPS).rsqrt()
    exact = eng.tail_patch_gain(flat(params), flat(m), flat(v), step, shapes, G, qx, qy)
    pred = eng.first_order_gain(scale, step, Gq, G).numpy()
    assert np.corrcoef(exact, pred)[0, 1] > 0.8
    assert 0.8 <= default_result.metrics["tp_first_order_r"] <= 1.0


def test_bad_query_is_input_error():
    with pytest.raises(InputError):
        eng.run(eng.Config(query=999))


@pytest.mark.parametrize("switches,rung", [((False, False, False), "grad_dot"), ((False, False, True), "grad_cos"),
                                           ((True, True, True), "trackstar")])
def test_switches_reproduce_ladder(switches, rung):
    a, h, u = switches
    r = eng.run(eng.Config(use_adam=a, use_hessian=h, use_unit=u, tp_queries=20))
    for key in ("mrr", "recall10", "tp", "conc"):
        assert r.metrics[f"{key}_custom"] == pytest.approx(r.metrics[f"{key}_{rung}"], rel=1e-5, abs=1e-7)


# ------------------------------------------------------------------ leave-some-out retraining (opt-in proxy)
def test_stacked_retraining_equals_separate_plain_loops(ckpt):
    """The side-by-side leave-some-out copies equal independent plain torch AdamW runs without the passages."""
    params, m, v, step, _ = ckpt
    P = len(eng.WORLD.passages)
    drop = np.zeros((2, P), dtype=bool)
    drop[1, np.arange(0, P, 3)] = True                   # copy 1 never sees every third passage
    steps, batch, seed = 4, 64, 5
    new, _, _ = eng.train(steps=steps, batch=batch, seed=seed, init=(params, m, v, step), drop=drop)
    X, Y, M = eng.encode_passages(eng.WORLD)
    for r in range(2):
        p = {k: t.clone().requires_grad_(True) for k, t in params.items()}
        opt = torch.optim.AdamW(list(p.values()), lr=eng.LR, betas=eng.BETAS, weight_decay=eng.WD, eps=eng.EPS)
        opt.load_state_dict({"state": {i: {"step": torch.tensor(float(step)), "exp_avg": m[k].clone(),
                                           "exp_avg_sq": v[k].clone()} for i, k in enumerate(p)},
                             "param_groups": opt.state_dict()["param_groups"]})
        g = torch.Generator().manual_seed(seed)
        for _ in range(steps):
            idx = torch.randint(P, (batch,), generator=g)
            loss = sum(eng.passage_loss(p, X[i], Y[i], M[i]) for i in idx.tolist() if not drop[r, i]) / batch
            opt.zero_grad()
            loss.backward()
            opt.step()
        for k in params:
            assert torch.allclose(new[k][r], p[k].detach(), atol=1e-5, rtol=1e-4), (r, k)
    assert not torch.allclose(new["W2"][0], new["W2"][1])


@pytest.fixture(scope="module")
def loo_result():
    return eng.run(eng.Config(loo=True))


def test_leave_some_out_measured(loo_result):
    lo = loo_result.loo
    arms = lo["arms"]
    assert arms[0] == "control" and np.all(lo["drops"][0] == 0)
    k, nq = lo["k"], len(lo["query_ids"])
    for a, n in zip(arms, lo["n_removed"]):
        if a in ("control",):
            assert n == 0
        elif a != "proponents":
            assert 0 < n <= k * nq
    # the proxy is sensitive: removing the true sources costs more log p than removing random passages
    ip, ir = arms.index("proponents"), arms.index("random")
    assert lo["mean"][ip] > lo["mean"][ir] and lo["median"][ip] > lo["median"][ir]
    cl = eng.claims(loo_result)
    assert len(cl) == 9
    # the two leave-some-out claims are measured, finite, and shown; whether they pass depends on the query
    # group (heavy-tailed drops): they are reported on the page, not asserted here
    assert all(math.isfinite(c.measured) for c in cl)
    assert {c.label for c in cl[-2:]} == {"min(LOO_TrackStar/LOO_BM25, LOO_TrackStar/LOO_grad·grad)",
                                          "LOO rungs that raise the drop (of 3)"}
    # the paired rung differences are the differences of the per-arm means, with a standard error beside them
    m = loo_result.metrics
    for a, b in zip(eng.GRAD_METHODS[:-1], eng.GRAD_METHODS[1:]):
        assert m[f"loo_rung_{b}"] == pytest.approx(m[f"loo_{b}"] - m[f"loo_{a}"], abs=1e-6)
        assert m[f"loo_rung_se_{b}"] > 0
    # the heavy-tail verdict the page words its text by, recomputed here from the per-query drops
    shown = [arms.index(a) for a in ("bm25", "adam_cos", "trackstar")]
    heavy = sum(np.median(lo["drops"][i]) < 0.8 * np.mean(lo["drops"][i]) for i in shown) >= 2
    assert lo["heavy_tailed"] == heavy


def test_heavy_tail_verdict_is_a_majority_of_the_named_arms():
    arms = ["control", "bm25", "grad_dot", "adam_cos", "trackstar"]
    mean = np.array([0.0, 1.0, 1.0, 1.0, 1.0])
    assert eng.heavy_tailed(arms, mean, np.array([0, 0.5, 0.1, 0.5, 0.9]))        # bm25 and adam_cos
    assert not eng.heavy_tailed(arms, mean, np.array([0, 0.5, 0.1, 0.9, 0.9]))    # only bm25 (grad_dot not named)
    assert not eng.heavy_tailed(arms, mean, np.array([0, 0.8, 0.1, 0.8, 0.8]))    # at the ratio is not below it


@pytest.mark.parametrize("lam", [None, 0.3, 0.0, 1.0])
def test_gram_route_whitening_equals_a_dense_eigh(lam):
    """More dimensions than gradients: the Gram-matrix whitening equals (R + δI)^{-1/2} built densely in numpy,
    and the rule's λ equals the crossing computed from the dense spectra with the fraction taken of the 80 rows."""
    g = torch.Generator().manual_seed(0)
    fq = torch.randn(30, 200, generator=g) * 3 + torch.randn(1, 200, generator=g)
    fp = torch.randn(50, 200, generator=g)
    wq, wp, lam_used, ratio = eng.whiten_lowrank(fq, fp, lam)
    q, p = fq.double().numpy(), fp.double().numpy()
    Rq, Rt = q.T @ q / 30, p.T @ p / 50
    if lam is None:
        k = round(80 * 1000 / 65536)
        eq, et = np.linalg.eigvalsh(Rq)[::-1], np.linalg.eigvalsh(Rt)[::-1]
        lam = et[k] / (eq[k] + et[k])
    assert lam_used == pytest.approx(lam, rel=1e-9)
    assert ratio == pytest.approx(np.trace(Rq) / np.trace(Rt), rel=1e-9)
    R = lam * Rq + (1 - lam) * Rt
    R += 0.01 * np.trace(R) / 200 * np.eye(200)
    w, U = np.linalg.eigh(R)
    Rih = (U / np.sqrt(w)) @ U.T
    for got, ref in ((wq, q @ Rih), (wp, p @ Rih)):
        np.testing.assert_allclose(got.numpy(), ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())


@pytest.mark.parametrize("lam", [None, 0.3])
def test_whitened_gram_equals_the_products_of_the_whitened_rows(lam):
    """The scores' shortcut (C·XXᵀ·Cᵀ instead of forming the whitened rows) gives the same query × passage products
    and row norms as the rows themselves, and as the dense (R + δI)^{-1/2} built in numpy."""
    g = torch.Generator().manual_seed(1)
    fq = torch.randn(30, 200, generator=g) * 3 + torch.randn(1, 200, generator=g)
    fp = torch.randn(50, 200, generator=g)
    cross, nq, n_p, lam_g, ratio_g = eng.whitened_gram(fq, fp, lam)
    wq, wp, lam_w, ratio_w = eng.whiten_lowrank(fq, fp, lam)
    assert (lam_g, ratio_g) == (lam_w, ratio_w)
    ref = (wq.double() @ wp.double().T).numpy()
    np.testing.assert_allclose(cross.numpy(), ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())
    np.testing.assert_allclose(nq.numpy(), wq.norm(dim=1).numpy(), rtol=1e-5)
    np.testing.assert_allclose(n_p.numpy(), wp.norm(dim=1).numpy(), rtol=1e-5)
    q, p = fq.double().numpy(), fp.double().numpy()
    R = lam_w * q.T @ q / 30 + (1 - lam_w) * p.T @ p / 50
    R += 0.01 * np.trace(R) / 200 * np.eye(200)
    w, U = np.linalg.eigh(R)
    Rinv = (U / w) @ U.T                      # (R + δI)^{-1/2} twice: the products need the inverse itself
    dense = q @ Rinv @ p.T
    np.testing.assert_allclose(cross.numpy(), dense, rtol=1e-4, atol=1e-5 * np.abs(dense).max())


def test_no_projection_scores_the_full_gradients(ckpt):
    """d = none: every parameter is a coordinate, the grad·grad scores are the raw per-example dot products, and
    the paper's λ rule still lands on a component the query spectrum has (λ well below 1)."""
    params, _, v, step, _ = ckpt
    cfg = eng.Config(proj_dim=0)
    scores, Gp, Gq, dim, (lam, _) = eng.encodings(cfg, params, v, step)
    assert dim == sum(t.numel() for t in params.values()) == Gp.shape[1]
    np.testing.assert_allclose(scores["grad_dot"], (Gq.double() @ Gp.double().T).numpy(), rtol=1e-4,
                               atol=1e-6 * float(np.abs(scores["grad_dot"]).max()))
    assert 0 < lam < 0.1
    assert np.all(np.isfinite(scores["trackstar"])) and np.abs(scores["trackstar"]).max() <= 1 + 1e-5


def test_recall_cap_from_facts_missing_the_query_template():
    # the page's help text: 57 of the 240 facts are never written in the query's wording, so greedy recall by
    # memorising is at most 183 / 240 = 0.7625 (the spec's 0.9 is out of reach in this world)
    w = eng.WORLD
    missing = sum(not any(list(w.passages[p][:len(q)]) == list(q) for p in props)
                  for q, props in zip(w.queries, w.proponents))
    assert missing == 57 and len(w.queries) == 240
    assert eng.load_checkpoint()[4] <= 1 - missing / len(w.queries)


def test_attribution_metrics_on_a_hand_built_ranking():
    """MRR, recall@10 and precision@10 on two hand-made rankings of 15 passages: query 0's proponents sit at
    ranks 10 and 11 (1-based), query 1's single proponent at rank 1."""
    from types import SimpleNamespace

    order = np.array([[14, 13, 12, 11, 10, 9, 8, 7, 6, 0, 1, 2, 3, 4, 5], list(range(15))])
    world = SimpleNamespace(proponents=[np.array([0, 1]), np.array([0])])
    first, rec, prec = eng._mrr_recall(order, world)
    np.testing.assert_array_equal(first, [10, 1])
    np.testing.assert_allclose(rec, [0.5, 1.0])
    np.testing.assert_allclose(prec, [0.1, 0.1])


def test_concentration_counts_the_top10_slots():
    """Share of all top-10 slots held by the 10 most frequent passages, against collections.Counter: a hand case
    (two lists that share 8 passages: 18 of 20 slots) and random rankings."""
    from collections import Counter

    order = np.array([list(range(12)), [10, 11] + list(range(10))])
    assert eng._concentration(order)[0] == pytest.approx(0.9)
    rng = np.random.default_rng(0)
    order = np.stack([rng.permutation(40) for _ in range(25)])
    counts = Counter(order[:, :10].ravel().tolist())
    top = sorted(counts.values(), reverse=True)[:10]
    share, idx, cnt = eng._concentration(order)
    assert share == pytest.approx(sum(top) / (25 * 10))
    assert sorted(cnt.tolist(), reverse=True) == top and all(counts[int(i)] == c for i, c in zip(idx, cnt))


def test_bm25_attribution_metrics_from_rank_bm25(default_result):
    """The page's BM25 MRR and recall@10, rebuilt with rank_bm25's BM25Okapi on query = prompt + answer token (the
    spec's query text), ties broken by passage index, and the passages stating each fact."""
    from rank_bm25 import BM25Okapi

    w = eng.WORLD
    bm = BM25Okapi([[str(t) for t in p] for p in w.passages])
    rr, rec = [], []
    for q, t, props in zip(w.queries, w.targets, w.proponents):
        s = np.round(bm.get_scores([str(x) for x in q + [int(t)]]), 9)
        ranks = [int(np.sum(s > s[p]) + np.sum(s[:p] == s[p])) for p in props]   # 0-based, stable ties
        rr.append(1.0 / (min(ranks) + 1))
        rec.append(np.mean(np.array(ranks) < 10))
    m = default_result.metrics
    assert m["mrr_bm25"] == pytest.approx(np.mean(rr), abs=1e-9)
    assert m["recall10_bm25"] == pytest.approx(np.mean(rec), abs=1e-9)


def test_tail_patch_standard_errors(default_result):
    """Each method's tail-patch mean and error bar are the mean and scipy's standard error of its per-query Δ."""
    from scipy.stats import sem

    r = default_result
    for i, k in enumerate(r.methods):
        d = r.tp_per_query[k]
        assert r.tp_mean[i] == pytest.approx(d.mean(), rel=1e-9)
        assert r.tp_se[i] == pytest.approx(sem(d), rel=1e-9)


def test_first_order_gain_is_the_small_step_limit(ckpt):
    """For a tiny gradient (the passage loss scaled by h = 0.01) a torch AdamW step is linear in it, and its
    gain on the query must equal first_order_gain(h·g_z) (η(1−β₁)/bc₁ · g_q·g_z/sqrt(v̂+ε)) to a few percent."""
    params, m, v, step, w, shapes, flat, (X, Y, M) = _patch_setup(ckpt)
    rng = np.random.default_rng(0)
    qs, ps = rng.integers(240, size=12), rng.integers(len(w.passages), size=12)
    qx, qy = eng.encode_prompts([w.queries[q] for q in qs]), torch.as_tensor(w.targets[qs])
    h = 0.01
    still = _torch_adamw_step(params, m, v, step)
    exact = []
    for i, p in enumerate(ps):
        new = _torch_adamw_step(params, m, v, step, lambda P, p=int(p): h * eng.passage_loss(P, X[p], Y[p], M[p]))
        with torch.no_grad():
            exact.append(float(eng.query_loss(still, qx[i], qy[i]) - eng.query_loss(new, qx[i], qy[i])))
    scale = (flat(v) / (1 - eng.BETAS[1] ** step) + eng.EPS).rsqrt()
    Gq = eng.per_example_grads_fast(params, qx, qy)
    pred = eng.first_order_gain(scale, step, Gq, h * eng.per_example_grads_fast(params, X[ps], Y[ps], M[ps])).numpy()
    assert np.corrcoef(exact, pred)[0, 1] > 0.99
    np.testing.assert_allclose(exact, pred, atol=0.05 * np.abs(pred).max())


def test_plain_dot_r_is_pearson_of_raw_gradient_dot_with_measured_gain(ckpt, default_result):
    """tp_plain_dot_r, rebuilt outside run(): over every (query, top-k passage) pair that the five non-custom
    methods patch, Pearson r between the raw g_q·g_z (no optimizer correction, no projection) and the measured
    one-step gain. The same pairs scored with the one-sided Adam scaling g_q·(g_z/sqrt(v̂+ε)) give
    tp_first_order_r, a clearly different number, so the plain metric is not the scaled one renamed."""
    from scipy.stats import pearsonr

    params, m, v, step, w, shapes, flat, (X, Y, M) = _patch_setup(ckpt)
    cfg, res = eng.Config(), default_result
    scores = eng.encodings(cfg, params, v, step, w)[0]
    tq, kk = res.tp_query_ids, cfg.tp_k
    qs, ps = [], []
    for k in eng.METHODS:
        if k == "custom":                          # it repeats one of the other methods, so it is left out
            continue
        top = np.argsort(-scores[k], axis=1, kind="stable")[tq, :kk]
        qs += np.repeat(tq, kk).tolist()
        ps += top.ravel().tolist()
    qs, ps = np.asarray(qs), np.asarray(ps)
    assert len(qs) == 5 * len(tq) * kk
    # gradients by torch.func (vmap of autograd), not the hand-written batched backprop that run() uses
    uq, up = np.unique(qs), np.unique(ps)
    qx, qy = eng.encode_prompts(w.queries), torch.as_tensor(w.targets)
    gq_u = eng.per_example_grads(params, qx[uq], qy[uq])
    gz_u = eng.per_example_grads(params, X[up], Y[up], M[up])
    gq, gz = gq_u[np.searchsorted(uq, qs)], gz_u[np.searchsorted(up, ps)]
    plain = (gq.double() * gz.double()).sum(1).numpy()
    scale = (flat(v).double() / (1 - eng.BETAS[1] ** step) + eng.EPS).rsqrt()
    adam = (gq.double() * scale * gz.double()).sum(1).numpy()
    qi = torch.as_tensor(qs)
    gain = eng.tail_patch_gain(flat(params), flat(m), flat(v), step, shapes, gz, qx[qi], qy[qi])
    r_plain, r_adam = pearsonr(plain, gain).statistic, pearsonr(adam, gain).statistic
    assert res.metrics["tp_plain_dot_r"] == pytest.approx(r_plain, abs=1e-4)
    assert res.metrics["tp_first_order_r"] == pytest.approx(r_adam, abs=1e-4)
    # the two predictors rank the same pairs differently (measured 0.939 vs 0.882 at the default config)
    assert abs(r_plain - r_adam) > 0.02
    assert abs(res.metrics["tp_plain_dot_r"] - res.metrics["tp_first_order_r"]) > 0.02


# ------------------------------------------------------------------ what the page shows (second mutation round)
@pytest.fixture(scope="module")
def default_scores(ckpt):
    params, _, v, step, _ = ckpt
    return eng.encodings(eng.Config(), params, v, step)[0]


ALT_CONFIG = eng.Config(method="grad_dot", query=17, seed=1, tp_queries=20)


@pytest.fixture(scope="module")
def alt_result():
    return eng.run(ALT_CONFIG)


def _first_rank(s, props):
    """1-based rank of the best-placed passage in ``props`` under scores ``s`` (ties go to the lower index)."""
    return min(int(np.sum(s > s[p]) + np.sum(s[:p] == s[p])) for p in props) + 1


def test_reference_lines_are_per_query_means_of_the_fact_stating_passages(ckpt, default_result):
    """The green 'passages that state the fact' line: for each tail-patched query, the mean one-step gain over the
    passages that state its fact, then the mean over queries (scipy's sem for its error), rebuilt query by query."""
    from scipy.stats import sem

    params, m, v, step, w, shapes, flat, (X, Y, M) = _patch_setup(ckpt)
    qx, qy = eng.encode_prompts(w.queries), torch.as_tensor(w.targets)
    per_q = []
    for q in default_result.tp_query_ids:
        props = np.flatnonzero(w.fact_of == q)                     # from the world's labels, not world.proponents
        G = eng.per_example_grads(params, X[props], Y[props], M[props])
        qi = torch.full((len(props),), int(q))
        per_q.append(eng.tail_patch_gain(flat(params), flat(m), flat(v), step, shapes, G, qx[qi], qy[qi]).mean())
    met = default_result.metrics
    assert met["tp_sources"] == pytest.approx(np.mean(per_q), abs=2e-5)
    assert met["tp_sources_se"] == pytest.approx(sem(per_q), rel=1e-3)


def test_answer_share_and_first_rank_of_the_patched_lists(default_result, default_scores):
    """Share of patched passages that contain the answer token, and the scatter's x (rank of the first stating
    passage) for exactly the tail-patched queries, from the score matrices by brute force."""
    w, res = eng.WORLD, default_result
    tq, kk = res.tp_query_ids, eng.Config().tp_k
    for k in eng.METHODS:
        s = default_scores[k]
        hits = []
        for q in tq:
            top = np.argsort(-s[q], kind="stable")[:kk]
            hits += [int(w.targets[q]) in w.passages[p] for p in top]
        assert res.metrics[f"answer_share_{k}"] == pytest.approx(np.mean(hits)), k
        want = [_first_rank(s[q], np.flatnonzero(w.fact_of == q)) for q in tq]
        np.testing.assert_array_equal(res.first_rank[k], want, err_msg=k)


def test_epochs_and_counts_shown_in_the_header(ckpt, default_result):
    """The passes over the training set (step x the training batch / passages) and the header's counts."""
    import inspect

    met, step = default_result.metrics, ckpt[3]
    batch = inspect.signature(eng.train).parameters["batch"].default
    assert met["epochs"] == pytest.approx(step * batch / len(eng.WORLD.passages))
    assert met["n_passages"] == len(eng.WORLD.passages) == 1248
    assert met["n_params"] == sum(t.numel() for t in ckpt[0].values()) == 25647


def test_dense_route_trace_ratio_and_lambda(ckpt):
    """At d <= 1 488 the whitening takes the d x d route: the page's trace ratio tr R_query / tr R_train (= mean
    squared norm of the projected, Adam-corrected query gradients over that of the passages) and λ from the rule."""
    params, _, v, step, _ = ckpt
    cfg = eng.Config(proj_dim=1024)
    _, Gp, Gq, dim, (lam, ratio) = eng.encodings(cfg, params, v, step)
    assert dim <= len(Gq) + len(Gp)
    scale = (torch.cat([v[k].reshape(-1) for k in params]) / (1 - eng.BETAS[1] ** step) + eng.EPS).rsqrt()
    pr = eng.Projector({k: tuple(t.shape) for k, t in params.items()}, cfg.proj_dim, seed=cfg.seed)
    fq, fp = pr(Gq * scale).double().numpy(), pr(Gp * scale).double().numpy()
    want = (fq ** 2).sum(1).mean() / (fp ** 2).sum(1).mean()
    assert ratio == pytest.approx(want, rel=1e-5) and ratio > 10
    d = fq.shape[1]
    k = round(d * 1000 / 65536)
    eq = np.linalg.eigvalsh(fq.T @ fq / len(fq))[::-1]
    et = np.linalg.eigvalsh(fp.T @ fp / len(fp))[::-1]
    assert lam == pytest.approx(et[k] / (eq[k] + et[k]), rel=1e-5)


def _check_table(res, cfg, scores):
    w, q = eng.WORLD, cfg.query
    s_, r_, o = w.facts[q]
    assert res.answer_text == f"{eng.OBJ_PREFIX[r_]}{o:02d}"
    assert res.query_text == eng.TEMPLATES[r_][0].split(" {o}")[0].format(s=f"s{s_:02d}")
    assert [row["rank"] for row in res.table] == list(range(1, 11))
    for k in ("bm25", cfg.method):
        top = np.argsort(-scores[k][q], kind="stable")[:10]
        for row, pid in zip(res.table, top):
            assert row[f"{k} passage"] == " ".join(w.vocab[t] for t in w.passages[pid])
            assert row[f"{k} score"] == pytest.approx(float(scores[k][q, pid]), rel=1e-6, abs=1e-9)
            assert row[f"{k} proponent"] == (w.fact_of[pid] == q)
        got = [row[f"{k} score"] for row in res.table]
        assert got == sorted(got, reverse=True)


def test_top10_table_follows_the_query_and_method_widgets(ckpt, default_result, default_scores, alt_result):
    """The top-10 table for the picked query and method: passages, scores, ✓ marks and the heading's query text."""
    _check_table(default_result, eng.Config(), default_scores)
    params, _, v, step, _ = ckpt
    alt_scores = eng.encodings(ALT_CONFIG, params, v, step)[0]
    assert set(alt_result.table[0]) == {"rank", "bm25 passage", "bm25 score", "bm25 proponent", "grad_dot passage",
                                        "grad_dot score", "grad_dot proponent"}
    _check_table(alt_result, ALT_CONFIG, alt_scores)
    # the seed moves the projection and the sampled tail-patch queries
    assert not np.allclose(alt_scores["grad_dot"], default_scores["grad_dot"])
    assert len(alt_result.tp_query_ids) == 20


def test_projection_depends_on_its_seed(ckpt):
    shapes = {k: tuple(t.shape) for k, t in ckpt[0].items()}
    G = torch.randn(3, sum(math.prod(s) for s in shapes.values()), generator=torch.Generator().manual_seed(0))
    a, b, c = (eng.Projector(shapes, 512, seed=s)(G) for s in (0, 0, 1))
    assert torch.equal(a, b) and not torch.allclose(a, c)


def test_gradient_norm_histogram_and_frequent_passages(ckpt, default_result, default_scores):
    """The histogram's x (per-passage gradient norm, from torch.func gradients) and its red marks: the 10 passages
    in the most grad·grad top-10 lists, with their counts (collections.Counter)."""
    from collections import Counter

    params = ckpt[0]
    X, Y, M = eng.encode_passages(eng.WORLD)
    G = eng.per_example_grads(params, X, Y, M)
    np.testing.assert_allclose(default_result.grad_norms, G.double().norm(dim=1).numpy(), rtol=1e-4)
    top10 = np.argsort(-default_scores["grad_dot"], axis=1, kind="stable")[:, :10]
    counts = Counter(top10.ravel().tolist())
    want = sorted(counts.values(), reverse=True)[:10]
    assert sorted(default_result.frequent_dot_count.tolist(), reverse=True) == want
    assert all(counts[int(i)] == c for i, c in zip(default_result.frequent_dot, default_result.frequent_dot_count))


def test_tail_patch_rungs_are_paired_differences(default_result):
    from scipy.stats import sem

    res, met = default_result, default_result.metrics
    for a, b in zip(eng.GRAD_METHODS[:-1], eng.GRAD_METHODS[1:]):
        diff = res.tp_per_query[b] - res.tp_per_query[a]
        assert met[f"tp_rung_{b}"] == pytest.approx(met[f"tp_{b}"] - met[f"tp_{a}"], abs=1e-7)
        assert met[f"tp_rung_se_{b}"] == pytest.approx(sem(diff), rel=1e-6)


def test_custom_hessian_without_adam_whitens_the_raw_gradients(ckpt):
    """'Your combination' with Hessian whitening but no optimizer correction: cosine of R^(-1/2)-whitened raw
    projected gradients (λ by the rule, 1 % damping), rebuilt in numpy at d = 256."""
    params, _, v, step, _ = ckpt
    cfg = eng.Config(proj_dim=256, use_adam=False, use_hessian=True, use_unit=True)
    scores, Gp, Gq, _, _ = eng.encodings(cfg, params, v, step)
    pr = eng.Projector({k: tuple(t.shape) for k, t in params.items()}, 256, seed=0)
    fq, fp = pr(Gq).double().numpy(), pr(Gp).double().numpy()
    Rq, Rt = fq.T @ fq / len(fq), fp.T @ fp / len(fp)
    d = Rq.shape[0]
    k = round(d * 1000 / 65536)
    eq, et = np.linalg.eigvalsh(Rq)[::-1], np.linalg.eigvalsh(Rt)[::-1]
    lam = et[k] / (eq[k] + et[k])
    ref = _whitened_cosines(fq, fp, lam * Rq + (1 - lam) * Rt)
    assert np.allclose(scores["custom"], ref, atol=2e-4)


# ----------------------------------------------------------------------------- what the page draws


def test_page_with_another_method_draws_that_methods_numbers():
    """The page opened with "+ Adam correction" as the table's method, read back: the per-query scatter draws BM25
    and that method (each point its own first stating rank and tail-patch gain), the attribution bars carry MRR,
    recall@10 and precision@10 under their own names, the top-10 table ticks a BM25 passage exactly when it states
    the fact (and the method's column likewise), and the red marks on the norm histogram sit at the gradient norms
    of the passages grad·grad lists most often."""
    cfg = eng.Config(method="adam_cos")
    res = eng.run(cfg)
    at = open_page("trackstar_tda", {"method": "adam_cos"}, seed=(("engine.trackstar_tda", cfg, res),))
    ch = charts(at)

    pts = {t["name"]: (values(t["x"]), values(t["y"])) for t in ch["misalign"]}
    assert set(pts) == {"BM25", "+ Adam correction"}
    for k, name in (("bm25", "BM25"), ("adam_cos", "+ Adam correction")):
        np.testing.assert_allclose(pts[name][0], res.first_rank[k])
        np.testing.assert_allclose(pts[name][1], res.tp_per_query[k])
    assert not np.allclose(res.tp_per_query["adam_cos"], res.tp_per_query["trackstar"])

    bars = {t["name"]: values(t["y"]) for t in ch["attr"]}
    np.testing.assert_allclose(bars["MRR"], res.mrr)
    np.testing.assert_allclose(bars["recall@10"], res.recall10)
    np.testing.assert_allclose(bars["precision@10"], res.precision10)
    assert not np.allclose(res.recall10, res.precision10)

    table = next(d.value for d in at.dataframe if "BM25 score" in d.value.columns)
    assert len(table) == len(res.table)
    for shown, row in zip(table.to_dict("records"), res.table):
        assert shown["BM25"] == ("✓ " if row["bm25 proponent"] else "") + row["bm25 passage"]
        assert shown["+ Adam correction"] == ("✓ " if row["adam_cos proponent"] else "") + row["adam_cos passage"]
    assert any(r["bm25 proponent"] != r["adam_cos proponent"] for r in res.table)

    # tail-patch bars: each method's mean over the sampled queries of its per-query gain
    tp = ch["tailpatch"][0]
    np.testing.assert_allclose(values(tp["y"]), [np.mean(res.tp_per_query[k]) for k in res.methods], rtol=1e-5)
    np.testing.assert_allclose(values(tp["error_y"]["array"]), res.tp_se, rtol=1e-6)

    marks = next(t for t in ch["norms"] if t["type"] == "scatter")
    np.testing.assert_allclose(values(marks["x"]), [res.grad_norms[int(i)] for i in res.frequent_dot])
    assert marks["text"] == [f"in {c} top-10 lists" for c in res.frequent_dot_count]


# ---- added by mutation testing (2026-12-07): each kills a mutant the file above let through ----

def test_projection_preserves_squared_norms_of_every_parameter_block(ckpt):
    """Spec: each weight matrix W (o x i) is projected as P_o W P_i^T and every other block by a dense
    Gaussian, all with N(0, 1/k) entries, so E ||P x||^2 = ||x||^2 over the projection's randomness for a
    vector x living in any one block (JL): no block is weighted up or down against the others. Per block
    and d, the mean ratio ||P x||^2 / ||x||^2 over 10 projection seeds (200 Gaussian vectors each) is 1
    within 4 standard errors of the spread between seeds (small factors such as the 1 x 12 one of the
    embedding make single seeds vary by ~40 %)."""
    params = ckpt[0]
    shapes = {k: tuple(t.shape) for k, t in params.items()}
    total = sum(math.prod(s) for s in shapes.values())
    gen = torch.Generator().manual_seed(7)
    for d in (512, 2048):
        projs = [eng.Projector(shapes, d, seed) for seed in range(10)]
        off = 0
        for name, shp in shapes.items():
            n = math.prod(shp)
            ratios = []
            for proj in projs:
                x = torch.zeros(200, total)
                x[:, off:off + n] = torch.randn(200, n, generator=gen)
                ratios.append(float((proj(x).norm(dim=1) ** 2 / x.norm(dim=1) ** 2).mean()))
            se = np.std(ratios, ddof=1) / math.sqrt(len(ratios))
            assert abs(np.mean(ratios) - 1) < 4 * se + 0.02, (d, name, np.mean(ratios), se)
            off += n


def test_page_words_the_leave_some_out_spread_by_the_engines_heavy_tail_verdict(loo_result):
    """The leave-some-out note says 'heavy-tailed' exactly when the engine's verdict says so (the same run shown
    twice, once with the verdict flipped); the medians it lists are the run's own."""
    cfg = eng.Config(loo=True)
    texts = {}
    for verdict in (True, False):
        res = copy.deepcopy(loo_result)
        res.loo["heavy_tailed"] = verdict
        at = open_page("trackstar_tda", {"loo": "true"}, seed=(("engine.trackstar_tda", cfg, res),))
        texts[verdict] = next(i.value for i in at.info if i.value.startswith("Measured on this run"))
    assert "The drops are heavy-tailed (medians: " in texts[True]
    assert "heavy-tailed" not in texts[False] and "Medians: " in texts[False]
    lo = loo_result.loo
    for a in eng.TAIL_ARMS:
        assert f"{lo['median'][lo['arms'].index(a)]:.3f}" in texts[False]
