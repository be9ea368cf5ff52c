"""CrossMPT: checkpoints, claims at the default config, and independent checks of codes and baselines."""

import math
import re

import numpy as np
import pytest
import torch

import engine.crossmpt as eng
from tests.pagetext import figures, open_page, values


@pytest.fixture(scope="module")
def default_result():
    return eng.run(eng.Config())


def test_checkpoints_load_and_are_small():
    for name in eng.CODES:
        path = eng.checkpoint_path(name)
        assert path.exists() and path.stat().st_size < 2 * 1024 * 1024
        model, info = eng.load_model(name)
        assert info["train_seed"] != 0 and int(info["steps"]) > 0


# Not asserted: the forward-time ratio is a wall-time measurement (the team does not assert wall time in
# tests; the attention-score count next to it is deterministic and is asserted), and the BCH(31,16) claim
# against BP, which our CPU-trained checkpoint does not reproduce (the page says so; see test below). The BCH
# claim against bounded-distance decoding does hold (about 0.65) and is asserted with the others.
NOT_ASSERTED = ("forward time", "BER CrossMPT / BER BP(10)")


def test_claims_pass_at_default(default_result):
    claims = eng.claims(default_result)
    asserted = [c for c in claims if not c.label.startswith(NOT_ASSERTED)]
    assert len(asserted) == len(claims) - 2
    assert any(c.label.startswith("BER CrossMPT / BER BDD") for c in asserted)
    for c in asserted:
        assert c.passed, c.describe()


def test_bch_claims_are_honest_measurements(default_result):
    m = default_result.metrics
    for key in ("bch_ratio_bp", "bch_ratio_bdd", "time_ratio"):
        assert np.isfinite(m[key]) and m[key] > 0
    # the BCH numbers come from the same shared-noise evaluation as the curves: BP must beat raw hard decision
    ber = default_result.bch_claim["ber"]
    assert ber["BP (10 it.)"] < ber["raw hard decision"]


def test_bch_code_is_the_31_16_7_code():
    code = eng.get_code("bch")
    assert code.H.shape == (15, 31) and code.G.shape == (16, 31)
    assert not ((code.G @ code.H.T) % 2).any()
    assert np.linalg.matrix_rank(code.H.astype(float)) == 15
    cw = eng.all_codewords(code)
    assert len(np.unique(cw, axis=0)) == 2**16
    assert cw[1:].sum(axis=1).min() == 7


def test_bch_codewords_vanish_at_alpha_to_1_through_6():
    """BCH bound: each codeword polynomial has α, α², …, α⁶ as roots in GF(32) (x⁵ + x² + 1)."""
    exp, log = eng._gf32_tables()
    rng = np.random.default_rng(0)
    cw = eng.all_codewords(eng.get_code("bch"))[rng.choice(2**16, 50, replace=False)]
    for word in cw:
        for i in range(1, 7):
            acc = 0
            for pos in np.flatnonzero(word):
                acc ^= exp[(i * pos) % 31]
            assert acc == 0


def test_hamming_code():
    code = eng.get_code("hamming")
    cw = eng.all_codewords(code)
    assert len(np.unique(cw, axis=0)) == 16 and cw[1:].sum(axis=1).min() == 3
    assert not ((code.G @ code.H.T) % 2).any()


def test_algebraic_decoders_correct_up_to_t():
    for name, t in (("hamming", 1), ("bch", 3)):
        code = eng.get_code(name)
        rng = np.random.default_rng(1)
        c = eng.all_codewords(code)[rng.integers(0, 2**code.k, 200)]
        e = np.zeros_like(c)
        for row in e:
            row[rng.choice(code.n, rng.integers(0, t + 1), replace=False)] = 1
        y = (1 - 2 * (c ^ e)).astype(float)      # noiseless values of the corrupted word
        assert np.array_equal(eng.decode_algebraic(code, y), c)


def _brute_force_map(code, y, sigma):
    """Bitwise posterior from explicit Gaussian densities over every codeword (a few samples)."""
    cw = eng.all_codewords(code)
    out = np.empty_like(y)
    for b in range(len(y)):
        dens = np.array([np.prod(np.exp(-(y[b] - (1 - 2 * w)) ** 2 / (2 * sigma**2))) for w in cw])
        for i in range(code.n):
            out[b, i] = math.log(dens[cw[:, i] == 0].sum() / dens[cw[:, i] == 1].sum())
    return out


def test_bitwise_map_matches_brute_force():
    code = eng.get_code("hamming")
    c, y, sigma = eng.transmit(code, 30, 3.0, np.random.default_rng(2))
    np.testing.assert_allclose(eng.bitwise_map(code, y, sigma), _brute_force_map(code, y, sigma), atol=1e-8)


def test_bp_is_exact_on_a_tree():
    """A single parity check is a tree: BP equals bitwise MAP after one iteration."""
    H = np.ones((1, 4), dtype=np.int64)
    code = eng.Code("spc", H, eng.nullspace_gf2(H))
    c, y, sigma = eng.transmit(code, 400, 1.0, np.random.default_rng(3))
    bp = eng.decode_bp(code, y, sigma, 1)
    mp = (eng.bitwise_map(code, y, sigma) < 0).astype(int)
    assert np.array_equal(bp, mp)


def test_inputs_are_codeword_invariant():
    for name in eng.CODES:
        code = eng.get_code(name)
        rng = np.random.default_rng(4)
        c = eng.all_codewords(code)[rng.integers(0, 2**code.k, 100)]
        z = rng.standard_normal(c.shape) * 0.7
        mag1, syn1 = eng.model_inputs(code, (1 - 2 * c) + z)
        mag0, syn0 = eng.model_inputs(code, 1 + z * (1 - 2 * c))
        np.testing.assert_allclose(mag1, mag0, atol=1e-12)
        np.testing.assert_array_equal(syn1, syn0)


def test_masks_follow_the_parity_check_matrix():
    code = eng.get_code("bch")
    model = eng.make_model(code, d=16, layers=2, heads=2)
    assert np.array_equal(~model.block_vc.numpy(), code.H.T.astype(bool))
    assert np.array_equal(~model.block_cv.numpy(), code.H.astype(bool))
    # attention from a bit lands only on the checks it participates in
    mag, syn = eng.model_inputs(code, np.random.default_rng(5).standard_normal((3, 31)) + 1)
    _, maps = model(torch.tensor(mag, dtype=torch.float32), torch.tensor(syn, dtype=torch.float32),
                    keep_attention=True)
    w_vc = maps[0][0].detach().numpy()
    assert np.abs(w_vc[:, ~code.H.T.astype(bool)]).max() < 1e-12


def test_untrained_model_fails_the_hamming_claim():
    code = eng.get_code("hamming")
    torch.manual_seed(0)
    model = eng.make_model(code, d=32, layers=2, heads=4).eval()
    c, y, sigma = eng.transmit(code, 4000, 4.0, np.random.default_rng(6))
    ber_untrained = (eng.decode_model(model, code, y) != c).mean()
    ber_alg = (eng.decode_algebraic(code, y) != c).mean()
    assert ber_untrained > 0.6 * ber_alg


def test_attention_count_formula():
    cost = eng.cost_benchmark(n=40, m=20, d=16, layers=1, heads=2, batch=3, repeats=1)
    assert cost["attn_cross"] == 3 * 2 * 2 * 40 * 20
    assert cost["attn_full"] == 3 * 2 * 60 * 60


def _dense_bp(code, y, sigma, iters):
    """Reference sum-product BP on the dense (m, n) grid of H (the textbook layout), for comparison."""
    H = code.H.astype(bool)
    llr = 2.0 * y / sigma**2
    q = np.where(H[None], llr[:, None, :], 0.0)
    total = llr
    for _ in range(iters):
        t = np.where(H[None], np.tanh(np.clip(q, -40, 40) / 2), 1.0)
        t = np.where(np.abs(t) < 1e-12, np.copysign(1e-12, t), t)
        excl = np.clip(np.prod(t, axis=2, keepdims=True) / t, -(1 - 1e-7), 1 - 1e-7)
        r = np.where(H[None], 2 * np.arctanh(excl), 0.0)
        total = llr + r.sum(axis=1)
        q = np.where(H[None], total[:, None, :] - r, 0.0)
    return (total < 0).astype(np.int64)


@pytest.mark.parametrize("name", eng.CODES)
def test_edge_bp_matches_dense_reference(name):
    code = eng.get_code(name)
    for ebn0, iters in ((1.0, 5), (3.0, 20)):
        c, y, sigma = eng.transmit(code, 1500, ebn0, np.random.default_rng(8))
        assert np.array_equal(eng.decode_bp(code, y, sigma, iters), _dense_bp(code, y, sigma, iters))


@pytest.mark.parametrize("name", eng.CODES)
def test_bp_matches_the_ldpc_package(name):
    """Our BP against an independent implementation: the ldpc package's product-sum decoder (parallel schedule).

    ldpc decodes a syndrome with per-bit flip probabilities, so the channel goes in as the hard decision's
    syndrome and p_i = 1 / (1 + e^|LLR_i|): the same sum-product updates up to a sign flip per bit. It stops at
    the first iteration whose hard decision satisfies every check, while ours runs a fixed count, so each word is
    compared at the iteration where ldpc stopped (1 when the hard decision already was a codeword: one round
    from a codeword only strengthens every bit)."""
    from ldpc import BpDecoder
    code = eng.get_code(name)
    for ebn0, iters in ((1.0, 5), (3.0, 20)):
        c, y, sigma = eng.transmit(code, 300, ebn0, np.random.default_rng(8))
        llr = 2.0 * y / sigma**2
        hard = (llr < 0).astype(np.uint8)
        dec = BpDecoder(code.H.astype(np.uint8), error_rate=0.1, max_iter=iters, bp_method="product_sum",
                        schedule="parallel")
        stopped = []
        for b in range(len(y)):
            dec.update_channel_probs(1.0 / (1.0 + np.exp(np.abs(llr[b]))))
            theirs = hard[b] ^ dec.decode((code.H @ hard[b] % 2).astype(np.uint8))
            k = max(dec.iter, 1) if dec.converge else iters
            stopped.append(k)
            assert np.array_equal(eng.decode_bp(code, y[b:b + 1], sigma, k)[0], theirs), (name, ebn0, b, k)
        # the comparison covered both words BP settled early and words it ran to the cap on
        assert min(stopped) < iters and stopped.count(iters) > 0


@pytest.mark.parametrize("name", eng.CODES)
def test_attention_matches_torch_sdpa(name):
    """Both attention branches (broadcast for Hamming's 7×3 grid, batched matmul for BCH) against torch's own
    masked scaled-dot-product attention on the same projections."""
    code = eng.get_code(name)
    model, _ = eng.load_model(name)
    att = model.blocks[0].att
    g = torch.Generator().manual_seed(9)
    x, ctx = torch.randn(5, code.n, 32, generator=g), torch.randn(5, code.m, 32, generator=g)
    with torch.no_grad():
        out, w = att(x, ctx, model.block_vc, need_weights=True)
        split = lambda t: t.view(5, -1, 4, 8).transpose(1, 2)   # noqa: E731
        ref = torch.nn.functional.scaled_dot_product_attention(split(att.q(x)), split(att.k(ctx)), split(att.v(ctx)),
                                                               attn_mask=~model.block_vc)
        ref = att.o(ref.transpose(1, 2).reshape(5, code.n, 32))
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    assert w.shape == (5, 4, code.n, code.m) and torch.allclose(w.sum(-1), torch.ones(5, 4, code.n))


def test_work_guard():
    from engine.core import InputError

    assert eng.estimated_seconds(eng.Config()) <= eng.WORK_LIMIT_S
    assert eng.estimated_seconds(eng.HEAVY_CONFIG) <= eng.WORK_LIMIT_S
    eng.check_budget(eng.HEAVY_CONFIG)
    with pytest.raises(InputError, match="at most") as err:
        eng.Config(code="bch", ebn0=eng.EBN0_POINTS, n_codewords=20000, bp_iters=50)
    n_max = int(re.search(r"at most ([\d,]+) codewords", str(err.value)).group(1).replace(",", ""))
    ok = eng.Config(code="bch", ebn0=eng.EBN0_POINTS, n_codewords=n_max, bp_iters=50)
    assert eng.estimated_seconds(ok) <= eng.WORK_LIMIT_S < eng.estimated_seconds(ok, n_max + 500)
    eng.check_budget(ok)


def test_page_refuses_an_over_budget_setting_and_keeps_the_last_one():
    """Widgets driven to BCH, 1…7 dB, 50 BP iterations at 500 words (a run that fits), then 20 000 words: a clear
    message naming what fits, the last working settings (500 words, not the default) restored, the claims still
    shown, no traceback."""
    from streamlit.testing.v1 import AppTest

    from engine.registry import ROOT

    at = AppTest.from_file(str(ROOT / "pages" / "crossmpt.py"), default_timeout=180).run()
    for name, value in (("code", "bch"), ("ebn0", [1, 2, 3, 4, 5, 6, 7]), ("bp_iters", 50)):
        w = next(w for kind in ("radio", "select_slider", "multiselect") for w in getattr(at, kind)
                 if w.key == f"crossmpt:{name}")
        w.set_value(value)
    at.slider(key="crossmpt:n_codewords").set_value(500)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert not any("do not fit together" in w.value for w in at.warning)
    at.slider(key="crossmpt:n_codewords").set_value(20000)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("do not fit together" in w.value and "at most" in w.value for w in at.warning), \
        [w.value for w in at.warning]
    assert at.slider(key="crossmpt:n_codewords").value == 500
    assert at.radio(key="crossmpt:code").value == "bch"
    assert any("Claims" in s.value for s in at.subheader)


def test_live_training_learns_past_the_hard_decision_with_and_without_the_mask():
    cfg = eng.Config(train_live=True, live_steps=300, live_d=32, live_layers=2)
    live = eng.live_training(cfg)
    raw = live["reference"]["raw hard decision"]
    assert set(live) == {"H mask", "no mask", "reference"}
    for arm in ("H mask", "no mask"):
        r = live[arm]
        assert r["step"][0] == 1 and r["step"][-1] == cfg.live_steps and len(r["ber"]) == len(r["loss"])
        assert r["ber"][0] > 0.2                      # untrained: about a coin flip per bit
        assert r["ber"][-1] < 0.8 * raw, (arm, r["ber"][-1], raw)   # learned past the raw hard decision
        assert r["loss"][-1] < 0.5 * r["loss"][0]
    # the arms differ only in the mask: same initial weights, different attention, so different curves
    assert not np.allclose(live["H mask"]["loss"], live["no mask"]["loss"])
    one = eng.live_training(eng.Config(train_live=True, live_steps=100, live_d=16, live_layers=1, live_mask="none"))
    assert set(one) == {"no mask", "reference"}


def test_live_training_over_budget_is_refused_with_the_steps_that_fit():
    with pytest.raises(ValueError, match=r"live training of Hamming\(7,4\).*at most [\d,]+ training steps"):
        eng.Config(train_live=True, live_steps=1500, live_d=32, live_layers=2, live_mask="both")
    assert eng.estimated_seconds(eng.Config(train_live=True)) > eng.estimated_seconds(eng.Config())


def test_caveat_quotes_the_shipped_bch_record():
    """The page's caveat quotes the shipped BCH checkpoint's validation BERs (model 0.0083, BP 0.0080) and its size;
    they must be what the checkpoint's record says."""
    _, info = eng.load_model("bch")
    assert round(float(info["ber_model"]), 4) == 0.0083 and round(float(info["ber_bp10"]), 4) == 0.0080
    assert int(info["layers"]) == 4 and int(info["steps"]) == 40_000


@pytest.mark.parametrize("name", eng.CODES)
def test_channel_raw_ber_matches_the_bpsk_closed_form(name):
    """Eb/N0 in dB sets the noise: a BPSK hard decision errs with probability Q(sqrt(2 R Eb/N0)) (linear Eb/N0)."""
    from scipy.stats import norm

    code = eng.get_code(name)
    for ebn0 in (2.0, 4.0, 6.0):
        c, y, _ = eng.transmit(code, 30000, ebn0, np.random.default_rng(11))
        p = norm.sf(math.sqrt(2 * code.rate * 10 ** (ebn0 / 10)))
        ber = (eng.decode_hard(y) != c).mean()
        se = math.sqrt(p * (1 - p) / c.size)
        assert abs(ber - p) < 5 * se + 1e-4, (name, ebn0, ber, p)


def test_map_flip_probabilities_are_those_of_the_hard_decision(default_result):
    """soft_map is P(hard-decided bit is wrong | y): above 1/2 where MAP overrules the hard decision (which
    happens at 4 dB), and on average the raw BPSK error rate Q(sqrt(2 R Eb/N0)) of Hamming(7,4)."""
    from scipy.stats import norm

    p = default_result.soft_map
    assert p.min() >= 0 and p.max() <= 1
    assert p.max() > 0.5
    raw = norm.sf(math.sqrt(2 * (4 / 7) * 10 ** (eng.CLAIM_EBN0 / 10)))
    assert abs(p.mean() - raw) < 0.02, (p.mean(), raw)


# ------------------------------------------------------------------------- second mutation round: the page's numbers

_SEEDED = eng.Config(seed=3, ebn0=(3, 4), n_codewords=500, bp_iters=5)


@pytest.fixture(scope="module")
def seeded_result():
    """Non-default seed and BP iterations, so that a widget value the engine ignored would show."""
    return eng.run(_SEEDED)


def _ber_fer(dec, c):
    wrong = dec != c
    return wrong.mean(), np.mean([w.any() for w in wrong]), int(wrong.sum())


def test_curves_and_table_rebuilt_from_the_seeded_words(seeded_result):
    """Curves, table and CSV: at each chosen Eb/N0, every decoder on the same words from the chosen seed's stream,
    BP with the chosen iteration count; BER per bit, FER = share of words with any wrong bit, bit error counts."""
    r, cfg = seeded_result, _SEEDED
    cur = r.curves
    code = eng.get_code("hamming")
    model, _ = eng.load_model("hamming")
    assert cur["names"][2] == "BP (5 it.)" and cur["n_bits"] == cfg.n_codewords * 7
    np.testing.assert_array_equal(r.points, [3.0, 4.0])
    for i, e in enumerate(cfg.ebn0):
        c, y, sigma = eng.transmit(code, cfg.n_codewords, e, eng.eval_rng(code, e, cfg.seed))
        decs = {"raw hard decision": (y < 0).astype(int), "algebraic (hard)": eng.decode_algebraic(code, y),
                "BP (5 it.)": eng.decode_bp(code, y, sigma, 5), "CrossMPT": eng.decode_model(model, code, y),
                "bitwise MAP": eng.bitwise_map(code, y, sigma) < 0}
        for name, dec in decs.items():
            ber, fer, errs = _ber_fer(dec, c)
            assert cur["ber"][name][i] == pytest.approx(ber, abs=1e-12), (name, e)
            assert cur["fer"][name][i] == pytest.approx(fer, abs=1e-12), (name, e)
            assert cur["errors"][name][i] == errs, (name, e)


def test_claim_numbers_rebuilt_from_their_own_words(seeded_result):
    """Every BER in the badges, recomputed: Hamming on 8 000 words of stream seed + 17 (BP with the chosen iterations),
    BCH on max(2 500, N) words of stream seed + 29 (BP with 10), and the ratios the badges compare."""
    m = seeded_result.metrics
    seed = _SEEDED.seed
    ham, bch = eng.get_code("hamming"), eng.get_code("bch")
    c, y, sigma = eng.transmit(ham, eng.HAMMING_CLAIM_WORDS, 4.0, eng.eval_rng(ham, 4.0, seed + 17))
    want = {"ham_ber_raw": ((y < 0) != c).mean(),
            "ham_ber_alg": (eng.decode_algebraic(ham, y) != c).mean(),
            "ham_ber_bp": (eng.decode_bp(ham, y, sigma, _SEEDED.bp_iters) != c).mean(),
            "ham_ber_map": ((eng.bitwise_map(ham, y, sigma) < 0) != c).mean(),
            "ham_ber_model": (eng.decode_model(eng.load_model("hamming")[0], ham, y) != c).mean()}
    c, y, sigma = eng.transmit(bch, 2500, 4.0, eng.eval_rng(bch, 4.0, seed + 29))
    want.update({"bch_ber_bdd": (eng.decode_algebraic(bch, y) != c).mean(),
                 "bch_ber_bp": (eng.decode_bp(bch, y, sigma, 10) != c).mean(),
                 "bch_ber_model": (eng.decode_model(eng.load_model("bch")[0], bch, y) != c).mean()})
    for key, v in want.items():
        assert m[key] == pytest.approx(v, abs=1e-12), key
    for code, ref in (("ham", "alg"), ("ham", "bp"), ("ham", "map"), ("bch", "bp"), ("bch", "bdd")):
        assert m[f"{code}_ratio_{ref}"] == pytest.approx(want[f"{code}_ber_model"] / want[f"{code}_ber_{ref}"],
                                                         rel=1e-12), (code, ref)


def test_invariance_badge_compares_independent_draws(seeded_result):
    """The spec's claim 3: random codewords against all-zero words with their own noise (not the same noise mapped
    through the channel symmetry, which would make the inputs identical and the gap 0 by construction; that
    identity is test_inputs_are_codeword_invariant). The all-zero BER is recomputed here from the engine's
    decoder on a freshly drawn all-zero batch with the documented stream; the random-word BER is the Hamming
    check's own; the tolerance is 3 standard errors from the per-word error counts."""
    import math

    inv, cfg, m = seeded_result.invariance, seeded_result.config, seeded_result.metrics
    code = eng.get_code("hamming")
    n_w = eng.HAMMING_CLAIM_WORDS
    sigma = eng.sigma_for(eng.CLAIM_EBN0, code.rate)
    rng = np.random.default_rng([cfg.seed + eng.EVAL_SEED_OFFSET, int(eng.CLAIM_EBN0 * 10), code.n, 0])
    y0 = 1 + sigma * rng.standard_normal((n_w, code.n))
    model = eng.load_model("hamming")[0]
    e0 = (eng.decode_model(model, code, y0) != 0).sum(1)
    assert inv["ber_zero"] == pytest.approx(e0.sum() / (n_w * code.n), abs=2 / (n_w * code.n))
    assert inv["ber_random"] == pytest.approx(m["ham_ber_model"], abs=1e-12)    # the Hamming check's words
    assert inv["ber_zero"] != inv["ber_random"]                     # two draws, not one draw seen twice
    # the random words' per-word errors, rebuilt from the Hamming check's stream
    msg_rng = eng.eval_rng(code, eng.CLAIM_EBN0, cfg.seed + 17)
    c, y, _ = eng.transmit(code, n_w, eng.CLAIM_EBN0, msg_rng)
    er = (eng.decode_model(model, code, y) != c).sum(1)
    assert er.mean() / code.n == pytest.approx(inv["ber_random"], abs=1e-12)
    want = 3 * math.sqrt((er.var(ddof=1) + e0.var(ddof=1)) / n_w) / code.n + 1e-4
    assert inv["tolerance"] == pytest.approx(want, rel=1e-3)
    # wrong bits come in words: the per-word tolerance is wider than the spec's bitwise one
    p = 0.5 * (inv["ber_zero"] + inv["ber_random"])
    assert inv["tolerance"] > 3 * math.sqrt(2 * p * (1 - p) / (n_w * code.n)) + 1e-4
    assert m["invariance_gap"] == abs(inv["ber_zero"] - inv["ber_random"]) <= inv["tolerance"]


def test_soft_output_scatter_rebuilt(seeded_result):
    """The scatter: 200 words at 4 dB from the seed's stream; CrossMPT's sigmoid(−z) against the exact MAP probability
    that the hard decision is wrong, here from brute-force Gaussian densities over all 16 codewords."""
    code = eng.get_code("hamming")
    c, y, sigma = eng.transmit(code, 200, 4.0, np.random.default_rng([_SEEDED.seed + eng.EVAL_SEED_OFFSET, 7]))
    z = eng.model_logits(eng.load_model("hamming")[0], code, y)
    np.testing.assert_allclose(seeded_result.soft_model, (1 / (1 + np.exp(z))).ravel(), rtol=1e-9, atol=1e-12)
    llr = _brute_force_map(code, y[:40], sigma)
    p_wrong = np.where(y[:40] < 0, 1 / (1 + np.exp(-llr)), 1 / (1 + np.exp(llr)))   # P(c=0) if hard says 1, else P(c=1)
    np.testing.assert_allclose(seeded_result.soft_map[: 40 * 7], p_wrong.ravel(), atol=1e-9)


def test_attention_map_is_the_last_layers_head_average(seeded_result):
    """The heat map: for the seed's one word at 4 dB, the bits→checks weights of the LAST layer, averaged over the
    heads, rebuilt by stepping through the layers by hand; each row sums to 1 and stays inside H."""
    code = eng.get_code("hamming")
    model, _ = eng.load_model("hamming")
    _, y1, _ = eng.transmit(code, 1, 4.0, np.random.default_rng([_SEEDED.seed + eng.EVAL_SEED_OFFSET, 3]))
    mag, syn = (torch.as_tensor(a, dtype=torch.float32) for a in eng.model_inputs(code, y1))
    with torch.no_grad():
        v, c = mag.unsqueeze(-1) * model.ev, syn.unsqueeze(-1) * model.ec
        for i, blk in enumerate(model.blocks):
            a, w = blk.att(blk.ln1(v), c, model.block_vc, need_weights=True)
            v, _ = blk.half(v, c, model.block_vc)
            c, _ = blk.half(c, v, model.block_cv)
            if i == len(model.blocks) // 2 - 1:
                v, c = model.mid_ln(v), model.mid_ln(c)
    want = w[0].mean(0).numpy()
    att = seeded_result.attention
    assert att.shape == (7, 3)
    np.testing.assert_allclose(att, want, atol=1e-6)
    np.testing.assert_allclose(att.sum(1), 1, atol=1e-5)
    assert np.abs(att[code.H.T == 0]).max() < 1e-6


def test_bch_badges_reuse_the_4db_point_of_the_bch_curves():
    """With BCH curves that include 4 dB at BP(10) on at least 2 500 words, the BCH badges take that point's numbers
    (not another point's)."""
    n = eng.BCH_CLAIM_MIN_WORDS
    cfg = eng.Config(code="bch", ebn0=(3, 4), n_codewords=n, bp_iters=10, seed=2)
    r = eng.run(cfg)
    bch = eng.get_code("bch")
    c, y, sigma = eng.transmit(bch, n, 4.0, eng.eval_rng(bch, 4.0, cfg.seed))
    assert r.metrics["bch_ber_bp"] == pytest.approx((eng.decode_bp(bch, y, sigma, 10) != c).mean(), abs=1e-12)
    assert r.metrics["bch_ber_bdd"] == pytest.approx((eng.decode_algebraic(bch, y) != c).mean(), abs=1e-12)
    assert r.bch_claim["ber"]["raw hard decision"] == pytest.approx(((y < 0) != c).mean(), abs=1e-12)


def test_bch_badges_never_rest_on_fewer_curve_words():
    """BCH curves on only 500 words: the badges run their own 2 500-word check (stream seed + 29) instead of reusing the
    noisier 4 dB point of the curves."""
    cfg = eng.Config(code="bch", ebn0=(4,), n_codewords=500, bp_iters=10, seed=2)
    r = eng.run(cfg)
    bch = eng.get_code("bch")
    c, y, sigma = eng.transmit(bch, eng.BCH_CLAIM_MIN_WORDS, 4.0, eng.eval_rng(bch, 4.0, cfg.seed + 29))
    assert r.bch_claim["n_bits"] == eng.BCH_CLAIM_MIN_WORDS * bch.n
    assert r.metrics["bch_ber_bp"] == pytest.approx((eng.decode_bp(bch, y, sigma, 10) != c).mean(), abs=1e-12)


def test_live_training_follows_the_seed_and_probes_at_4db():
    """Live training: the seed widget changes the training stream and the probe words; the dotted reference lines are
    BP(10) and the raw hard decision on 2 000 all-zero words at 4 dB of the seed's stream."""
    runs = {s: eng.live_training(eng.Config(train_live=True, live_steps=30, live_d=16, live_layers=1,
                                            live_mask="H", seed=s)) for s in (0, 1)}
    assert not np.allclose(runs[0]["H mask"]["loss"], runs[1]["H mask"]["loss"])
    code = eng.get_code("hamming")
    for s, live in runs.items():
        _, y, sigma = eng.transmit(code, 2000, 4.0, np.random.default_rng([s, 4242]), zero=True)
        assert live["reference"]["raw hard decision"] == pytest.approx((y < 0).mean(), abs=1e-12)
        assert live["reference"]["BP (10 it.)"] == pytest.approx(eng.decode_bp(code, y, sigma, 10).mean(), abs=1e-12)


# ----------------------------------------------------------------------------- what the page draws and quotes


def test_page_draws_the_picked_decoders_and_tabulates_every_one(default_result):
    """Two decoders picked under *Decoders drawn*: the BER and FER charts hold exactly those two with their own
    rates; the −ln(BER) table keeps every decoder, in the charts' order, with −ln of the measured BER; the cost
    bars put 2·n·m under CrossMPT and (n+m)² under full attention."""

    at = open_page("crossmpt", seed=(("engine.crossmpt", eng.Config(), default_result),), timeout=180)
    at.multiselect(key="crossmpt:decoders").set_value(["bp", "crossmpt"]).run()
    assert not at.exception, [e.value for e in at.exception]
    cur = default_result.curves
    figs = figures(at)
    picked = [nm for key, nm in zip(("raw", "algebraic", "bp", "crossmpt", "map"), cur["names"])
              if key in ("bp", "crossmpt")]
    assert len(picked) == 2
    for chart, rate in (("ber", "ber"), ("fer", "fer")):
        got = {d["name"]: values(d["y"]) for d in figs[chart]["data"]}
        assert sorted(got) == sorted(picked), chart
        for nm in picked:
            np.testing.assert_allclose(got[nm], cur[rate][nm], err_msg=f"{chart} {nm}")

    table = at.dataframe[0].value
    assert list(table.index) == list(cur["names"])
    for nm in cur["names"]:
        ber = np.asarray(cur["ber"][nm], dtype=float)
        shown = table.loc[nm].to_numpy(dtype=float)
        ok = np.isfinite(shown)
        assert ok.any(), nm
        np.testing.assert_allclose(shown[ok], np.round(-np.log(ber[ok]), 2), atol=0.0051, err_msg=nm)

    cost = default_result.cost
    bars = figs["cost"]["data"][0]
    y = dict(zip(bars["x"], values(bars["y"]), strict=True))
    n, mm = cost["n"], cost["m"]
    assert y["full self-attention ((n+m)²)"] / y["CrossMPT (2·n·m)"] == pytest.approx((n + mm) ** 2 / (2 * n * mm))


# ---- added by mutation testing (2026-12-07): each kills a mutant the file above let through ----

def test_invariance_badge_fails_for_a_decoder_that_sees_y_itself(monkeypatch):
    """The spec: 'a decoder fed y instead of (|y|, syndrome) fails this badly'. A decoder that reads y
    itself (threshold 0.3 instead of 0) errs with probability Q(0.7/sigma) ~ 0.12 on the all-zero word but
    about (Q(0.7/sigma) + Q(1.3/sigma)) / 2 ~ 0.066 on random words at 4 dB: the badge must fail."""
    monkeypatch.setattr(eng, "decode_model", lambda model, code, y: (y < 0.3).astype(np.int64))
    r = eng.run(eng.Config(ebn0=(4,), n_codewords=500))
    inv = r.invariance
    assert inv["ber_zero"] == pytest.approx(0.118, abs=0.01)
    assert inv["ber_random"] == pytest.approx(0.066, abs=0.01)
    badge = next(c for c in eng.claims(r) if c.label == "|BER(all-zero) − BER(random)|")
    assert not badge.passed, badge.describe()


def test_evaluation_noise_follows_the_seed():
    """Different seeds give different words and noise at the same point (fresh noise per seed), the same
    seed the same ones; and no seed's evaluation stream is the training stream."""
    code = eng.get_code("hamming")
    draws = {s: eng.transmit(code, 200, 4.0, eng.eval_rng(code, 4.0, s)) for s in (0, 1)}
    again = eng.transmit(code, 200, 4.0, eng.eval_rng(code, 4.0, 0))
    np.testing.assert_array_equal(draws[0][1], again[1])
    assert not np.array_equal(draws[0][0], draws[1][0]) and not np.allclose(draws[0][1], draws[1][1])
    # and the evaluation itself (every decoder's errors) changes with the seed
    model, _ = eng.load_model("hamming")
    errs = [eng.evaluate(code, model, [4.0], 500, 5, s, with_map=False)["errors"] for s in (0, 1)]
    assert errs[0]["raw hard decision"][0] != errs[1]["raw hard decision"][0]
    train_noise = np.random.default_rng(eng.TRAIN_SEED)
    train_noise.integers(0, 6, 128)
    first = train_noise.standard_normal((128, code.n))
    for s in range(10):
        _, y, sigma = eng.transmit(code, 128, 4.0, eng.eval_rng(code, 4.0, s))
        assert not np.allclose(y[:, :3], 1 + sigma * first[:, :3])
