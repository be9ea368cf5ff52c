"""ICL from AR-NTP: claims on the shipped grid, plus checks against references the engine did not compute."""

import numpy as np
import pytest
import scipy.linalg
from sklearn.linear_model import Ridge

from engine import icl_ar_ntp as eng
from engine.core.nn import load_state


@pytest.fixture(scope="module")
def res():
    return eng.run(eng.Config())


def test_claims_pass_at_default(res):
    for c in eng.claims(res):
        assert c.passed, c.describe()


def test_references_bracket_the_model(res):
    m = res.metrics
    assert abs(m["sel_zero"] - 1.0) < 0.1
    assert abs(m["sel_oracle"] - eng.noise_var(eng.RHO)) < 0.03
    # a prompt-ignoring model (zero predictor) fails the absolute bar of the topic claim
    assert m["sel_zero"] > eng.TOPIC_ABS_BAR


def test_checkpoints_exist_load_and_are_small():
    for seed in eng.SHIP_SEEDS:
        for K in eng.GRID_K:
            p = eng.checkpoint_path(K, seed)
            assert p.exists() and p.stat().st_size < 512 * 1024, p
            ex = load_state(p)["extra"]
            assert ex["K"] == K and ex["K"] * ex["N"] == eng.TOTAL_SEQ and ex["steps"] == eng.SHIP_STEPS


def test_stationary_covariance_is_identity():
    """10 000 independent chains: the covariance of x_t is I at the start, middle and end."""
    rng = np.random.default_rng(1)
    W = eng.make_topics(rng, 1)
    x = eng.simulate(rng, W, np.zeros(10_000, dtype=int), 16)
    for t in (0, 7, 15):
        assert np.abs(np.cov(x[:, t].T) - np.eye(eng.D)).max() < 0.05
    lyap = scipy.linalg.solve_discrete_lyapunov(W[0], eng.noise_var(eng.RHO) * np.eye(eng.D))
    assert np.allclose(lyap, np.eye(eng.D), atol=1e-8)


def test_oracle_floor_is_sigma2():
    rng = np.random.default_rng(2)
    W = eng.make_topics(rng, 50)
    idx = rng.integers(0, 50, 2_000)
    x = eng.simulate(rng, W, idx, 11)           # 2000 x 10 = 20 000 predictions
    err = eng.per_position_mse(eng.oracle_predictions(x, W[idx]), x).mean()
    assert abs(err - eng.noise_var(eng.RHO)) / eng.noise_var(eng.RHO) < 0.03


def test_ridge_matches_sklearn():
    rng = np.random.default_rng(3)
    W = eng.make_topics(rng, 3)
    x = eng.simulate(rng, W, np.array([0, 1, 2]), 16)
    pred = eng.ridge_predictions(x, alpha=0.1)
    for n in range(3):
        for t in (2, 5, 15):                    # prompt x[:t], predicts x[t]
            r = Ridge(alpha=0.1, fit_intercept=False).fit(x[n, :t - 1], x[n, 1:t])
            assert np.abs(r.predict(x[n, t - 1:t])[0] - pred[n, t - 1]).max() < 1e-6


def test_mixture_k1_is_oracle_and_posterior_concentrates():
    rng = np.random.default_rng(4)
    W1 = eng.make_topics(rng, 1)
    x = eng.simulate(rng, W1, np.zeros(20, dtype=int), 12)
    mix, _ = eng.mixture_predictions(x, W1)
    assert np.allclose(mix, eng.oracle_predictions(x, W1[np.zeros(20, dtype=int)]))
    W = eng.make_topics(rng, 8)
    idx = rng.integers(0, 8, 200)
    x = eng.simulate(rng, W, idx, 22)
    _, post = eng.mixture_predictions(x, W)
    assert post[np.arange(200), 19, idx].mean() >= 0.99   # prompt length t = 20


def test_haar_trace_moments():
    O = eng.haar_orthogonal(np.random.default_rng(5), 2_000)
    assert np.allclose(np.einsum("nij,nkj->nik", O[:5], O[:5]), np.eye(eng.D), atol=1e-10)
    tr = np.trace(O, axis1=1, axis2=2)
    assert abs(tr.mean()) < 0.1 and abs(tr.var() - 1.0) < 0.15


def test_live_run_small():
    cfg = eng.Config(source=eng.SOURCES[1], K=16, live_N=8, live_T=8, live_steps=100)
    r = eng.run(cfg)
    assert r.curves["unseen"].shape == (7,) and np.isfinite(r.loss).all()
    assert len(eng.claims(r)) == 1


def test_too_big_live_run_rejected():
    with pytest.raises(ValueError):
        eng.Config(source=eng.SOURCES[1], K=256, live_N=512)
