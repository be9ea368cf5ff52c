"""MCQA mechanics: claims on the shipped checkpoint, plus checks the engine did not compute itself
(a NumPy re-implementation of the forward pass, exact identities of patching and of the logit lens)."""

import copy

import numpy as np
import pytest
import torch
from scipy.special import erf

from engine import mcqa_mechanics as eng
from engine.core import InputError
from tests.pagetext import charts, open_page, values


@pytest.fixture(scope="module")
def res():
    return eng.run(eng.Config())


@pytest.fixture(scope="module")
def model():
    m, _ = eng.load_checkpoint("cpu")
    return m


@pytest.fixture(scope="module")
def pairs():
    return eng.make_pairs(48, eng.VARIANTS[0], np.random.default_rng(3))


def _logits(model, ids, patch=None, cache=None):
    with torch.no_grad():
        return model(torch.as_tensor(ids), patch=patch, cache=cache)


def test_claims_pass_at_default(res):
    """Every claim passes with the shipped checkpoint (trained with the next-token loss, training seed 0). The
    middle-layer picture depends on the training run (3 of 5 training seeds, engine docstring), so this checks the
    shipped model, not the recipe; the letter appears after block 2 with lens accuracy 0.88 (bar 0.85)."""
    for c in eng.claims(res):
        assert c.passed, c.describe()
    assert res.metrics["lens_first_layer"] == 2


def test_sudden_rise_is_measured_precisely(res, model):
    """The page's rise (N_LENS fresh prompts) agrees with a twice larger, independent sample to within 3 s.e.;
    on the 64 pair prompts alone it varied from 0.38 to 0.58 between seeds."""
    big = eng.sample_prompts(2 * eng.N_LENS, np.random.default_rng(123_456), p_shuffled=0.0)
    acc = eng.lens_by_layer(model, big, "cpu")["acc"]
    first = int(np.flatnonzero(acc >= eng.LENS_BAR)[0])
    assert first == res.metrics["lens_first_layer"]
    ref = acc[first] - acc[first - 1]
    assert abs(res.metrics["lens_jump"] - ref) < 3 * res.metrics["lens_jump_se"], (res.metrics["lens_jump"], ref)


def test_random_heads_recover_much_less_than_the_top_heads(res):
    assert res.metrics["random_k_recovery_mean"] < res.metrics["topk_recovery"] - 0.3


@pytest.fixture(scope="module")
def shuffled():
    """The shuffled-symbol run, with the prompt batches it fed to the lens and to the forward pass recorded."""
    seen = {"lens": [], "forward": []}
    lens, fwd = eng.lens_by_layer, eng.forward_np

    def lens_spy(model, batch, device):
        seen["lens"].append(batch.perm.copy())
        return lens(model, batch, device)

    def fwd_spy(model, ids, device, patch=None, cache=None):
        seen["forward"].append(np.asarray(ids).copy())
        return fwd(model, ids, device, patch=patch, cache=cache)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(eng, "lens_by_layer", lens_spy)
        mp.setattr(eng, "forward_np", fwd_spy)
        r = eng.run(eng.Config(variant=eng.VARIANTS[1], n_pairs=64))
    return r, seen


def test_shuffled_variant_runs_and_model_reads_shuffled_symbols(shuffled):
    r, _ = shuffled
    assert r.metrics["acc_shuffled"] >= eng.ACC_BAR
    assert r.resid_patch.shape == (r.n_layers + 1, eng.SEQ_LEN)
    # the page's head-patching note quotes the top-k curve at seed 0 for both variants: keep the quote true
    for k, v in eng.QUOTED_TOPK[eng.VARIANTS[1]].items():
        assert abs(r.topk_curve[k - 1] - v) < 0.006, (k, r.topk_curve[k - 1])


def test_quoted_top_k_recovery_in_order_is_the_default_run(res):
    for k, v in eng.QUOTED_TOPK[eng.VARIANTS[0]].items():
        assert abs(res.topk_curve[k - 1] - v) < 0.006, (k, res.topk_curve[k - 1])


def test_checkpoint_is_small_and_loads():
    p = eng.checkpoint_path()
    assert p.exists() and p.stat().st_size < 2 * 1024 * 1024
    m, curve = eng.load_checkpoint("cpu")
    assert m.arch == eng.SHIPPED_ARCH and curve.size > 0


def test_pairs_share_item_and_options_but_not_the_letter(pairs):
    a, b = pairs
    assert np.all(a.answer != b.answer)
    assert np.all(a.ids[:, 1] == b.ids[:, 1])
    assert np.all(np.sort(a.ids[:, eng.OPT_POS], 1) == np.sort(b.ids[:, eng.OPT_POS], 1))
    a2, b2 = eng.make_pairs(48, eng.VARIANTS[1], np.random.default_rng(4))
    assert np.all(a2.answer != b2.answer) and np.all(a2.ids[:, eng.OPT_POS] == b2.ids[:, eng.OPT_POS])
    # the answer really is the symbol in front of the item's colour (checked from the text)
    for ids, ans in zip(a2.ids[:10], a2.answer[:10]):
        words = [eng.VOCAB[i] for i in ids]
        colour = eng.COLOURS[eng.FACTS[eng.ITEMS.index(words[1])]]
        assert words[words.index(colour) - 1] == eng.LETTERS[ans]


def test_prompt_without_the_right_colour_is_rejected():
    item = np.array([0])
    wrong = [c for c in range(len(eng.COLOURS)) if c != eng.FACTS[0]][:4]
    with pytest.raises(InputError):
        eng.make_prompts(item, np.array([wrong]), np.array([[0, 1, 2, 3]]))


def test_hooks_do_not_change_the_forward_pass(model, pairs):
    a, _ = pairs
    cache = {}
    base = _logits(model, a.ids, cache=cache)
    assert torch.equal(base, _logits(model, a.ids))
    assert torch.equal(base, _logits(model, a.ids, patch={}))
    # patching A's own activations back in is a no-op too
    L, H = model.arch.n_layers, model.arch.n_heads
    patch = {("resid", li): (list(range(eng.SEQ_LEN)), cache["resid"][li]) for li in range(L + 1)}
    patch.update({("head", li, h): (list(range(eng.SEQ_LEN)), cache["z"][li][:, h]) for li in range(L) for h in range(H)})
    assert torch.allclose(base, _logits(model, a.ids, patch=patch), atol=1e-6)


def test_patching_the_last_residual_reproduces_prompt_b(model, pairs):
    a, b = pairs
    cb = {}
    lb = _logits(model, b.ids, cache=cb)[:, -1]
    L = model.arch.n_layers
    every = {("resid", li): ([eng.SEQ_LEN - 1], cb["resid"][li]) for li in range(L + 1)}
    assert torch.equal(_logits(model, a.ids, patch=every)[:, -1], lb)
    final = {("resid", L): ([eng.SEQ_LEN - 1], cb["resid"][L])}
    assert torch.equal(_logits(model, a.ids, patch=final)[:, -1], lb)
    whole_input = {("resid", 0): (list(range(eng.SEQ_LEN)), cb["resid"][0])}
    assert torch.allclose(_logits(model, a.ids, patch=whole_input)[:, -1], lb, atol=1e-5)


def test_lens_at_the_last_layer_is_the_model_output(model, pairs):
    a, _ = pairs
    cache = {}
    out = _logits(model, a.ids, cache=cache)[:, -1].numpy()
    lens = eng.lens_by_layer(model, a, "cpu")
    assert np.allclose(lens["full_final"], out, atol=1e-5)
    # and by hand: LayerNorm with NumPy, then the unembedding matrix
    x = cache["resid"][-1][:, -1].numpy().astype(np.float64)
    sd = {k: v.double().numpy() for k, v in model.state_dict().items()}
    xn = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)
    ref = (xn * sd["ln_f.weight"] + sd["ln_f.bias"]) @ sd["unembed.weight"].T
    assert np.allclose(ref, out, atol=1e-4)


def _numpy_forward(sd, arch, ids, head_patch=None, resids=None, attns=None, resid_patch=None):
    """Independent float64 forward pass from the state dict; head_patch = (layer, head, positions, z_src), or a list
    of such; resids, a list, receives the residual stream before block 0, 1, ... and after the last block; attns, a
    list, receives each block's attention pattern (B, H, T, T); resid_patch = (layer, positions, x_src) replaces the
    stream entering that block (layer = n_layers: the final stream) at those positions."""
    if head_patch is not None and not isinstance(head_patch, list):
        head_patch = [head_patch]
    d, H = arch.d_model, arch.n_heads
    dh = d // H

    def ln(x, w, b):
        return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * w + b

    B, T = ids.shape
    x = sd["tok.weight"][ids] + sd["pos.weight"][:T]
    zs = []
    for li in range(arch.n_layers):
        if resid_patch is not None and resid_patch[0] == li:
            x = x.copy()
            x[:, resid_patch[1]] = resid_patch[2][:, resid_patch[1]]
        if resids is not None:
            resids.append(x.copy())
        p = f"blocks.{li}."
        qkv = ln(x, sd[p + "ln1.weight"], sd[p + "ln1.bias"]) @ sd[p + "qkv.weight"].T + sd[p + "qkv.bias"]
        q, k, v = (qkv[..., i * d:(i + 1) * d].reshape(B, T, H, dh).transpose(0, 2, 1, 3) for i in range(3))
        s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(dh)
        s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        z = a @ v
        if attns is not None:
            attns.append(a)
        for pl, h, pos, src in head_patch or ():
            if pl == li:
                z[:, h, pos] = src[:, pos]
        zs.append(z)
        x = x + z.transpose(0, 2, 1, 3).reshape(B, T, d) @ sd[p + "proj.weight"].T + sd[p + "proj.bias"]
        hdn = ln(x, sd[p + "ln2.weight"], sd[p + "ln2.bias"]) @ sd[p + "mlp.0.weight"].T + sd[p + "mlp.0.bias"]
        hdn = 0.5 * hdn * (1 + erf(hdn / np.sqrt(2)))
        x = x + hdn @ sd[p + "mlp.2.weight"].T + sd[p + "mlp.2.bias"]
    if resid_patch is not None and resid_patch[0] == arch.n_layers:
        x = x.copy()
        x[:, resid_patch[1]] = resid_patch[2][:, resid_patch[1]]
    if resids is not None:
        resids.append(x.copy())
    logits = ln(x, sd["ln_f.weight"], sd["ln_f.bias"]) @ sd["unembed.weight"].T
    return logits, zs


def test_head_patching_matches_an_independent_numpy_forward(model, pairs):
    a, b = pairs
    sd = {k: v.double().numpy() for k, v in model.state_dict().items()}
    ref_a, _ = _numpy_forward(sd, model.arch, a.ids)
    assert np.allclose(ref_a, _logits(model, a.ids).numpy(), atol=1e-4)
    _, zb = _numpy_forward(sd, model.arch, b.ids)
    cb = {}
    _logits(model, b.ids, cache=cb)
    for li, h in ((0, 1), (model.arch.n_layers - 1, 2)):
        pos = [eng.SEQ_LEN - 1] if li else list(range(eng.SEQ_LEN))
        ref, _ = _numpy_forward(sd, model.arch, a.ids, head_patch=(li, h, pos, zb[li][:, h]))
        got = _logits(model, a.ids, patch={("head", li, h): (pos, cb["z"][li][:, h])}).numpy()
        assert np.allclose(ref, got, atol=1e-4)


def test_patching_maps_have_the_exact_zeros_and_ones(res):
    r = res.resid_patch
    assert abs(r[-1, -1] - 1.0) < 1e-5  # the final residual at the last position is the whole answer
    assert np.allclose(r[-1, :-1], 0.0, atol=1e-6)  # the final residual elsewhere cannot reach the output
    assert np.allclose(r[0, :3], 0.0, atol=1e-6)  # Q, the item and '?' are the same in both prompts
    assert r[0, -1] == pytest.approx(0.0, abs=1e-6)  # so is the 'Answer' token's embedding


def test_lens_at_every_layer_is_final_norm_then_unembedding_at_the_last_position(model):
    """The vocabulary projection of every layer, rebuilt from an independent NumPy forward pass: the residual
    stream at the 'Answer' position (where the letter is predicted), the final LayerNorm, then W_U; and
    'decodable' is the argmax among the four letters. Index l = the stream after l blocks (0 = embeddings)."""
    b = eng.sample_prompts(300, np.random.default_rng(11), p_shuffled=0.5)
    sd = {k: v.double().numpy() for k, v in model.state_dict().items()}
    resids: list = []
    _numpy_forward(sd, model.arch, b.ids, resids=resids)
    assert len(resids) == model.arch.n_layers + 1
    got = eng.lens_by_layer(model, b, "cpu")
    for li, x in enumerate(resids):
        h = x[:, eng.SEQ_LEN - 1]
        hn = (h - h.mean(1, keepdims=True)) / np.sqrt(h.var(1, keepdims=True) + 1e-5) * sd["ln_f.weight"] + sd["ln_f.bias"]
        letters = (hn @ sd["unembed.weight"].T)[:, eng.LETTER_IDS]
        assert np.allclose(letters, got["letters"][li], atol=1e-3), li
        assert got["acc"][li] == pytest.approx(float((letters.argmax(1) == b.answer).mean()), abs=1e-9)
    # the embedding layer holds the same 'Answer' token at the same position in every prompt: nothing to read
    assert np.ptp(got["letters"][0], axis=0).max() < 1e-5


def test_linear_read_out_agrees_with_scikit_learn(model):
    """The least-squares read-out behind the page's 'the letter is already there' numbers, against
    scikit-learn's RidgeClassifier on the same standardised features and split (same model up to the
    intercept's tiny penalty); the embedding layer, identical in every prompt, reads nothing."""
    from sklearn.linear_model import RidgeClassifier

    b = eng.sample_prompts(eng.N_PROBE, np.random.default_rng(12), p_shuffled=1.0)
    n = eng.N_PROBE // 2
    got = eng.probe_by_layer(model, b, n, "cpu")
    cache = {}
    _logits(model, b.ids, cache=cache)
    x = cache["resid"][:, :, -1].double().numpy()
    for li in range(1, model.arch.n_layers + 1):
        mu, sd = x[li, :n].mean(0), x[li, :n].std(0) + 1e-6
        for name, y in (("letter", b.answer), ("slot", b.slot)):
            clf = RidgeClassifier(alpha=1e-5 * n).fit((x[li, :n] - mu) / sd, y[:n])
            assert abs(got[name][li] - clf.score((x[li, n:] - mu) / sd, y[n:])) <= 0.01, (li, name)
    assert abs(got["letter"][0] - 0.25) < 0.07  # constant input: one class predicted for all


def test_probe_fields_in_result(res):
    assert res.probe_letter.shape == res.probe_slot.shape == (res.n_layers + 1,)
    first = res.metrics["probe_first_layer"]
    assert np.isnan(first) or res.probe_letter[int(first)] >= eng.LENS_BAR


def test_next_token_loss_option_adds_the_uniform_cross_entropy_at_init():
    """The next-token loss (on for the shipped model): at initialisation the logits are nearly
    uniform, so the first step's loss grows by about ln |V| over the same step without it."""
    arch = eng.Arch(d_model=16, n_layers=1, n_heads=2)
    _, base = eng.train(arch, 1, 0, batch=32)
    _, lm = eng.train(arch, 1, 0, batch=32, lm_weight=1.0)
    assert lm[0] - base[0] == pytest.approx(np.log(len(eng.VOCAB)), abs=0.05)


def test_training_seed_survey_matches_the_shipped_model(res):
    """The page's robustness note reads assets/mcqa-mechanics/training_seeds.json (written by `python -m
    engine.mcqa_mechanics seeds`). Its seed-0 row retrains the shipped recipe at the shipped seed, so it must be what
    the shipped checkpoint gives at the default settings: the same lens accuracies and the same badge verdicts."""
    sv = eng.load_training_seeds()
    assert sv is not None
    assert [r["train_seed"] for r in sv["runs"]] == list(eng.TRAINING_SEEDS)
    (row,) = [r for r in sv["runs"] if r["train_seed"] == eng.TRAIN_SEED]
    live = eng.seed_summary(res)
    assert row["lens_acc"] == pytest.approx(live["lens_acc"], abs=1e-4)
    assert row["badges"] == live["badges"] and row["lens_middle"] == live["lens_middle"]
    assert row["lens_first_layer"] == live["lens_first_layer"]
    assert row["topk_recovery"] == pytest.approx(live["topk_recovery"], abs=1e-4)
    for r in sv["runs"]:
        assert len(r["lens_acc"]) == res.n_layers + 1 and r["accuracy_in_order"] >= 0.99


def test_lens_rank_top1_and_mean_logits_match_a_brute_force_count(model):
    """The page's other lens curves, per layer, from the independent NumPy forward pass: the correct letter's rank in
    the whole vocabulary (0 = top; found by sorting), the share of prompts where it is top-1, its mean logit and the
    mean logit of the three other letters."""
    b = eng.sample_prompts(200, np.random.default_rng(13), p_shuffled=0.5)
    sd = {k: v.double().numpy() for k, v in model.state_dict().items()}
    resids: list = []
    _numpy_forward(sd, model.arch, b.ids, resids=resids)
    got = eng.lens_by_layer(model, b, "cpu")
    n = len(b.answer)
    correct_id = eng.LETTER_IDS[b.answer]
    for li, x in enumerate(resids):
        h = x[:, eng.SEQ_LEN - 1]
        hn = (h - h.mean(1, keepdims=True)) / np.sqrt(h.var(1, keepdims=True) + 1e-5) * sd["ln_f.weight"] + sd["ln_f.bias"]
        full = hn @ sd["unembed.weight"].T
        order = np.argsort(-full, axis=1)
        rank = np.array([int(np.flatnonzero(order[i] == correct_id[i])[0]) for i in range(n)])
        # float32 vs float64 may swap a near-tie here and there: a few prompts at most
        assert got["rank"][li] == pytest.approx(rank.mean(), abs=0.05), li
        assert got["top1"][li] == pytest.approx((rank == 0).mean(), abs=0.05), li
        own = full[np.arange(n), correct_id]
        others = np.array([np.mean([full[i, eng.LETTER_IDS[j]] for j in range(4) if j != b.answer[i]]) for i in range(n)])
        assert got["correct_logit"][li] == pytest.approx(own.mean(), abs=1e-3), li
        assert got["other_logit"][li] == pytest.approx(others.mean(), abs=1e-3), li


# ---- mutation round 2: what the page shows, recomputed with the NumPy forward pass ---------------------------------

def _parse(text):
    """Token ids of a prompt from its rendered text ('Q: what colour is <item>? A: red B: blue ... Answer:')."""
    words = text.split()
    assert words[:4] == ["Q:", "what", "colour", "is"] and words[4].endswith("?") and words[-1] == "Answer:"
    toks = ["Q", words[4][:-1], "?"]
    for sym, col in zip(words[5:-1:2], words[6:-1:2]):
        toks += [sym.rstrip(":"), col]
    toks.append("Answer")
    return np.array([[eng.STOI[t] for t in toks]])


def _answer_from_ids(ids):
    words = [eng.VOCAB[i] for i in ids]
    colour = eng.COLOURS[eng.FACTS[eng.ITEMS.index(words[1])]]
    return words[words.index(colour) - 1]


def _state(model):
    return {k: v.double().numpy() for k, v in model.state_dict().items()}


def _ld(logits, a_ans, b_ans):
    last = logits[:, -1]
    n = len(a_ans)
    return float((last[np.arange(n), eng.LETTER_IDS[b_ans]] - last[np.arange(n), eng.LETTER_IDS[a_ans]]).mean())


@pytest.fixture(scope="module")
def default_pairs():
    """The default run's prompt pairs, drawn the way the page's seed draws them."""
    from engine.core import seed_everything

    rng = np.random.default_rng(seed_everything(0).integers(1 << 31))
    return eng.make_pairs(64, eng.VARIANTS[0], rng)


def test_example_panel_follows_the_example_widget(model):
    """Example pair 5: the prompts' texts and answers, the lens chart of prompt A (logit of each letter after every
    block, at the last position) and the top head's attention from the last position, all recomputed from the
    rendered text with the NumPy forward pass."""
    r = eng.run(eng.Config(example=5))
    ids_a, ids_b = _parse(r.example_text_a), _parse(r.example_text_b)
    assert r.example_answer_a == _answer_from_ids(ids_a[0]) and r.example_answer_b == _answer_from_ids(ids_b[0])
    assert r.example_answer_a != r.example_answer_b
    sd = _state(model)
    resids, attns = [], []
    _numpy_forward(sd, model.arch, ids_a, resids=resids, attns=attns)
    for li, x in enumerate(resids):
        h = x[:, -1]
        hn = (h - h.mean(1, keepdims=True)) / np.sqrt(h.var(1, keepdims=True) + 1e-5) * sd["ln_f.weight"] + sd["ln_f.bias"]
        np.testing.assert_allclose(r.example_letters[li], (hn @ sd["unembed.weight"].T)[0, eng.LETTER_IDS], atol=1e-3)
    tl, th = r.top_heads[0]
    assert r.head_patch[tl, th] == r.head_patch.max()
    np.testing.assert_allclose(r.attn_top, attns[tl][0, th, -1], atol=1e-5)
    assert r.attn_top.sum() == pytest.approx(1.0, abs=1e-5)


def test_top_heads_scored_again_on_fresh_pairs(res, model, default_pairs):
    """The heads are ranked on the page's pairs; the fresh-pair curve patches the same top-j sets on new pairs (drawn
    from their own seed, none shared with the page's), recomputed here in the NumPy forward pass. At the default the
    top-k set still clears the head badge's bar there and stays far above the random k-head control, so the ranking
    is not an artefact of the 64 pairs (on 64 pairs single points of the two curves differ by up to ~0.1 by chance)."""
    a, _ = default_pairs
    fa, fb = eng.make_pairs(64, eng.VARIANTS[0], np.random.default_rng(eng.FRESH_SEED + 0))
    assert not set(map(bytes, fa.ids)) & set(map(bytes, a.ids))
    sd = _state(model)
    T = eng.SEQ_LEN
    la, _ = _numpy_forward(sd, model.arch, fa.ids)
    lb, zb = _numpy_forward(sd, model.arch, fb.ids)
    ld_a, ld_b = _ld(la, fa.answer, fb.answer), _ld(lb, fa.answer, fb.answer)
    flat = np.argsort(-res.head_patch, axis=None, kind="stable")
    hs = [np.unravel_index(i, res.head_patch.shape) for i in flat]
    for j in (1, 3, len(res.topk_curve_fresh)):
        lp, _ = _numpy_forward(sd, model.arch, fa.ids, head_patch=[(int(li), int(h), [T - 1], zb[li][:, h])
                                                                   for li, h in hs[:j]])
        assert res.topk_curve_fresh[j - 1] == pytest.approx((_ld(lp, fa.answer, fb.answer) - ld_a) / (ld_b - ld_a),
                                                            abs=2e-3)
    k = int(res.metrics["k"])
    assert res.metrics["topk_recovery_fresh"] == pytest.approx(res.topk_curve_fresh[k - 1], abs=1e-12)
    assert res.metrics["topk_recovery_fresh"] >= eng.HEAD_BAR
    assert res.metrics["random_k_recovery_mean"] < res.metrics["topk_recovery_fresh"] - 0.3


def test_pair_caption_and_patching_maps_recomputed_by_hand(res, model, default_pairs):
    """The caption's pair accuracies and mean logit differences logit[B's letter] − logit[A's letter] (on A, on B),
    then single entries of both patching heatmaps: (Δ_patched − Δ_A) / (Δ_B − Δ_A), the patch done by hand in the
    NumPy forward pass (residual stream at one layer and position; one head's output at the last position)."""
    a, b = default_pairs
    assert eng.render(a.ids[0]) == res.example_text_a and eng.render(b.ids[0]) == res.example_text_b
    sd = _state(model)
    rb: list = []
    la, _ = _numpy_forward(sd, model.arch, a.ids)
    lb, zb = _numpy_forward(sd, model.arch, b.ids, resids=rb)
    m = res.metrics
    ld_a, ld_b = _ld(la, a.answer, b.answer), _ld(lb, a.answer, b.answer)
    assert m["ld_a"] == pytest.approx(ld_a, abs=1e-3) and m["ld_b"] == pytest.approx(ld_b, abs=1e-3)
    assert ld_b - ld_a > eng.MIN_GAP
    assert m["acc_pairs_a"] == float((la[:, -1, eng.LETTER_IDS].argmax(1) == a.answer).mean())
    assert m["acc_pairs_b"] == float((lb[:, -1, eng.LETTER_IDS].argmax(1) == b.answer).mean())
    T = eng.SEQ_LEN
    for li, p in ((2, T - 1), (1, 4), (1, 8), (3, 6)):
        lp, _ = _numpy_forward(sd, model.arch, a.ids, resid_patch=(li, [p], rb[li]))
        assert res.resid_patch[li, p] == pytest.approx((_ld(lp, a.answer, b.answer) - ld_a) / (ld_b - ld_a), abs=2e-3)
    tl, th = res.top_heads[0]
    for li, h in ((tl, th), (0, 0), (model.arch.n_layers - 1, model.arch.n_heads - 1)):
        lp, _ = _numpy_forward(sd, model.arch, a.ids, head_patch=(li, h, [T - 1], zb[li][:, h]))
        assert res.head_patch[li, h] == pytest.approx((_ld(lp, a.answer, b.answer) - ld_a) / (ld_b - ld_a), abs=2e-3)
    # the top-k heads patched together, and the random k-head control sets (k of the L·H heads each)
    k = int(m["k"])
    L, H = model.arch.n_layers, model.arch.n_heads
    lp, _ = _numpy_forward(sd, model.arch, a.ids, head_patch=[(li, h, [T - 1], zb[li][:, h]) for li, h in res.top_heads])
    assert m["topk_recovery"] == pytest.approx((_ld(lp, a.answer, b.answer) - ld_a) / (ld_b - ld_a), abs=2e-3)
    rr = np.random.default_rng(0 + 77)
    ref = []
    for _ in range(eng.N_RANDOM):
        hs = [(int(i // H), int(i % H)) for i in rr.choice(L * H, size=k, replace=False)]
        lp, _ = _numpy_forward(sd, model.arch, a.ids, head_patch=[(li, h, [T - 1], zb[li][:, h]) for li, h in hs])
        ref.append((_ld(lp, a.answer, b.answer) - ld_a) / (ld_b - ld_a))
    np.testing.assert_allclose(res.random_k, ref, atol=2e-3)


def test_head_summary_numbers_follow_the_heatmap_and_the_curve(res, shuffled):
    """The head caption and the info box: the top heads are the k largest single-head recoveries in decreasing order,
    'top k together' is the curve's k-th point, the random control's mean, the smallest k reaching the bar and the
    busiest block (largest summed single-head recovery; block 2 of the shipped model on shuffled prompts)."""
    for r in (res, shuffled[0]):
        m = r.metrics
        k = int(m["k"])
        flat = r.head_patch.ravel()
        top = np.argsort(-flat)[:k]
        assert [la * r.n_heads + h for la, h in r.top_heads] == top.tolist()
        assert m["top_single_recovery"] == flat.max()
        assert m["topk_recovery"] == pytest.approx(r.topk_curve[k - 1], abs=1e-9)
        assert m["random_k_recovery_mean"] == pytest.approx(r.random_k.mean(), abs=1e-12)
        assert m["random_k_recovery_max"] == r.random_k.max()
        need = [j + 1 for j, v in enumerate(r.topk_curve) if v >= eng.HEAD_BAR]
        assert (np.isnan(m["heads_for_bar"]) and not need) or m["heads_for_bar"] == need[0]
        assert m["busiest_block"] == int(np.argmax(r.head_patch.sum(1)))
    assert shuffled[0].metrics["busiest_block"] == 1


def test_example_answers_on_shuffled_symbols_are_read_from_the_text(shuffled):
    """On shuffled-symbol prompts the slot of the right option and its letter differ, so the example's answers must be
    the symbols written in front of the item's colour in each prompt's own text."""
    r, _ = shuffled
    ids_a, ids_b = _parse(r.example_text_a), _parse(r.example_text_b)
    assert r.example_answer_a == _answer_from_ids(ids_a[0]) and r.example_answer_b == _answer_from_ids(ids_b[0])
    assert [eng.VOCAB[i] for i in ids_a[0, eng.OPT_POS]] == [eng.VOCAB[i] for i in ids_b[0, eng.OPT_POS]]


def test_rise_standard_error_is_the_binomial_one(res):
    """The 'sudden rise' badge's s.e.: sqrt((p₁(1 − p₁) + p₀(1 − p₀)) / N_LENS) for the lens accuracies p₀, p₁ of the
    layers before and at the first decodable one."""
    f = int(res.metrics["lens_first_layer"])
    p0, p1 = res.lens_acc[f - 1], res.lens_acc[f]
    assert res.metrics["lens_jump_se"] == pytest.approx(np.sqrt((p0 * (1 - p0) + p1 * (1 - p1)) / eng.N_LENS), rel=1e-12)
    assert res.metrics["lens_jump"] == pytest.approx(p1 - p0, abs=1e-12)


def test_shuffled_variant_measures_shuffled_prompts(shuffled):
    """On the shuffled-symbol variant the lens statistics and prompt A of every pair use shuffled symbols, and the
    'shuffled symbols' accuracy is measured on shuffled prompts (the in-order one on prompts in order)."""
    _, seen = shuffled
    in_order = np.arange(4)
    (lens_perm,) = [p for p in seen["lens"] if len(p) == eng.N_LENS]
    assert (lens_perm == in_order).all(1).mean() < 0.1
    pair_perm = [p for p in seen["lens"] if len(p) == 64]
    assert pair_perm and (pair_perm[0] == in_order).all(1).mean() < 0.2
    evals = [ids for ids in seen["forward"] if len(ids) == eng.N_EVAL]
    assert len(evals) == 2
    letters = [ids[:, eng.SYM_POS] for ids in evals]
    ordered = [(ls == eng.LETTER_IDS).all(1).mean() for ls in letters]
    assert sorted(ordered)[0] < 0.1 and sorted(ordered)[1] == 1.0


def test_middle_layer_badge_fails_when_the_letter_appears_only_in_the_output(monkeypatch):
    """If the lens first reads the letter after the last block, the 'middle layer' badge must fail (the page then
    says 'only in the model's output'); the rise is measured over that last block."""
    acc_out = np.array([0.25, 0.26, 0.3, 0.4, 0.97])
    real = eng.lens_by_layer

    def late(model, batch, device):
        out = real(model, batch, device)
        if len(batch.answer) == eng.N_LENS:
            out = dict(out, acc=acc_out.copy())
        return out

    monkeypatch.setattr(eng, "lens_by_layer", late)
    r = eng.run(eng.Config(n_pairs=32))
    m = r.metrics
    assert m["lens_first_layer"] == 4 and m["lens_middle"] == 0.0
    assert m["lens_jump"] == pytest.approx(0.57)
    middle = next(c for c in eng.claims(r) if c.label == eng.MIDDLE_LABEL)
    assert not middle.passed


def test_prompt_slot_and_answer_are_read_from_the_text():
    """slot = position (0..3) of the item's colour among the options, answer = the letter written before it."""
    bt = eng.sample_prompts(200, np.random.default_rng(14), p_shuffled=1.0)
    for ids, slot, ans in zip(bt.ids, bt.slot, bt.answer):
        words = [eng.VOCAB[i] for i in ids]
        colour = eng.COLOURS[eng.FACTS[eng.ITEMS.index(words[1])]]
        opts = [words[p] for p in eng.OPT_POS]
        assert opts.index(colour) == slot and eng.LETTERS[ans] == _answer_from_ids(ids)
    assert (bt.slot != bt.answer).mean() > 0.5


# ----------------------------------------------------------------------------- what the page draws


def test_page_quotes_the_top_heads_and_draws_each_series_where_it_belongs(res):
    """The default page, read back: the caption names the k heads with the largest single-head recovery (ranked
    here from the recovery matrix itself) with their own values, the random-set point sits at x = k with the mean
    random recovery, the lens panel's two lines are the correct letter's and the other letters' mean logit, and
    the pairs caption gives prompt A's accuracy before prompt B's."""
    import re

    at = open_page("mcqa_mechanics", seed=(("engine.mcqa_mechanics", eng.Config(), res),))
    figs = charts(at)
    k = eng.Config().top_k

    hp = res.head_patch
    flat = np.argsort(-hp, axis=None, kind="stable")[:k]
    cap = next(c.value for c in at.caption if c.value.startswith("Top heads:"))
    quoted = re.findall(r"L(\d+)H(\d+) \((-?[\d.]+)\)", cap)
    assert len(quoted) == k
    for (lay, head, val), idx in zip(quoted, flat):
        la, h = np.unravel_index(idx, hp.shape)
        assert (int(lay), int(head)) == (la + 1, h + 1)
        assert float(val) == pytest.approx(hp[la, h], abs=0.006)

    topk = {t["name"]: (values(t["x"]), values(t["y"])) for t in figs["topk"]}
    xr, yr = topk[f"{k} random heads (mean)"]
    assert xr[np.isfinite(yr)].tolist() == [k]
    assert yr[np.isfinite(yr)][0] == pytest.approx(np.mean(res.random_k))
    np.testing.assert_allclose(topk["top heads, patched together"][1], res.topk_curve)
    np.testing.assert_allclose(topk["same heads, fresh pairs"][1], res.topk_curve_fresh)

    lens = {t["name"]: values(t["y"]) for t in figs["lens-mean"]}
    np.testing.assert_allclose(lens["correct letter"], res.lens_correct)
    np.testing.assert_allclose(lens["other letters (mean)"], res.lens_other)

    # where the top head looks: one softmax row over the positions, in the positions' order
    attn = figs["attn-top"][0]
    assert list(attn["x"]) == list(eng.POS_NAMES)
    np.testing.assert_allclose(values(attn["y"]), res.attn_top, rtol=1e-6)
    assert values(attn["y"]).sum() == pytest.approx(1.0, abs=1e-5)

    m = res.metrics
    pairs = next(c.value for c in at.caption if c.value.startswith("Accuracy on"))
    assert f"prompt A {m['acc_pairs_a']:.3f}, prompt B {m['acc_pairs_b']:.3f}" in pairs
    # logit[B's letter] - logit[A's letter] is negative where A is answered right, positive on B
    assert m["ld_a"] < 0 < m["ld_b"]
    assert f"{m['ld_a']:.2f} on A, {m['ld_b']:.2f} on B" in pairs


# ---- added by mutation testing (2026-12-07): each kills a mutant the file above let through ----

def _log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def test_first_training_loss_is_letter_plus_fact_plus_next_token_cross_entropy_by_hand():
    """The first logged loss (before any update) of a model with large random weights, recomputed in
    NumPy: the answer letter at the last position, the item's colour predicted at the item's position (1),
    and the next token ids[p + 1] predicted at every position p in 0, 2, ..., 10. Large weights make the
    logits far from uniform, so a wrong target or position changes the number."""
    arch = eng.Arch(d_model=16, n_layers=1, n_heads=2)
    torch.manual_seed(5)
    init = eng.build_model(arch)
    with torch.no_grad():
        for p in init.parameters():
            p.normal_(0.0, 0.5)
    ref_model = copy.deepcopy(init).eval()
    _, losses = eng.train(arch, 1, 3, batch=32, init=init, lm_weight=0.7, fact_weight=1.3)
    # train's data stream: default_rng(seed + 1)
    b = eng.sample_prompts(32, np.random.default_rng(3 + 1), p_shuffled=eng.P_SHUFFLED)
    with torch.no_grad():
        lp = _log_softmax(ref_model(torch.as_tensor(b.ids)).double().numpy())
    n = np.arange(32)
    letter = -lp[n, -1, eng.LETTER_IDS[b.answer]].mean()
    colours = [eng.COLOUR_IDS[eng.FACTS[eng.ITEMS.index(eng.VOCAB[i])]] for i in b.ids[:, 1]]
    fact = -lp[n, 1, colours].mean()
    pos = [0] + list(range(2, eng.SEQ_LEN - 1))
    nxt = -np.mean([lp[i, p, b.ids[i, p + 1]] for i in range(32) for p in pos])
    assert losses[0] == pytest.approx(letter + 1.3 * fact + 0.7 * nxt, rel=1e-5)


def test_middle_layer_badge_fails_when_the_letter_fades_after_its_first_layer(monkeypatch):
    """'Decodable in a middle layer ... and stays decodable after it': a lens that reads the letter after
    block 2 but loses it after block 3 must fail the badge, though the first decodable layer is a middle
    one."""
    acc_out = np.array([0.25, 0.3, 0.9, 0.6, 0.97])
    real = eng.lens_by_layer

    def fading(model, batch, device):
        out = real(model, batch, device)
        return dict(out, acc=acc_out.copy()) if len(batch.answer) == eng.N_LENS else out

    monkeypatch.setattr(eng, "lens_by_layer", fading)
    r = eng.run(eng.Config(n_pairs=32))
    assert r.metrics["lens_first_layer"] == 2 and r.metrics["lens_middle"] == 0.0
    middle = next(c for c in eng.claims(r) if c.label == eng.MIDDLE_LABEL)
    assert not middle.passed


def test_untrained_model_has_no_logit_gap_and_fails_every_badge():
    """An untrained model (logits ~ 0) gives prompts A and B almost the same logit difference, so 'recovery'
    is a ratio of noise: the engine must report it as undefined (gap below MIN_GAP) and the head badge, like
    every other badge, must fail."""
    arch = eng.Arch(d_model=16, n_layers=2, n_heads=2)
    torch.manual_seed(0)
    model = eng.build_model(arch).eval()
    r = eng.analyse(model, np.zeros(1), eng.Config(n_pairs=32, top_k=2), "cpu")
    assert abs(r.metrics["ld_gap"]) < eng.MIN_GAP
    assert np.isnan(r.metrics["topk_recovery"]) and np.isnan(r.metrics["topk_recovery_fresh"])
    assert not any(c.passed for c in eng.claims(r))
