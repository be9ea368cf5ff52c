import numpy as np
import pandas as pd
import streamlit as st

from components import charts, download, layout, state
from components.runner import run_or_stop
from engine import mcqa_mechanics as eng

SLUG = "mcqa-mechanics"


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _letter_share_note() -> str:
    """'the letter before the output at k of n training seeds', counted from the retraining survey file."""
    sv = eng.load_training_seeds()
    if sv is None:
        return ""
    k = sum(bool(r["lens_middle"]) for r in sv["runs"])
    return (f" Across the {len(sv['runs'])} training seeds of the retraining survey (`python -m "
            f"engine.mcqa_mechanics seeds`, the shipped one included) the letter shows before the output at {k}: "
            "at this scale the picture depends on the training run.")


def _training_seeds_note() -> str:
    """The retraining survey behind the robustness note, from the file `python -m engine.mcqa_mechanics seeds` writes
    (lens at page seed 0)."""
    sv = eng.load_training_seeds()
    if sv is None:
        return "(The retraining survey file is missing; `python -m engine.mcqa_mechanics seeds` writes it.)"
    others = [r for r in sv["runs"] if r["train_seed"] != eng.TRAIN_SEED]
    mid = [r for r in others if r["lens_middle"]]
    out = [r for r in others if not r["lens_middle"]]
    L = len(others[0]["lens_acc"]) - 1
    text = (f"Retrained at {len(others)} other seeds (`python -m engine.mcqa_mechanics seeds`, about 2.5 minutes "
            f"each; measured {sv.get('measured', '?')}), the same recipe puts the letter in vocabulary space before "
            f"the output at {len(mid)} of them")
    if mid:
        text += (f" (seed{'s' if len(mid) > 1 else ''} {_and([str(r['train_seed']) for r in mid])}, after "
                 + _and([f"block {int(r['lens_first_layer'])}" for r in mid]) + ")")
    if out:
        late = _and([format(r["lens_acc"][L - 1], ".2f") for r in out])
        text += (f"; at seed{'s' if len(out) > 1 else ''} {_and([str(r['train_seed']) for r in out])} the lens reads "
                 f"it only in the output ({late} after block {L - 1})")
    acc = min(min(r["accuracy_in_order"], r["accuracy_shuffled"]) for r in sv["runs"])
    return text + (f". Every one of these runs answers both prompt kinds with accuracy {'' if acc >= 0.995 else 'at least '}"
                   f"{acc:.2f}.")

layout.paper_header(
    SLUG,
    idea=(
        "When a language model answers a multiple-choice question, it has to do two things: work out which "
        "option is right, and then say the *symbol* written in front of that option (A, B, C or D). The "
        "paper traces where the second step happens. Projecting the residual stream of each layer onto the "
        "vocabulary (the *logit lens*) shows that the answer letter is unreadable in early layers and shows "
        "up suddenly at one layer; activation patching between two prompts whose correct letters differ "
        "shows that a handful of attention heads carry the letter to the last position, and the same "
        "story holds when the symbols are written in an unusual order. Here a small decoder is trained on "
        "a synthetic quiz: every made-up word has a fixed colour that the model must memorise, and a "
        "question such as *Q: what colour is mula? A: blue B: orange C: red D: white Answer:* must be "
        "answered with the letter of the right colour. Many of the training questions write the symbols in "
        f"a shuffled order (*C: blue A: orange …*; {eng.P_SHUFFLED:.0%} of them), so the model cannot just "
        "count positions. Everything "
        "below (the lens, every patching run) is computed live on the trained model."
    ),
    caveat=(
        f"Scale: a {eng.SHIPPED_ARCH.n_layers}-layer decoder with {eng.SHIPPED_ARCH.n_heads} heads per layer "
        f"and d = {eng.SHIPPED_ARCH.d_model}, trained offline for {eng.SHIPPED_STEPS + eng.RESUME_STEPS} steps on a synthetic "
        "grammar (next-token loss at every position, as in pretraining, plus the answer letter), against the "
        "paper's 7B–70B language models on real benchmarks (MMLU and others). With so "
        "few layers, \"middle layers\" can only mean \"neither the first nor the last\": the page measures "
        "where the letter becomes readable and how many heads carry it, it does not reproduce the paper's "
        "layer numbers. The paper's study of training checkpoints and of real-world prompt formats is not "
        "reproduced."
    ),
)

cfg = state.bind_config(eng.Config, SLUG)
state.share_link(cfg)
layout.device_indicator()
res = run_or_stop("engine.mcqa_mechanics", cfg, label="Patching the MCQA model")
m = res.metrics
layout.claims_panel(eng.claims(res))

L, H = res.n_layers, res.n_heads
layer_names = ["embed"] + [f"after L{i + 1}" for i in range(L)]

st.subheader("The example pair")
st.markdown(f"**Prompt A** (answer **{res.example_answer_a}**): `{res.example_text_a}`  \n"
            f"**Prompt B** (answer **{res.example_answer_b}**): `{res.example_text_b}`")
st.caption(f"Accuracy on {cfg.n_pairs} pairs: prompt A {m['acc_pairs_a']:.3f}, prompt B {m['acc_pairs_b']:.3f}. "
           f"Mean logit difference logit[B's letter] − logit[A's letter]: {m['ld_a']:.2f} on A, {m['ld_b']:.2f} on B.")

# --- logit lens ----------------------------------------------------------------------------------
st.subheader("Vocabulary projection of the residual stream (last position)")
left, right = st.columns(2)
with left:
    charts.show(charts.lines(layer_names, {c: res.example_letters[:, i] for i, c in enumerate(eng.LETTERS)},
                             title=f"Example prompt A: logit of each symbol (answer {res.example_answer_a})",
                             xlabel="residual stream", ylabel="logit", mode="lines+markers", height=340),
                key="lens-example")
with right:
    charts.show(charts.lines(layer_names, {"correct letter": res.lens_correct, "other letters (mean)": res.lens_other},
                             title=f"{eng.N_LENS} fresh prompts: mean logit", xlabel="residual stream",
                             ylabel="logit", mode="lines+markers", height=340), key="lens-mean")
charts.show(charts.lines(layer_names, {"lens accuracy among A–D": res.lens_acc,
                                       "correct letter top-1 in the whole vocabulary": res.lens_top1,
                                       "linear read-out of the letter (shuffled prompts)": res.probe_letter,
                                       "linear read-out of the right slot (shuffled prompts)": res.probe_slot},
                         title=f"Is the answer decodable? (lens: {eng.N_LENS} fresh prompts; bar {eng.LENS_BAR}, "
                               "chance 0.25)", xlabel="residual stream",
                         ylabel="accuracy", mode="lines+markers", height=320), key="lens-acc")
st.caption(f"The lens reads the residual stream with the model's own final LayerNorm and unembedding. The linear "
           f"read-out instead fits a least-squares classifier on {eng.N_PROBE // 2} shuffled-symbol prompts and "
           f"scores it on {eng.N_PROBE // 2} others: it shows whether the letter is *in* the stream at all, in "
           "any direction. On shuffled prompts the letter and the slot of the right option differ, so the "
           "slot line is the control: a high letter line means the symbol itself has been fetched.")
first = m["lens_first_layer"]
if not np.isfinite(first):
    st.warning("The answer letter never becomes decodable under the lens on these prompts.")
elif m["lens_middle"]:
    st.caption(f"The letter becomes decodable at '{layer_names[int(first)]}', before the last block, and stays "
               "decodable: the paper's 'middle layer' picture holds here.")
    st.info("How robust this is (offline training runs): the shipped model is one training run (seed 0, fixed "
            "beforehand) of a recipe that adds a next-token loss at every position, as in language-model pretraining. "
            + _training_seeds_note() + " The earlier recipe, trained on the answer letter and the "
            "item's colour only, showed it at one training seed of three, and not in the model shipped before: "
            "there the letter was already in the residual stream after block 2-3 (linear read-out ~0.7 and ~0.9) but "
            "in a direction the unembedding does not read, and the last block translated it. At this scale the middle-layer picture is a likely outcome "
            "of LM-style training, not a certain one.", icon=":material/info:")
else:
    pl, LL = res.probe_letter, L - 1
    st.info(f"Not reproduced on these prompts: the letter first becomes decodable at '{layer_names[int(first)]}', "
            "i.e. only in the model's output, not in a middle layer. The lens is the paper's vocabulary "
            "projection (final LayerNorm, then the unembedding, at the 'Answer' position, judged among the four "
            "letters)."
            + (f" The letter itself is already in the stream: the linear read-out finds it after block {LL} "
               f"({pl[LL]:.2f} on shuffled prompts, against {res.probe_slot[LL]:.2f} for the slot), while the lens "
               f"there reads {res.lens_acc[LL]:.2f}, so it is held in a direction the unembedding does not read."
               if pl[LL] >= eng.LENS_BAR else
               f" The linear read-out after block {LL} finds the letter on {pl[LL]:.2f} of shuffled prompts "
               f"(slot {res.probe_slot[LL]:.2f}), the lens {res.lens_acc[LL]:.2f}.")
            + _letter_share_note(),
            icon=":material/info:")
download.download_csv(pd.DataFrame({"layer": layer_names, "lens_accuracy": res.lens_acc,
                                    "mean_rank_of_correct_letter": res.lens_rank,
                                    "top1_in_vocabulary": res.lens_top1,
                                    "mean_logit_correct": res.lens_correct, "mean_logit_others": res.lens_other,
                                    "probe_letter_accuracy": res.probe_letter, "probe_slot_accuracy": res.probe_slot,
                                    **{f"example_logit_{c}": res.example_letters[:, i]
                                       for i, c in enumerate(eng.LETTERS)}}), "logit_lens.csv")

# --- residual patching -----------------------------------------------------------------------------
st.subheader("Activation patching: residual stream")
st.caption("Run prompt A, but replace the residual stream at one layer and one position with prompt B's; "
           "the colour shows the share of the logit difference that moves to B's value (0: no effect, "
           "1: the model now answers like on B).")
charts.show(charts.heatmap(res.resid_patch, x=list(eng.POS_NAMES), y=["enter L1"] + [f"after L{i + 1}" for i in range(L)],
                           title="Logit-difference recovery, layer × position", xlabel="position",
                           ylabel="residual stream", zmin=-0.2, zmax=1.0, colorbar_title="recovery",
                           height=360), key="resid-heat")
download.download_csv(pd.DataFrame(res.resid_patch, columns=list(eng.POS_NAMES),
                                   index=["enter L1"] + [f"after L{i + 1}" for i in range(L)]).reset_index(
    names="residual_stream"), "residual_patching.csv")

# --- head patching -----------------------------------------------------------------------------------
st.subheader("Activation patching: attention heads")
st.caption(f"Replace one head's output (at the {cfg.head_positions}) with prompt B's. Right: the top heads "
           "patched together, against random sets of the same size. The heads are ranked on the page's pairs, so "
           "the line 'same heads, fresh pairs' scores the same head sets again on as many fresh pairs that played "
           "no part in ranking them: a ranking that only fitted the noise of these pairs would drop there.")
left, right = st.columns(2)
with left:
    charts.show(charts.heatmap(res.head_patch, x=[f"H{h + 1}" for h in range(H)], y=[f"L{i + 1}" for i in range(L)],
                               title="Single-head recovery", xlabel="head", ylabel="layer", zmin=-0.2, zmax=1.0,
                               colorbar_title="recovery", height=340), key="head-heat")
with right:
    ks = np.arange(1, len(res.topk_curve) + 1)
    random_point = np.where(ks == int(m["k"]), m["random_k_recovery_mean"], np.nan)
    charts.show(charts.lines(ks, {"top heads, patched together": res.topk_curve,
                                  "same heads, fresh pairs": res.topk_curve_fresh,
                                  f"{int(m['k'])} random heads (mean)": random_point},
                             title="Joint recovery of the top-k heads", xlabel="k", ylabel="recovery",
                             mode="lines+markers", height=340), key="topk")
st.caption("Top heads: " + ", ".join(f"L{la + 1}H{h + 1} ({res.head_patch[la, h]:.2f})" for la, h in res.top_heads)
           + f". Top {int(m['k'])} together: {m['topk_recovery']:.2f} (on fresh pairs "
           f"{m['topk_recovery_fresh']:.2f}); random sets of {int(m['k'])}: "
           f"{m['random_k_recovery_mean']:.2f} on average.")
if m["topk_recovery"] < eng.HEAD_BAR:
    busiest = int(m["busiest_block"])
    need = m["heads_for_bar"]
    st.info(f"The top {int(m['k'])} heads move less than {eng.HEAD_BAR:.0%} of the logit difference here. Block "
            f"{busiest + 1}'s heads share the work (single-head recoveries "
            + ", ".join(f"{v:.2f}" for v in res.head_patch[busiest])
            + ("), and no top set of up to " f"{len(res.topk_curve)} heads reaches the bar." if np.isnan(need) else
               f"); the top {int(need)} heads together reach it (raise 'Heads patched together').")
            + " With the shipped model at seed 0 the default k falls short on shuffled-symbol prompts ("
            + ", ".join(f"top {k}: {v:.2f}" for k, v in eng.QUOTED_TOPK[eng.VARIANTS[1]].items())
            + ") but not on prompts in order ("
            + ", ".join(f"top {k}: {v:.2f}" for k, v in eng.QUOTED_TOPK[eng.VARIANTS[0]].items())
            + ").", icon=":material/info:")
la, h = res.top_heads[0]
charts.show(charts.bars(list(eng.POS_NAMES), res.attn_top,
                        title=f"Where the top head L{la + 1}H{h + 1} looks from the last position (example A)",
                        ylabel="attention", text_fmt=".2f", height=320), key="attn-top")
download.download_csv(pd.DataFrame([{"layer": i + 1, "head": j + 1, "recovery": res.head_patch[i, j]}
                                    for i in range(L) for j in range(H)]), "head_patching.csv")
download.download_csv(pd.DataFrame({"k": ks, "joint_recovery_top_k": res.topk_curve,
                                    "joint_recovery_top_k_fresh_pairs": res.topk_curve_fresh,
                                    "random_k_heads_mean": random_point}), "top_k_heads.csv")
download.download_csv(pd.DataFrame({"position": list(eng.POS_NAMES), "attention": res.attn_top}),
                      "top_head_attention.csv")

layout.how_it_works(r"""
**Task.** A fixed table maps 32 made-up words to 8 colours. A prompt is
`Q <item> ? s1 <c1> s2 <c2> s3 <c3> s4 <c4> Answer` where exactly one $c_i$ is the item's colour and
$(s_1,\dots,s_4)$ is A B C D in order or (70 % of the training prompts) shuffled. The target is the symbol
$s_i$ in front of the right colour. The loss is cross-entropy on that letter at the last position, plus
cross-entropy on the item's colour at the item's own position (a stand-in for the facts a language model has
learned in pretraining before it ever sees a quiz; without it, this small model stalls on a plateau), plus the
next-token cross-entropy at every other position, as in language-model pretraining.

**Model.** A pre-LayerNorm decoder: $x_0 = E[t] + P[\text{pos}]$,
$x_{l+1} = x_l + \mathrm{Attn}_l(\mathrm{LN}(x_l)) + \mathrm{MLP}_l(\ldots)$,
logits $= W_U\,\mathrm{LN}_f(x_L)$; head $h$ writes $z_{l,h}W_O^{(h)}$ with $z_{l,h}=\mathrm{softmax}(q k^\top/\sqrt{d_h})\,v$.

**Logit lens.** For every layer, $\mathrm{LN}_f$ and $W_U$ are applied to the residual stream $x_l$ at the last
position; "decodable" means that among the four letters the right one has the largest projected logit on at least
85 % of the prompts. At $l = L$ this is exactly the model's output.

**Linear read-out.** Next to the lens (not a claim): at each layer, least squares from the standardised residual
stream at the last position onto one-hot targets (the letter, or the slot of the right option), fitted on half of
a set of shuffled-symbol prompts and scored by argmax on the other half.

**Activation patching.** For pairs $(A, B)$ with the same item but different correct letters $a \neq b$, let
$\Delta = \mathrm{logit}_b - \mathrm{logit}_a$ at the last position. Running $A$ with one activation copied from
$B$ gives $\Delta_{\text{patch}}$, and the recovery is
$(\overline{\Delta}_{\text{patch}} - \overline{\Delta}_A) / (\overline{\Delta}_B - \overline{\Delta}_A)$ (means
over pairs). A residual location is $x_l$ at one position; a head location is $z_{l,h}$ at the last position
(or at every position). The top-$k$ heads are ranked by single-head recovery and then patched together.
""")
