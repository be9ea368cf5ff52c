"""Attention sink: claims on the shipped checkpoints, plus checks the engine did not compute itself."""

import math

import numpy as np
import pytest
from scipy.special import erf

from engine import attention_sink as eng
from engine.core import InputError
from engine.core.nn import load_state
from tests.pagetext import figures, open_page, values


@pytest.fixture(scope="module")
def res():
    return eng.run(eng.Config())


def test_claims_pass_at_default(res):
    for c in eng.claims(res):
        assert c.passed, c.describe()


def test_untrained_model_fails_the_sink_bar(res):
    """The bar of the first claim is one the untrained (step 0) model does not reach."""
    assert res.metrics["sink_untrained"] < eng.SINK_BAR
    assert res.metrics["sink_softmax"] - res.metrics["sink_untrained"] >= eng.RISE_BAR


def test_sigmoid_badges_can_fail(res):
    """The sink-free badge reads raw sigmoid weights: the same weights divided by their row sums (a normalised
    sigmoid, the paper's case where the sink comes back) fail it; and the trained-as-well badge is one an untrained
    model fails (its loss, the first logged steps', is far above the softmax model's final one)."""
    assert res.metrics["sink_sigmoid_norm"] > eng.SIGMOID_BAR
    assert res.metrics["sink_sigmoid"] <= eng.SIGMOID_BAR
    first = float(np.mean(np.asarray(res.loss_sigmoid)[:5]))
    assert first / res.metrics["final_loss_softmax"] > eng.LOSS_RATIO_BAR


def test_checkpoints_exist_and_are_small():
    for attn, snaps in (("softmax", eng.SOFTMAX_SNAPS), ("sigmoid", eng.SIGMOID_SNAPS)):
        for s in snaps:
            p = eng.checkpoint_path(attn, s)
            assert p.exists(), p
            assert p.stat().st_size < 1024 * 1024
            blob = load_state(p)
            assert blob["extra"]["step"] == s and blob["extra"]["arch"]["attn"] == attn


def test_softmax_rows_sum_to_one_and_are_causal(res):
    a = res.attn_softmax
    np.testing.assert_allclose(a.sum(axis=-1), 1.0, atol=1e-5)
    T = a.shape[-1]
    assert np.all(a[..., np.triu_indices(T, 1)[0], np.triu_indices(T, 1)[1]] == 0)
    # sigmoid rows are NOT normalised: their sums vary and are not all 1
    sums = res.attn_sigmoid.sum(axis=-1)
    assert np.abs(sums - 1).max() > 0.05
    assert np.all(res.attn_sigmoid[..., np.triu_indices(T, 1)[0], np.triu_indices(T, 1)[1]] == 0)


def test_zoomed_heatmap_equals_softmax_of_returned_qk(res):
    q, k = res.q_softmax, res.k_softmax
    T, dh = q.shape
    logits = q @ k.T / math.sqrt(dh)
    logits[np.triu_indices(T, 1)] = -np.inf
    ref = np.exp(logits - logits.max(axis=1, keepdims=True))
    ref /= ref.sum(axis=1, keepdims=True)
    zl, zh = res.zoom
    np.testing.assert_allclose(res.attn_softmax[zl, zh], ref, atol=1e-5)


def _numpy_forward(attn: str, step: int, ids: np.ndarray) -> np.ndarray:
    """Re-implementation of the decoder in numpy, straight from the checkpoint's weights."""
    return _numpy_forward_full(attn, step, ids)[0]


def _numpy_forward_full(attn: str, step: int, ids: np.ndarray):
    """The numpy decoder above, also returning each layer's q, k, v: four arrays (L, H, T, ...)."""
    blob = load_state(eng.checkpoint_path(attn, step))
    W = {k: v.float().numpy().astype(np.float64) for k, v in blob["state"].items()}
    arch = blob["extra"]["arch"]
    d, H = arch["d_model"], arch["n_heads"]
    dh = d // H
    T = len(ids)

    def ln(x, p):
        mu = x.mean(-1, keepdims=True)
        var = x.var(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-5) * W[p + ".weight"] + W[p + ".bias"]

    def lin(x, p):
        return x @ W[p + ".weight"].T + W[p + ".bias"]

    x = W["tok.weight"][ids] + W["pos.weight"][:T]
    maps, qs, ks, vs = [], [], [], []
    for la in range(arch["n_layers"]):
        b = f"blocks.{la}"
        qkv = lin(ln(x, b + ".ln1"), b + ".qkv")
        q, k, v = (qkv[:, i * d:(i + 1) * d].reshape(T, H, dh).transpose(1, 0, 2) for i in range(3))
        s = q @ k.transpose(0, 2, 1) / math.sqrt(dh)
        mask = np.tril(np.ones((T, T), dtype=bool))
        if attn == "softmax":
            s = np.where(mask, s, -np.inf)
            a = np.exp(s - s.max(-1, keepdims=True))
            a /= a.sum(-1, keepdims=True)
        else:
            a = mask / (1 + np.exp(-(s + W[b + ".sig_bias"][:, None, None])))
        maps.append(a)
        qs.append(q)
        ks.append(k)
        vs.append(v)
        o = (a @ v).transpose(1, 0, 2).reshape(T, d)
        x = x + lin(o, b + ".proj")
        hdn = lin(ln(x, b + ".ln2"), b + ".mlp.0")
        hdn = 0.5 * hdn * (1 + erf(hdn / math.sqrt(2)))
        x = x + lin(hdn, b + ".mlp.2")
    return np.stack(maps), np.stack(qs), np.stack(ks), np.stack(vs)


def test_heatmaps_equal_numpy_recomputation_from_checkpoint(res):
    ids = np.array([eng.STOI[c] if c != "⟨s⟩" else eng.BOS for c in res.tokens])
    np.testing.assert_allclose(res.attn_softmax, _numpy_forward("softmax", eng.SOFTMAX_SNAPS[-1], ids), atol=1e-4)
    np.testing.assert_allclose(res.attn_sigmoid, _numpy_forward("sigmoid", eng.SIGMOID_SNAPS[-1], ids), atol=1e-4)


def test_sink_metric_closed_form_for_uniform_attention():
    T, L, H = 32, 2, 3
    uniform = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    attn = np.broadcast_to(uniform, (L, H, T, T))
    alpha = eng.first_token_share(attn)
    expected = sum(1 / t for t in range(1, T + 1)) / T  # harmonic number / T
    np.testing.assert_allclose(alpha, expected)
    assert eng.sink_score(alpha, 0.3) == 0.0
    assert eng.sink_score(alpha, expected - 1e-6) == 1.0


def test_sink_metric_positive_control():
    """A map where every query puts half its attention on token 1 is all sink heads; the claims see it."""
    T = 32
    a = np.tril(np.ones((T, T))) * 0.5 / np.maximum(np.arange(T), 1)[:, None]
    a[:, 0] = 0.5
    a[0, 0] = 1.0
    a = eng.row_normalise(np.tril(a))
    alpha = eng.first_token_share(np.broadcast_to(a, (3, 4, T, T)))
    assert eng.sink_score(alpha, 0.3) == 1.0 and eng.sink_score(alpha, 0.6) == 0.0


def test_first_token_changes():
    ids, _ = eng.encode("abc")
    dot, bos = eng.STOI["a"], eng.BOS
    assert eng.change_first_token(ids, "keep").tolist() == [bos, 0, 1, 2]
    assert eng.change_first_token(ids, "replace").tolist() == [dot, 0, 1, 2]
    assert eng.change_first_token(ids, "prepend").tolist() == [dot, bos, 0, 1, 2]
    assert eng.change_first_token(ids, "drop").tolist() == [0, 1, 2]


def test_first_token_change_and_received_attention():
    r = eng.run(eng.Config(first_token="prepend"))
    assert r.tokens[:2] == ["a", "⟨s⟩"] and r.tokens[1:] == r.tokens_orig
    # each softmax row sums to one, so the attention received, averaged over queries, sums to one
    np.testing.assert_allclose(r.recv_orig.sum(), 1.0, atol=1e-5)
    np.testing.assert_allclose(r.recv_mod.sum(), 1.0, atol=1e-5)


def test_unknown_characters_are_reported_and_short_text_rejected():
    r = eng.run(eng.Config(text="Hello, WORLD! #42"))
    assert "'!'" in r.notice and "'4'" in r.notice
    assert r.tokens[0] == "⟨s⟩" and "".join(r.tokens[1:]) == "helloworld#"
    assert "⟨s⟩" not in r.tokens[1:] and "^" not in "".join(eng.run(eng.Config(text="a^b")).tokens)
    with pytest.raises(InputError):
        eng.run(eng.Config(text="a!"))
    r = eng.run(eng.Config(text="   "))  # empty input falls back to a sequence sampled from the chain
    assert len(r.tokens) == eng.TEXT_MAX + 1


def _assert_follows_the_chain(x):
    """Sequences x (rows, BOS first) obey the task: after a trigger letter comes the token before it (backcopy),
    otherwise the fixed bigram table bigram_table() (chi-square on three rows). Returns the trigger mask."""
    from scipy.stats import chisquare

    trig = eng.is_trigger(x[:, 1:-1])
    np.testing.assert_array_equal(x[:, 2:][trig], x[:, :-2][trig])
    P = eng.bigram_table()
    prev, nxt = x[:, 1:-1][~trig], x[:, 2:][~trig]
    for tok in (0, 5, 11):
        obs = np.bincount(nxt[prev == tok], minlength=eng.N_DATA)
        exp = P[tok] * obs.sum()
        keep = exp > 5
        f_obs = np.r_[obs[keep], obs[~keep].sum()]
        f_exp = np.r_[exp[keep], exp[~keep].sum()]
        assert chisquare(f_obs, f_exp).pvalue > 1e-4, tok
    return trig


def test_sampler_follows_bigram_table_and_backcopy_rule():
    """Counts over many sampled sequences against the table itself (chi-square) and the copy rule."""
    x = eng.sample_sequences(4000, 32, np.random.default_rng(1))
    assert np.all(x[:, 0] == eng.BOS) and not eng.is_trigger(x[:, 1]).any()
    trig = _assert_follows_the_chain(x)
    assert not eng.is_trigger(x[:, :-2][trig]).any()


def test_live_path_runs_small():
    r = eng.run(eng.Config(source="live", live_steps=100, live_width=16, live_layers=1))
    assert r.n_layers == 1 and r.alpha_softmax.shape == (1, eng.SHIPPED_ARCH.n_heads)
    assert np.isfinite(r.loss_softmax).all() and r.loss_softmax[-10:].mean() < r.loss_softmax[:10].mean()
    np.testing.assert_allclose(r.attn_softmax.sum(-1), 1.0, atol=1e-5)


def test_uniform_causal_baseline_and_the_sink_following_its_token():
    """The baseline is what received() gives for uniform causal attention (built here by brute force), and the
    excess over it locates the sink: on ⟨s⟩ as typed, on ⟨s⟩ again when an 'a' is put before it (position 2), and
    nowhere comparable when ⟨s⟩ is replaced (measured excess +0.19, +0.25 and +0.06)."""
    T = 9
    uni = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    np.testing.assert_allclose(eng.uniform_causal_received(T), eng.received(uni[None, None]), atol=1e-12)
    keep = eng.run(eng.Config())
    assert keep.metrics["sink_position_orig"] == 1 and keep.tokens_orig[0] == "⟨s⟩"
    moved = eng.run(eng.Config(first_token="prepend"))
    assert moved.metrics["sink_position_mod"] == 2 and moved.tokens[1] == "⟨s⟩"
    gone = eng.run(eng.Config(first_token="replace"))
    assert gone.metrics["sink_excess_mod"] < 0.5 * gone.metrics["sink_excess_orig"]


# ----------------------------------------------------------------------------------------------
# Hand-built inputs against brute-force loops and closed forms (no checkpoint involved)
# ----------------------------------------------------------------------------------------------

def test_dormant_stats_match_a_loop_over_queries():
    """dormant_stats splits queries by the token AT the query position: a trigger there (position > 1) is a
    'trigger' query, every other position except the first is an 'other' query. Checked on random scores and a
    hand-placed set of triggers against a plain loop over (sequence, query)."""
    rng = np.random.default_rng(3)
    L, B, H, T = 2, 3, 2, 9
    trig_tok = eng.TRIGGER_IDS
    seqs = rng.integers(0, len(eng.LETTERS), size=(B, T))
    seqs[:, 0] = eng.BOS
    seqs[0, [2, 5]] = trig_tok[[0, 1]]
    seqs[1, [3, 4, 8]] = trig_tok[[2, 0, 1]]
    seqs[2, 7] = trig_tok[2]
    attn = rng.random((L, B, H, T, T)) * np.tril(np.ones((T, T)))  # raw scores, rows not normalised
    got = eng.dormant_stats(attn, seqs)
    for name in ("first", "prev", "mass"):
        for kind in ("trigger", "other"):
            ref = np.zeros((L, H))
            for la in range(L):
                for h in range(H):
                    vals = []
                    for b in range(B):
                        for t in range(1, T):
                            is_trig = seqs[b, t] in trig_tok
                            if is_trig != (kind == "trigger"):
                                continue
                            row = attn[la, b, h, t]
                            vals.append({"first": row[0], "prev": row[t - 1], "mass": row.sum()}[name])
                    ref[la, h] = np.mean(vals)
            np.testing.assert_allclose(got[f"{name}_{kind}"], ref, rtol=1e-12, err_msg=f"{name}_{kind}")


def test_kv_stats_match_a_loop_over_vectors():
    """kv_stats on hand-built q, k, v (values three times longer than keys, each query equal to its own key so that
    the self-cosine is 1): norms of the first key/value vs the rest, and the query cosine with the first key vs with
    the keys strictly before the query (the query's own key excluded), all by explicit loops."""
    rng = np.random.default_rng(5)
    L, B, H, T, dh = 1, 2, 2, 6, 4
    k = rng.normal(size=(L, B, H, T, dh))
    q = k.copy()  # self-cosine 1: counting the own key as an "other" key would show
    v = 3.0 * rng.normal(size=(L, B, H, T, dh)) + 1.0
    got = eng.kv_stats({"q": q, "k": k, "v": v})

    def cos(a, b):
        return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))

    for la in range(L):
        for h in range(H):
            kf = np.mean([np.linalg.norm(k[la, b, h, 0]) for b in range(B)])
            ko = np.mean([np.linalg.norm(k[la, b, h, t]) for b in range(B) for t in range(1, T)])
            vf = np.mean([np.linalg.norm(v[la, b, h, 0]) for b in range(B)])
            vo = np.mean([np.linalg.norm(v[la, b, h, t]) for b in range(B) for t in range(1, T)])
            cf = np.mean([cos(q[la, b, h, t], k[la, b, h, 0]) for b in range(B) for t in range(1, T)])
            co = np.mean([cos(q[la, b, h, t], k[la, b, h, j]) for b in range(B) for t in range(2, T)
                          for j in range(1, t)])
            for key, ref in (("k_first", kf), ("k_other", ko), ("v_first", vf), ("v_other", vo),
                             ("cos_first", cf), ("cos_other", co)):
                assert got[key][la, h] == pytest.approx(ref, rel=1e-9, abs=1e-12), key


def test_untrained_sigmoid_attention_starts_at_one_over_ctx_plus_one():
    """With the per-head bias at -log(ctx) and near-zero logits from the small initial weights, every causal score
    of an untrained sigmoid model is sigmoid(-log ctx) = 1/(ctx+1), so query t (1-based) carries a total of
    t/(ctx+1): below one for every row, about one only for the last."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    arch = eng.Arch(attn="sigmoid")
    model = eng.build_model(arch).eval()
    ids = eng.sample_sequences(4, arch.ctx, np.random.default_rng(2))
    a = eng.attention_maps(model, ids, torch.device("cpu"))["attn"]  # (L, B, H, T, T)
    T = arch.ctx
    causal = np.tril(np.ones((T, T), dtype=bool))
    np.testing.assert_allclose(a[..., causal], 1.0 / (arch.ctx + 1), rtol=0.15)  # logits are ~0, not 0
    assert np.all(a[..., ~causal] == 0)
    rows = a.sum(axis=-1)
    np.testing.assert_allclose(rows, np.broadcast_to(np.arange(1, T + 1) / (arch.ctx + 1), rows.shape), rtol=0.05)
    assert rows.max() < 1.0


def _entropy_rate_per_position(ctx: int) -> np.ndarray:
    """Exact conditional entropy (nats) of each target x_1..x_ctx given its full history, from the chain's table:
    x_1 is uniform over the letters; after a trigger the next token is fixed (entropy 0); otherwise it is drawn from
    the bigram row of the previous token. The marginal of the previous token is propagated through the chain on
    pairs (x_{t-1}, x_t), which the copy rule needs."""
    P = eng.bigram_table()
    n, n_let = eng.N_DATA, len(eng.LETTERS)
    row_h = -(P * np.log(P)).sum(axis=1)
    trig = eng.is_trigger(np.arange(n))
    out = [math.log(n_let)]
    first = np.zeros(n)
    first[:n_let] = 1.0 / n_let
    pair = first[:, None] * P  # Pr(x_1 = a, x_2 = b)
    out.append(float(first @ row_h))
    for _ in range(3, ctx + 1):
        prev = pair.sum(axis=0)  # marginal of x_{t-1}
        out.append(float(prev[~trig] @ row_h[~trig]))
        nxt = np.zeros_like(pair)
        for b in range(n):
            if trig[b]:
                nxt[b] += pair[:, b]  # copy: x_t = x_{t-2}
            else:
                nxt[b] += pair[:, b].sum() * P[b]
        pair = nxt
    return np.array(out)


def test_live_training_loss_never_beats_the_entropy_rate():
    """Next-token cross-entropy cannot go below the data's entropy rate (computed in closed form from the chain).
    A training loop that paired inputs with the wrong targets (e.g. the input itself) would beat it within a
    hundred steps; the real loop, after a short run, sits well above it."""
    h = _entropy_rate_per_position(eng.SHIPPED_ARCH.ctx)
    assert 0.0 < h[-1] < h[0]
    bound = float(h.mean())  # the loss averages over the targets x_1..x_ctx of each window
    out = eng.train(eng.Arch(d_model=16, n_layers=1, n_heads=2, ctx=eng.SHIPPED_ARCH.ctx), 120, seed=0,
                    pool_size=2000)
    assert np.isfinite(out.loss).all()
    assert out.loss[-10:].mean() > bound - 0.05, (out.loss[-10:].mean(), bound)
    assert out.loss.min() > bound - 0.1


# ----------------------------------------------------------------------------------------------
# Per-head numbers, curves and headline metrics recomputed outside the engine
# ----------------------------------------------------------------------------------------------

def _held_out(cfg) -> np.ndarray:
    """The page's held-out sequences (the engine draws them from seed 500 + the page's seed)."""
    return eng.sample_sequences(cfg.n_eval, eng.SHIPPED_ARCH.ctx, np.random.default_rng(500 + cfg.seed))


def _numpy_alpha(attn: str, step: int, seqs: np.ndarray, normalise: bool = False) -> np.ndarray:
    """alpha[l, h]: the weight on token 1, averaged over every query and sequence, from the numpy decoder."""
    maps = np.stack([_numpy_forward(attn, step, s) for s in seqs])  # (B, L, H, T, T)
    if normalise:
        maps = maps / maps.sum(-1, keepdims=True)
    return maps[..., 0].mean(axis=(0, 3))


@pytest.fixture(scope="module")
def small_eval():
    # eps = 0.2: the step-250 snapshot already has a sink head while step 0 has none, so the two ends differ
    cfg = eng.Config(n_eval=8, eps=0.2)
    return cfg, eng.run(cfg)


def test_head_alphas_curves_and_sink_scores_match_numpy(small_eval):
    """Every per-head alpha on the page (trained softmax, raw and row-normalised sigmoid, untrained softmax), every
    point of the two training curves (sink score and mean alpha per snapshot) and the headline sink scores, from the
    numpy decoder run on each checkpoint over the page's n_eval held-out sequences, with the sink score counted by
    hand as the share of heads above eps."""
    cfg, r = small_eval
    seqs = _held_out(cfg)
    for attn, snaps, curve, curve_alpha in (("softmax", eng.SOFTMAX_SNAPS, r.curve_softmax, r.curve_alpha_softmax),
                                            ("sigmoid", eng.SIGMOID_SNAPS, r.curve_sigmoid, r.curve_alpha_sigmoid)):
        alphas = [_numpy_alpha(attn, s, seqs) for s in snaps]
        np.testing.assert_array_equal(getattr(r, f"curve_steps_{attn}"), snaps)
        np.testing.assert_allclose(curve_alpha, [a.mean() for a in alphas], atol=1e-5)
        np.testing.assert_array_equal(curve, [np.count_nonzero(a > cfg.eps) / a.size for a in alphas])
        np.testing.assert_allclose(getattr(r, f"alpha_{attn}"), alphas[-1], atol=1e-5)
        if attn == "softmax":
            np.testing.assert_allclose(r.alpha_untrained, alphas[0], atol=1e-5)
            untrained = alphas[0]
    norm = _numpy_alpha("sigmoid", eng.SIGMOID_SNAPS[-1], seqs, normalise=True)
    np.testing.assert_allclose(r.alpha_sigmoid_norm, norm, atol=1e-5)
    m = r.metrics

    def share(a):
        return np.count_nonzero(a > cfg.eps) / a.size

    assert m["sink_softmax"] == share(r.alpha_softmax) == r.curve_softmax[-1]
    assert m["sink_sigmoid"] == share(r.alpha_sigmoid)
    assert m["sink_sigmoid_norm"] == share(norm)
    assert m["sink_untrained"] == share(untrained) == m["sink_first_snapshot"] == r.curve_softmax[0]
    assert r.curve_softmax[1] > r.curve_softmax[0]              # the first snapshot is not interchangeable
    assert m["sink_rise"] == pytest.approx(r.curve_softmax[-1] - r.curve_softmax[0])
    assert m["n_sink_heads"] == np.count_nonzero(r.alpha_softmax > cfg.eps)


def test_sink_head_key_value_summary_matches_numpy(small_eval):
    """The caption under the key-bias plots: over the softmax sink heads, the median of |v_1| / mean |v_j| and of the
    cosine gap cos(q, k_1) − cos(q, k_j) (j between 2 and the query, exclusive), from numpy q, k, v."""
    cfg, r = small_eval
    seqs = _held_out(cfg)
    outs = [_numpy_forward_full("softmax", eng.SOFTMAX_SNAPS[-1], s) for s in seqs]
    q, k, v = (np.stack([o[i] for o in outs]) for i in (1, 2, 3))  # (B, L, H, T, dh)
    B, L, H, T, _ = q.shape
    sink = r.alpha_softmax > cfg.eps
    assert sink.any()
    ratios, gaps = [], []
    for la in range(L):
        for h in range(H):
            if not sink[la, h]:
                continue
            vn = np.linalg.norm(v[:, la, h], axis=-1)  # (B, T)
            ratios.append(vn[:, 0].mean() / vn[:, 1:].mean())
            cf, co = [], []
            for b in range(B):
                qq = q[b, la, h] / np.linalg.norm(q[b, la, h], axis=-1, keepdims=True)
                kk = k[b, la, h] / np.linalg.norm(k[b, la, h], axis=-1, keepdims=True)
                for t in range(1, T):
                    cf.append(qq[t] @ kk[0])
                    co.extend(qq[t] @ kk[j] for j in range(1, t))
            gaps.append(np.mean(cf) - np.mean(co))
    assert r.metrics["v_ratio_sink_heads"] == pytest.approx(np.median(ratios), rel=1e-3)
    assert r.metrics["cos_gap_sink_heads"] == pytest.approx(np.median(gaps), rel=1e-3, abs=1e-4)
    assert r.metrics["v_ratio_sink_heads"] < 1.0 and r.metrics["cos_gap_sink_heads"] > 0.0  # the paper's key bias


def test_untrained_checkpoints_attend_uniformly(small_eval):
    """The step-0 checkpoints have near-zero logits: softmax attention is uniform over the causal window, so alpha is
    H_T / T (closed form); raw sigmoid scores are sigmoid(-log ctx) = 1 / (ctx + 1) on every key."""
    _, r = small_eval
    T = eng.SHIPPED_ARCH.ctx
    h_t = sum(1.0 / t for t in range(1, T + 1)) / T
    np.testing.assert_allclose(r.alpha_untrained, h_t, atol=2e-3)
    assert r.curve_alpha_sigmoid[0] == pytest.approx(1.0 / (T + 1), rel=0.02)


def test_zoom_follows_the_chosen_head():
    """Zoom on head 2 (layer 1), then on layer 2 head 1 of the one-layer model (the layer is clipped to 1); the
    returned q, k are the zoomed head's (numpy decoder)."""
    assert eng.run(eng.Config(zoom_layer=2, zoom_head=1)).zoom == (0, 0)
    r = eng.run(eng.Config(zoom_layer=1, zoom_head=2))
    assert r.zoom == (0, 1)
    ids = np.array([eng.STOI[c] if c != "⟨s⟩" else eng.BOS for c in r.tokens])
    _, q, k, _ = _numpy_forward_full("softmax", eng.SOFTMAX_SNAPS[-1], ids)
    np.testing.assert_allclose(r.q_softmax, q[0, 1], atol=2e-4)
    np.testing.assert_allclose(r.k_softmax, k[0, 1], atol=2e-4)


def test_received_attention_and_excess_match_numpy_before_and_after_the_change():
    """With 'a' put before ⟨s⟩, the 'as typed' curve is the original sequence's and the 'after the change' curve the
    longer one's: attention received per key (mean over layers, heads, queries) from the numpy decoder, minus the
    uniform causal baseline (1/T) sum_{t >= j} 1/t built by a loop; the reported positions are the arg-maxes."""
    r = eng.run(eng.Config(first_token="prepend"))

    def ids_of(tokens):
        return np.array([eng.STOI[c] if c != "⟨s⟩" else eng.BOS for c in tokens])

    for tokens, recv, excess, key in ((r.tokens_orig, r.recv_orig, r.excess_orig, "orig"),
                                      (r.tokens, r.recv_mod, r.excess_mod, "mod")):
        maps = _numpy_forward("softmax", eng.SOFTMAX_SNAPS[-1], ids_of(tokens))  # (L, H, T, T)
        T = len(tokens)
        ref = maps.mean(axis=(0, 1, 2))
        np.testing.assert_allclose(recv, ref, atol=1e-5)
        base = np.array([sum(1.0 / t for t in range(j, T + 1)) / T for j in range(1, T + 1)])
        np.testing.assert_allclose(excess, ref - base, atol=1e-5)
        assert r.metrics[f"sink_position_{key}"] == int(np.argmax(ref - base)) + 1
        assert r.metrics[f"sink_excess_{key}"] == pytest.approx(float(np.max(ref - base)), abs=1e-5)
    assert len(r.recv_orig) == len(r.tokens_orig) == len(r.tokens) - 1


def test_dormant_headline_numbers_follow_the_per_head_table(res):
    """The claim detail and the page read: the largest first-token attention at non-trigger queries, the SAME head's
    first-token attention at trigger queries, and the sigmoid row totals at non-trigger vs trigger queries."""
    ds, dg = res.dormant["softmax"], res.dormant["sigmoid"]
    m = res.metrics
    head = np.unravel_index(np.argmax(ds["first_other"]), ds["first_other"].shape)
    assert m["first_at_other_softmax"] == pytest.approx(float(ds["first_other"][head]))
    assert m["first_at_trigger_softmax"] == pytest.approx(float(ds["first_trigger"][head]))
    assert m["sigmoid_mass_other"] == pytest.approx(float(dg["mass_other"].mean()))
    assert m["sigmoid_mass_trigger"] == pytest.approx(float(dg["mass_trigger"].mean()))
    # the sigmoid model switches idle rows off: far less total weight where there is nothing to copy
    assert m["sigmoid_mass_other"] < 0.2 * m["sigmoid_mass_trigger"]


def test_final_losses_are_the_last_fifty_logged_steps_of_the_checkpoints(res):
    """The loss badge compares the mean of the last 50 logged training losses, read here from the checkpoints."""
    for attn, snaps in (("softmax", eng.SOFTMAX_SNAPS), ("sigmoid", eng.SIGMOID_SNAPS)):
        logged = np.asarray(load_state(eng.checkpoint_path(attn, snaps[-1]))["extra"]["loss"], dtype=np.float64)
        assert len(logged) == eng.SHIPPED_STEPS
        np.testing.assert_array_equal(getattr(res, f"loss_{attn}"), logged)
        assert res.metrics[f"final_loss_{attn}"] == pytest.approx(float(logged[-50:].mean()), rel=1e-12)


def test_live_models_have_the_chosen_shape_and_attention_kinds():
    """Live training with two layers: both models have two layers; the sigmoid model's rows are raw (their totals
    vary) while the softmax rows sum to one; both curves start at step 0, where the softmax model attends
    uniformly (alpha = H_T / T) and the sigmoid one scores about 1 / (ctx + 1) per key."""
    steps = 50
    r = eng.run(eng.Config(source="live", live_steps=steps, live_width=16, live_layers=2, n_eval=8))
    T = eng.SHIPPED_ARCH.ctx
    assert r.n_layers == 2 and r.alpha_softmax.shape == r.alpha_sigmoid.shape == (2, eng.SHIPPED_ARCH.n_heads)
    assert r.attn_softmax.shape[:2] == r.attn_sigmoid.shape[:2] == (2, eng.SHIPPED_ARCH.n_heads)
    np.testing.assert_allclose(r.attn_softmax.sum(-1), 1.0, atol=1e-5)
    assert np.abs(r.attn_sigmoid.sum(-1) - 1.0).max() > 0.2
    for kind in ("softmax", "sigmoid"):
        st = getattr(r, f"curve_steps_{kind}")
        assert st[0] == 0 and st[-1] == steps and np.all(np.diff(st) > 0)
    np.testing.assert_allclose(r.alpha_untrained, sum(1.0 / t for t in range(1, T + 1)) / T, atol=3e-3)
    assert r.curve_alpha_sigmoid[0] == pytest.approx(1.0 / (T + 1), rel=0.03)


def test_empty_box_samples_a_chain_sequence_after_the_start_token():
    """With no text the input is ⟨s⟩ plus TEXT_MAX tokens of the chain: ⟨s⟩ once, then a letter, and the backcopy
    rule holds inside the sampled part."""
    r = eng.run(eng.Config(text=""))
    assert r.tokens[0] == "⟨s⟩" and "⟨s⟩" not in r.tokens[1:]
    body = [eng.STOI[c] for c in r.tokens[1:]]
    assert len(body) == eng.TEXT_MAX and body[0] < len(eng.LETTERS)
    for t in range(1, len(body) - 1):
        if eng.is_trigger(body[t]):
            assert body[t + 1] == body[t - 1]


def test_per_layer_summaries_match_loops():
    """sink_share_by_layer: per layer, the share of that layer's heads above eps; key_value_summary: per layer, the
    mean over heads of the first token's norm over the mean over heads of the others' (and the mean cosines)."""
    from types import SimpleNamespace

    rng = np.random.default_rng(8)
    L, H, eps = 3, 4, 0.3
    fake = SimpleNamespace(**{f"alpha_{k}": rng.random((L, H)) for k in ("softmax", "sigmoid", "untrained")})
    got = eng.sink_share_by_layer(fake, eps)
    for kind in ("softmax", "sigmoid", "untrained"):
        a = getattr(fake, f"alpha_{kind}")
        assert got[kind].shape == (L,)
        for la in range(L):
            assert got[kind][la] == sum(a[la, h] > eps for h in range(H)) / H
    kv = {name: rng.random((L, H)) + 0.5 for name in ("k_first", "k_other", "v_first", "v_other",
                                                      "cos_first", "cos_other")}
    summ = eng.key_value_summary(kv)
    for la in range(L):
        mean = {name: sum(kv[name][la]) / H for name in kv}
        assert summ["k_first_over_other"][la] == pytest.approx(mean["k_first"] / mean["k_other"])
        assert summ["v_first_over_other"][la] == pytest.approx(mean["v_first"] / mean["v_other"])
        assert summ["cos_q_k_first"][la] == pytest.approx(mean["cos_first"])
        assert summ["cos_q_k_other"][la] == pytest.approx(mean["cos_other"])


def test_learning_rate_warms_up_then_decays_by_cosine_to_a_tenth(monkeypatch):
    """The learning rate each optimiser step used (read off the optimiser itself): linear warm-up over the first
    steps // 20 steps to the peak, then 0.1 + 0.9 (1 + cos(pi p)) / 2 of the peak, p the share of the post-warm-up
    steps done, which falls monotonically from the peak towards a tenth of it."""
    torch = pytest.importorskip("torch")
    used = []

    class Recorder(torch.optim.AdamW):
        def step(self, *args, **kwargs):
            used.append(self.param_groups[0]["lr"])
            return super().step(*args, **kwargs)

    monkeypatch.setattr(torch.optim, "AdamW", Recorder)
    steps, lr = 60, 3e-3
    eng.train(eng.Arch(d_model=16, n_layers=1, n_heads=2, ctx=8), steps, seed=0, lr=lr, pool_size=200, batch=8)
    used = np.array(used)
    warm = steps // 20
    assert len(used) == steps
    np.testing.assert_allclose(used[:warm], lr * np.arange(1, warm + 1) / warm)
    p = np.arange(steps - warm) / (steps - warm)
    np.testing.assert_allclose(used[warm:], lr * (0.1 + 0.45 * (1 + np.cos(np.pi * p))))
    assert used[warm] == pytest.approx(lr) and np.all(np.diff(used[warm:]) < 0) and used[-1] < 0.11 * lr


# ----------------------------------------------------------------------------- what the page draws and quotes


@pytest.fixture(scope="module")
def zoomed_page():
    """The page opened with the second head zoomed, and the engine's result for the same settings."""
    cfg = eng.Config(zoom_head=2)
    r = eng.run(cfg)
    at = open_page("attention_sink", {"zoom_head": "2"}, seed=(("engine.attention_sink", cfg, r),))
    return at, figures(at), r


def test_page_zoom_and_dormancy_charts_show_the_chosen_head_and_the_named_series(zoomed_page):
    at, figs, r = zoomed_page
    np.testing.assert_allclose(values(figs["zoom-softmax"]["data"][0]["z"]), r.attn_softmax[0, 1])
    np.testing.assert_allclose(values(figs["zoom-sigmoid"]["data"][0]["z"]), r.attn_sigmoid[0, 1])
    want = {"on ⟨s⟩, other queries": r.dormant["softmax"]["first_other"],
            "on ⟨s⟩, trigger queries": r.dormant["softmax"]["first_trigger"],
            "on previous token, trigger queries": r.dormant["softmax"]["prev_trigger"]}
    got = {d["name"]: values(d["y"]) for d in figs["dorm-soft"]["data"]}
    assert set(got) == set(want)
    for name, v in want.items():
        np.testing.assert_allclose(got[name], np.ravel(v), err_msg=name)


def test_page_captions_quote_the_sink_heads_and_the_largest_excess(zoomed_page):
    at, _, r = zoomed_page
    caps = [c.value for c in at.caption]
    # sink heads are those above ε; their value-norm ratio is v_first / v_other per head
    sink = r.alpha_softmax > eng.Config().eps
    v_ratio = np.median((r.kv["softmax"]["v_first"] / r.kv["softmax"]["v_other"])[sink])
    assert any(f"In the {int(sink.sum())} sink heads: median ‖v₁‖ / mean ‖vⱼ‖ = {v_ratio:.2f}," in c for c in caps)
    pos = int(np.argmax(r.excess_orig)) + 1
    tok = r.tokens_orig[pos - 1]
    assert any(f"Largest excess: position {pos} ('{tok}', +{r.excess_orig.max():.2f}) as typed" in c for c in caps)


# ---- added by mutation testing (2026-12-07): each kills a mutant the file above let through ----

def test_training_sequences_follow_the_fixed_chain_whatever_the_seed():
    """Every sequence the training loop draws (its pool and its snapshot sequences), at a seed other than the
    chain's, follows the task's own bigram table bigram_table() (CHAIN_SEED) and the backcopy rule: transition
    counts after three letters, chi-square against the table's rows, as in the sampler test."""

    drawn = []
    real = eng.sample_sequences

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        drawn.append(out)
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(eng, "sample_sequences", spy)
        eng.train(eng.Arch(d_model=16, n_layers=1, n_heads=2, ctx=32), 2, seed=1, pool_size=3000, batch=8)
    assert drawn and drawn[0].shape == (3000, 33)
    x = np.concatenate([d[:, :32] for d in drawn])
    _assert_follows_the_chain(x)


def test_caveat_on_which_head_sinks_in_the_shipped_model(res):
    """The page's caveat: in the shipped 2-head softmax model the head that copies at triggers (most of its
    attention one token back there) is the one that parks on the start token at the other queries; the other
    head also looks back at triggers but is close to the uniform causal share of the start token elsewhere."""
    ds = res.dormant["softmax"]
    assert ds["first_other"].shape == (1, 2)
    sink = int(np.argmax(ds["first_other"][0]))
    other = 1 - sink
    assert ds["prev_trigger"][0, sink] > 0.8 and ds["first_other"][0, sink] > 0.5
    assert ds["first_trigger"][0, sink] < 0.01                     # and does not sink where it copies
    assert ds["prev_trigger"][0, other] > 0.5
    assert abs(ds["first_other"][0, other] - res.metrics["alpha_untrained_mean"]) < 0.03
    assert res.metrics["n_sink_heads"] == 1
