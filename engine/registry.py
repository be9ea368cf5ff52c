"""One record per paper of shared/seeds (38 ICLR 2025 papers).

``page`` is the page file (relative to the repo root) once the page is built,
``None`` while it is still "coming". ``module`` is the engine module.
This file imports nothing heavy: app.py reads it at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote_plus

ROOT = Path(__file__).resolve().parents[1]

AREAS = [
    "Interpretability & LM mechanics",
    "LM training & decoding",
    "Reinforcement learning & control",
    "Generative models & transport",
    "Graph learning",
    "3-D vision",
    "Theory, coding, privacy & quantum",
]


@dataclass(frozen=True)
class Paper:
    slug: str
    title: str
    area: str
    summary: str
    arxiv: str | None = None
    openreview: str | None = None
    page: str | None = None
    module: str | None = None
    icon: str = ":material/article:"
    own_data: str = ""          # what a visitor can upload to the page ("" = nothing); its engine has run_upload

    @property
    def url(self) -> str:
        if self.arxiv:
            return f"https://arxiv.org/abs/{self.arxiv}"
        if self.openreview:
            return f"https://openreview.net/forum?id={self.openreview}"
        return "https://arxiv.org/search/?searchtype=title&query=" + quote_plus(self.title)

    @property
    def built(self) -> bool:
        return self.page is not None and (ROOT / self.page).exists()

    @property
    def url_path(self) -> str:
        """The page's URL path segment in the app (st.Page url_path)."""
        return self.slug.replace("-", "_")


I, L, R, G, GR, V, T = AREAS

PAPERS: list[Paper] = [
    # --- interpretability & LM mechanics
    Paper("bilinear-mlp", "Bilinear MLPs enable weight-based mechanistic interpretability", I,
          "A bilinear layer is a quadratic form per output, so eigenvectors of its interaction "
          "matrices explain the weights without any input data.", arxiv="2410.08417",
          page="pages/bilinear_mlp.py", module="engine.bilinear_mlp", own_data="a picture of a digit"),
    Paper("attention-sink", "When Attention Sink Emerges in Language Models: An Empirical View", I,
          "Small decoders learn to dump spare attention on the first token; the sink appears during "
          "training and vanishes with un-normalised sigmoid attention.", arxiv="2410.10781",
          page="pages/attention_sink.py", module="engine.attention_sink"),
    Paper("mcqa-mechanics", "Answer, Assemble, Ace: Understanding How LMs Answer Multiple Choice Questions", I,
          "Vocabulary projection and activation patching locate the few middle-layer heads that "
          "write the answer letter.", arxiv="2407.15018",
          page="pages/mcqa_mechanics.py", module="engine.mcqa_mechanics"),
    Paper("group-compact-proofs", "Towards a Unified and Verified Understanding of Group-Operation Networks", I,
          "One-hidden-layer networks on group multiplication decompose into irreducible "
          "representations, giving a compact accuracy proof cheaper than brute force.", arxiv="2410.07476",
          page="pages/group_compact_proofs.py", module="engine.group_compact_proofs"),
    Paper("icl-ar-ntp", "Towards Auto-Regressive Next-Token Prediction: In-Context Learning Emerges from "
          "Generalization", I,
          "Pretraining on many linear-dynamics 'topics' makes in-context prediction of unseen ones "
          "emerge, with the shapes of a PAC-Bayesian bound beside the measured gap.", arxiv="2502.17024",
          page="pages/icl_ar_ntp.py", module="engine.icl_ar_ntp"),
    Paper("trackstar-tda", "Scalable Influence and Fact Tracing for Large Language Model Pretraining", I,
          "Projected, optimizer-corrected, unit-normalised gradients trace a fact back to the "
          "training examples that caused it, beyond what lexical BM25 finds.", arxiv="2410.17413",
          page="pages/trackstar_tda.py", module="engine.trackstar_tda"),
    # --- LM training & decoding
    Paper("loss-reweighting", "Dynamic Loss-Based Sample Reweighting for Improved Large Language Model "
          "Pretraining", L,
          "Down-weighting low-loss (redundant) samples inside each batch speeds up convergence.",
          arxiv="2502.06733", page="pages/loss_reweighting.py", module="engine.loss_reweighting"),
    Paper("lora-pro", "LoRA-Pro: Are Low-Rank Adapters Properly Optimized?", L,
          "Adjusting LoRA's A and B gradients so the equivalent low-rank gradient is closest to the "
          "full gradient narrows the gap to full fine-tuning.", arxiv="2407.18242",
          page="pages/lora_pro.py", module="engine.lora_pro"),
    Paper("lift", "LiFT: Learning to Fine-Tune via Bayesian Parameter Efficient Meta Fine-Tuning", L,
          "A hierarchical prior over per-task adapters, sampled with SGLD-Gibbs, transfers to "
          "few-shot held-out tasks.", openreview="7nyJBVCTGQ", page="pages/lift.py", module="engine.lift"),
    Paper("integrative-decoding", "Integrative Decoding: Improve Factuality via Implicit Self-Consistency", L,
          "Decode jointly over inputs each prefixed by one sampled answer, averaging next-token "
          "log-probs, to get self-consistency token by token.", arxiv="2410.01556",
          page="pages/integrative_decoding.py", module="engine.integrative_decoding"),
    Paper("mbr-llm-judge", "Better Instruction-Following Through Minimum Bayes Risk", L,
          "Pick the candidate a judge rates best against the others as pseudo-references, then "
          "distil MBR choices back into greedy decoding with DPO.", arxiv="2410.02902",
          page="pages/mbr_llm_judge.py", module="engine.mbr_llm_judge"),
    Paper("docvqa-mia", "DocMIA: Document-Level Membership Inference Attacks against DocVQA Models", L,
          "Tell whether a document was in training from how quickly it can be fitted and from "
          "output behaviour, without auxiliary data.", page="pages/docvqa_mia.py", module="engine.docvqa_mia"),
    # --- RL & control
    Paper("residual-mppi", "Residual-MPPI: Online Policy Customization for Continuous Control", R,
          "Plan around a prior policy with MPPI, adding its log-likelihood to a new objective, to "
          "customise behaviour at execution time.", arxiv="2407.00898",
          page="pages/residual_mppi.py", module="engine.residual_mppi"),
    Paper("safety-representations", "Safety Representations for Safer Policy Learning", R,
          "Append a learned distribution of steps-to-cost to the state so the agent explores "
          "with fewer constraint violations.", arxiv="2502.20341",
          page="pages/safety_representations.py", module="engine.safety_representations"),
    Paper("pqn", "Simplifying Deep Temporal Difference Learning", R,
          "LayerNorm makes off-policy TD stable without target networks or replay; vectorised "
          "Q-learning (PQN) trains fast.", arxiv="2407.04811",
          page="pages/pqn.py", module="engine.pqn"),
    Paper("mad-td", "MAD-TD: Model-Augmented Data stabilizes High Update Ratio RL", R,
          "Mixing a few model-generated transitions into high update-to-data TD learning keeps "
          "the critic accurate where more updates on real data alone make it drift.", arxiv="2410.08896",
          page="pages/mad_td.py", module="engine.mad_td"),
    Paper("softmoe-tokenization", "Don't flatten, tokenize! Unlocking the key to SoftMoE's efficacy in deep RL", R,
          "Most of SoftMoE's gain in deep RL comes from tokenising the encoder output, not from "
          "having many experts.", arxiv="2410.01930", page="pages/softmoe_tokenization.py",
          module="engine.softmoe_tokenization"),
    Paper("blendrl", "BlendRL: A Framework for Merging Symbolic and Neural Policy Learning", R,
          "A learned gate blends a neural policy with differentiable logic rules over object "
          "predicates.", arxiv="2410.11689",
          page="pages/blendrl.py", module="engine.blendrl"),
    Paper("gap-dependent-q", "Gap-Dependent Bounds for Q-Learning using Reference-Advantage Decomposition", R,
          "With a positive suboptimality gap, the regret of advantage-based Q-learning grows "
          "only like log T.", arxiv="2410.07574",
          page="pages/gap_dependent_q.py", module="engine.gap_dependent_q"),
    # --- generative & transport
    Paper("rfwave", "RFWave: Multi-band Rectified Flow for Audio Waveform Reconstruction", G,
          "A rectified flow generates complex STFT frames of all sub-bands from mel in about ten "
          "Euler steps.", arxiv="2403.05010", page="pages/rfwave.py", module="engine.rfwave",
          own_data="an audio recording"),
    Paper("calnf", "Rare event modeling with self-regularized normalizing flows: what can we learn from a "
          "single failure?", G,
          "Calibrated normalizing flows learn a failure distribution from a handful of samples by "
          "regularising against nominal data.", arxiv="2502.21110",
          page="pages/calnf.py", module="engine.calnf"),
    Paper("deep-ruot", "Learning Stochastic Dynamics from Snapshots through Regularized Unbalanced Optimal "
          "Transport", G,
          "Recover velocity, growth and diffusion of a population from time snapshots with "
          "regularised unbalanced OT.", openreview="gQlxd3Mtru",
          page="pages/deep_ruot.py", module="engine.deep_ruot"),
    Paper("unbalanced-fm", "Composing Unbalanced Flows for Flexible Docking and Relaxation", G,
          "Flow matching on an unbalanced coupling trades sample efficiency for a more accurate "
          "transport.", openreview="gHLWTzKiZV",
          page="pages/unbalanced_fm.py", module="engine.unbalanced_fm"),
    Paper("tabwak", "TabWak: A Watermark for Tabular Diffusion Models", G,
          "Watermark synthetic tables through self-cloned, shuffled latent seeds and detect it by "
          "inverting rows to latents.",
          page="pages/tabwak.py", module="engine.tabwak"),
    Paper("diffusion-planning", "What Makes a Good Diffusion Planner for Decision Making?", G,
          "A diffusion planner over maze trajectories: sampling many plans unconditionally and "
          "picking the best by a learned value does at least as well as guided sampling.", arxiv="2503.00535",
          page="pages/diffusion_planning.py", module="engine.diffusion_planning"),
    Paper("implicit-preference-motion", "Direct Post-Training Preference Alignment for Multi-Agent Motion "
          "Generation Models Using Implicit Feedback from Pre-training Demonstrations", G,
          "Rank a model's own samples by closeness to expert demonstrations and align it with "
          "DPO, no human labels needed.", arxiv="2503.20105",
          page="pages/implicit_preference_motion.py", module="engine.implicit_preference_motion"),
    # --- graphs
    Paper("spectral-rewiring", "GNNs Getting ComFy: Community and Feature Similarity Guided Rewiring", GR,
          "Raising or lowering the spectral gap mostly changes community strength; community- "
          "and feature-guided rewiring help GNNs directly.", arxiv="2502.04891",
          page="pages/spectral_rewiring.py", module="engine.spectral_rewiring"),
    Paper("ub-gold", "Unifying Unsupervised Graph-Level Anomaly Detection and Out-of-Distribution "
          "Detection: A Benchmark", GR,
          "One benchmark for graph-level anomaly and OOD detection across four scenario types; "
          "no detector wins everywhere.", arxiv="2406.15523",
          page="pages/ub_gold.py", module="engine.ub_gold"),
    Paper("mixture-of-graphs", "Graph Sparsification via Mixture of Graphs", GR,
          "Each node picks among sparsifier experts; the mixed sparse graph keeps GNN accuracy "
          "and speeds up inference.", arxiv="2405.14260",
          page="pages/mixture_of_graphs.py", module="engine.mixture_of_graphs"),
    Paper("jl-dynamic-graph-metric", "Quality Measures for Dynamic Graph Generative Models", GR,
          "Random projections of event streams give a scalar metric between dynamic graphs with "
          "no snapshots.", arxiv="2503.01720",
          page="pages/jl_dynamic_graph_metric.py", module="engine.jl_dynamic_graph_metric",
          own_data="an event stream (CSV)"),
    # --- 3-D
    Paper("densematcher", "DenseMatcher: Learning 3D Semantic Correspondence for Category-Level "
          "Manipulation from a Single Demo", V,
          "Dense correspondences between meshes through functional maps on Laplace-Beltrami "
          "eigenbases, used to transfer colour.", arxiv="2412.05268",
          page="pages/densematcher.py", module="engine.densematcher", own_data="3-D meshes"),
    # --- theory, coding, privacy, quantum
    Paper("inference-set-design", "Efficient Biological Data Acquisition through Inference Set Design", T,
          "Label the hardest examples and predict the rest; a stopping rule halts once the whole "
          "system reaches its target accuracy.", arxiv="2410.19631",
          page="pages/inference_set_design.py", module="engine.inference_set_design"),
    Paper("crossmpt", "CrossMPT: Cross-attention Message-Passing Transformer for Error Correcting Codes", T,
          "A transformer decoder whose magnitude and syndrome embeddings exchange messages through "
          "parity-check-masked cross-attention.", arxiv="2405.01033",
          page="pages/crossmpt.py", module="engine.crossmpt"),
    Paper("qnn-ansatz", "Exploring channel distinguishability in local neighborhoods of the model space in "
          "quantum neural networks", T,
          "How distinguishable a QNN's output states are under small parameter changes, versus "
          "how close the ansatz is to a 2-design.", arxiv="2410.09470",
          page="pages/qnn_ansatz.py", module="engine.qnn_ansatz"),
    Paper("mup-local-learning", "Local Loss Optimization in the Infinite Width: Stable Parameterization of "
          "Predictive Coding Networks and Target Propagation", T,
          "Under muP the best learning rate of predictive coding transfers across widths (the paper "
          "also treats target propagation; the page does not).", arxiv="2411.02001",
          page="pages/mup_local_learning.py", module="engine.mup_local_learning"),
    Paper("moe-continual", "Theory on Mixture-of-Experts in Continual Learning", T,
          "A gated mixture of linear experts forgets less than one expert, provided gating updates "
          "stop after enough rounds.", arxiv="2406.16437", page="pages/moe_continual.py",
          module="engine.moe_continual"),
    Paper("dp-bandmf", "Scaling up the Banded Matrix Factorization Mechanism for Differentially Private ML", T,
          "Banded correlated-noise strategies for DP training, optimised and evaluated fast at "
          "very large n.", arxiv="2405.15913", page="pages/dp_bandmf.py", module="engine.dp_bandmf"),
    Paper("multiview-clustering", "COPER: Correlation-based Permutations for Multi-View Clustering", T,
          "End-to-end multi-view clustering from a permutation-based canonical-correlation objective "
          "and consistent pseudo-labels.", arxiv="2402.16383", page="pages/multiview_clustering.py",
          module="engine.multiview_clustering"),
]

BY_SLUG: dict[str, Paper] = {p.slug: p for p in PAPERS}


def get(slug: str) -> Paper:
    return BY_SLUG[slug]


def built_papers() -> list[Paper]:
    return [p for p in PAPERS if p.built]

# Short names for the navigation sidebar.
SHORT = {
    "bilinear-mlp": "Bilinear MLPs", "attention-sink": "Attention sink", "mcqa-mechanics": "MCQA mechanics",
    "group-compact-proofs": "Group-operation proofs", "icl-ar-ntp": "ICL from next-token prediction",
    "trackstar-tda": "TrackStar fact tracing", "loss-reweighting": "Loss-based reweighting",
    "lora-pro": "LoRA-Pro", "lift": "LiFT", "integrative-decoding": "Integrative decoding",
    "mbr-llm-judge": "MBR with LLM judges", "docvqa-mia": "DocMIA", "residual-mppi": "Residual-MPPI",
    "safety-representations": "Safety representations", "pqn": "PQN (simplified TD)", "mad-td": "MAD-TD",
    "softmoe-tokenization": "SoftMoE: tokenize", "blendrl": "BlendRL", "gap-dependent-q": "Gap-dependent Q-learning",
    "rfwave": "RFWave", "calnf": "CalNF", "deep-ruot": "DeepRUOT", "unbalanced-fm": "Unbalanced flow matching",
    "tabwak": "TabWak", "diffusion-planning": "Diffusion planning", "implicit-preference-motion":
    "Preference alignment for motion", "spectral-rewiring": "ComFy rewiring", "ub-gold": "UB-GOLD",
    "mixture-of-graphs": "Mixture of graphs", "jl-dynamic-graph-metric": "JL dynamic-graph metric",
    "densematcher": "DenseMatcher", "inference-set-design": "Inference set design", "crossmpt": "CrossMPT",
    "qnn-ansatz": "QNN distinguishability", "mup-local-learning": "μP for local learning",
    "moe-continual": "MoE in continual learning", "dp-bandmf": "DP-BandMF", "multiview-clustering": "COPER clustering",
}


def short_name(paper: Paper) -> str:
    return SHORT.get(paper.slug, paper.title)
