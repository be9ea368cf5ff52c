"""RFWave: a multi-band rectified flow that turns a Mel-spectrogram back into a complex STFT, in a few steps."""

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from components import charts, download, layout, state
from components.runner import run_on_upload, run_or_stop
from engine import rfwave as eng
from engine.core import Choice

SLUG = "rfwave"

layout.paper_header(
    SLUG,
    idea=(
        "A vocoder has to invent the phase (and the fine detail) that a Mel-spectrogram throws away. "
        "RFWave does this with a **rectified flow**: a network learns the velocity that carries Gaussian "
        "noise in a straight line to the complex STFT of the real signal, conditioned on the Mel frames. "
        "It works at the level of STFT **frames** (one network position per hop of 64 samples, not per "
        "sample) and cuts the frequency axis into **sub-bands** that one shared network, told which band it "
        "is looking at, generates all at once. Because the learned paths are nearly straight, a handful of "
        "Euler steps suffice, and placing those steps where the trajectory still bends (near the noise end) "
        "helps further. An inverse STFT then gives the waveform, phase included. Here a small model trained "
        "by our script on synthetic speech-like signals reconstructs held-out clips; Griffin-Lim and a "
        "random-phase inversion of the same Mel are the baselines."
    ),
    caveat="Small scale: 8 kHz audio, n_fft 256 / hop 64, 4 bands instead of 8, a ~0.2 M-parameter "
           "network trained for about 21 minutes on one CPU thread on synthetic signals (harmonic 'speech' with "
           "formants, noise bursts, tones, chirps) instead of an 18 M-parameter model trained on LibriTTS. "
           "No classifier-free guidance, no codec-token input. Two changes the tiny network needs: the "
           "equaliser also divides by a smooth envelope read off the Mel (per bin and frame), and the velocity "
           "is a fixed Gaussian skip plus the network's correction (see *How it works*). The real-time factor "
           "is measured on this machine and varies with its load. The spec keeps it out of the pass/fail badges; "
           "the issue lists it among the claims, so it is shown as a badge, but no test checks it (timing is "
           "not asserted in tests) and the 'not reproduced' box below ignores it.",
)

cfg = state.bind_config(eng.Config, SLUG, views=("band_view",))
band_opts = ("all",) + tuple(str(b) for b in range(eng.NUM_BANDS))
band_view = state.bind_view(SLUG, "band_view", Choice(band_opts, "Band view", help="highlight one band"),
                            container=st.sidebar, default="all")
state.share_link(cfg)
layout.device_indicator()

with st.expander("Vocode your own recording (WAV, FLAC, OGG or MP3)", icon=":material/upload_file:"):
    st.caption(f"Up to {eng.MAX_UPLOAD_BYTES // 2**20} MB. The file is mixed to mono, resampled to "
               f"{eng.SR // 1000} kHz, and its loudest {eng.N_SAMPLES / eng.SR:.3f} s (within the first "
               f"{eng.MAX_UPLOAD_SECONDS:.0f} s) are scaled to the training clips' level; its Mel-spectrogram then "
               "goes through RFWave and Griffin-Lim like a test clip. The model has only ever heard synthetic "
               "sounds, so a real recording shows how far that carries. The claims stay measured on the synthetic "
               "test clips, and a shared link cannot carry the file: it opens on the synthetic clip.")
    upload = st.file_uploader("Audio file", type=list(eng.UPLOAD_FORMATS), key=f"{SLUG}:upload")

res = run_on_upload("engine.rfwave", cfg, upload, eng.MAX_UPLOAD_BYTES, label="Vocoding your recording",
                    fallback="The synthetic test clip is shown instead until the file is replaced or removed.")
if res is None:
    res = run_or_stop("engine.rfwave", cfg, label="Sampling the flow")
claims = eng.claims(res)
layout.claims_panel(claims)
m = res.metrics
not_reproduced = [c for c in claims if not c.passed and c.label not in eng.TIMING_CLAIM_LABELS]
if not_reproduced:
    st.info(
        "**Not reproduced at this scale** — " + "; ".join(layout.plain(c.describe()) for c in not_reproduced) + ". "
        f"Measured LSD (mean over {cfg.n_eval} clip(s)): RFWave N = 10 {m['lsd_n10']:.2f} dB, N = 50 "
        f"{m['lsd_n50']:.2f} dB, random phase {m['lsd_random_phase']:.2f} dB, Griffin-Lim (10 it.) "
        f"{m['lsd_gl10']:.2f} dB; N = 4 straightness {m['lsd_straight4']:.2f} vs uniform "
        f"{m['lsd_uniform4']:.2f} dB."
    )
    with st.expander("Diagnosis (this run) and what was tried (offline)"):
        gap = m["diag_loud_gap_db"]
        which = "clip 0" if cfg.n_eval == 1 else f"clips 0–{cfg.n_eval - 1}"
        st.markdown(
            f"**On this run** ({which}, N = 10, straightness grid): the samples' own magnitudes are "
            f"{m['diag_mag_lsd']:.1f} dB (LSD) from the truth and {abs(gap):.1f} dB too "
            f"{'quiet' if gap >= 0 else 'loud'} on the loudest {eng.LOUD_SHARE:.0%} of cells, and their phase is "
            f"incoherent: on those cells the frame-to-frame phase advance is off by {m['diag_adv_err']:.2f} rad "
            f"(Griffin-Lim, 10 it.: {m['diag_adv_err_gl']:.2f}). Given the true phase its magnitudes would score "
            f"{m['diag_true_phase_lsd']:.1f} dB; given the true magnitude its phase {m['diag_true_mag_lsd']:.1f} dB."
        )
        st.markdown(
            "**Offline (training runs, engine docstring):** the pipeline is sound — "
            "the same network trained on one clip alone reaches 5.0 dB there after 1 200 steps (Griffin-Lim "
            "6.35 dB) — but trained on 512 clips it stalls at the random-phase level: validation LSD stayed at "
            "9.6 dB from 1 000 to 12 000 steps (a first run of 4 500 steps gave the same). Our reading: about 3/4 of the noise lies outside the subspace of "
            "consistent STFTs and could be removed by a local linear map, which a 64-channel backbone fed 80 "
            "noisy channels cannot represent (the paper's model has 18 M parameters). Width alone does not "
            "fix it: a 96-wide backbone (0.39 M parameters, 16 000 steps) lowered the training loss from 0.56 to "
            "0.48 but validation LSD (N = 10) only from 9.62 to 9.54 dB (we had fixed a 0.3 dB gain as the bar "
            "for shipping it), and at the default config its ratios would be 0.859 and 1.417. We also tried the "
            "official code's other noise option, z0 = the STFT of white "
            "noise (consistent from the start): with the same network, validation LSD plateaued at 10.0 dB after "
            "9 000 steps (Gaussian prior: 9.6 dB), so it was not shipped."
        )

st.subheader("Listen")
if upload is not None and res.notes:
    st.caption(f"Shown: {res.source}, {layout.literal(upload.name)} — " + "; ".join(res.notes)
               + ". The *Test clip* setting does not apply while a file is loaded.")
else:
    st.caption(f"Shown: {res.source}.")
cols = st.columns(3)
for col, name in zip(cols, ("original", "RFWave", "Griffin-Lim")):
    with col:
        st.markdown(f"**{name}**")
        st.audio(np.clip(res.audio[name], -1, 1), sample_rate=eng.SR)
c1, c2, c3, c4 = st.columns(4)
c1.metric("LSD RFWave (this clip)", f"{m['lsd_shown']:.2f} dB")
c2.metric(f"LSD Griffin-Lim ({cfg.gl_iters} it.)", f"{m['lsd_gl_shown']:.2f} dB")
# short labels: four metrics share a tablet's width (768 px), and a longer label is cut off with an ellipsis
c3.metric("Real-time factor", f"{m['rtf']:.3f}", help="RFWave's wall time / audio duration, measured on this run")
c4.metric("Positions per step", f"{int(m['positions_frames_bands'])}",
          help=f"Network positions per step: frames × bands, vs {int(m['positions_samples'])} for a sample-level "
               "model")

wave_t = np.arange(len(res.audio["original"])) / eng.SR
wave_top = 1.05 * max(float(np.abs(np.clip(res.audio[n], -1, 1)).max()) for n in res.audio) or 1.0   # one shared scale
fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                    subplot_titles=("original", "RFWave", "Griffin-Lim"))
for i, name in enumerate(("original", "RFWave", "Griffin-Lim")):
    fig.add_trace(go.Scatter(x=wave_t, y=np.clip(res.audio[name], -1, 1), mode="lines", name=name, showlegend=False,
                               line=dict(width=1, color=charts.COLORS[i])), row=i + 1, col=1)
    fig.update_yaxes(range=[-wave_top, wave_top], row=i + 1, col=1)
fig.update_xaxes(title="time (s)", row=3, col=1)
charts.themed(fig, "Waveforms of the three players (drag across a stretch to zoom in)", 420)
charts.show(fig, key="waves")
st.caption("Both vocoders rebuild the waveform from magnitudes, so its phase, and with it the shape of each "
           "period, need not match the original's even where they sound alike: LSD above compares spectra, not "
           "samples. Zoom into a few milliseconds to see it.")

st.subheader("1 · Spectrograms (re-analysed from the waveforms)")
times = np.arange(eng.N_FRAMES) * eng.HOP / eng.SR
freqs = np.arange(eng.N_BINS) * eng.SR / eng.N_FFT
edges = [b * eng.BAND * eng.SR / eng.N_FFT for b in range(1, eng.NUM_BANDS)]
cols = st.columns(3)
for i, (col, name) in enumerate(zip(cols, ("original", "RFWave", "Griffin-Lim"))):
    with col:
        z = res.spec_db[name]
        fig = charts.heatmap(z, title=name, x=times, y=freqs, xlabel="time (s)", ylabel="Hz", zmin=-100, zmax=0,
                             colorbar_title="dB", reverse_y=False, height=340)
        # band edges (and the highlighted band) as plain layout shapes: add_hline / add_hrect per line
        # cost more than the heatmap itself on every rerun
        shapes = [dict(type="line", xref="x domain", x0=0, x1=1, yref="y", y0=e, y1=e,
                       line=dict(color="white", width=1, dash="dot")) for e in edges]
        if band_view != "all":
            b = int(band_view)
            lo, hi = b * eng.BAND * eng.SR / eng.N_FFT, (b + 1) * eng.BAND * eng.SR / eng.N_FFT
            shapes.append(dict(type="rect", xref="x domain", x0=0, x1=1, yref="y", y0=lo, y1=hi,
                               line=dict(color="#f4a300", width=2), fillcolor="rgba(0,0,0,0)"))
        fig.update_layout(shapes=shapes)
        charts.show(fig, key=f"spec{i}")
download.download_json({k: np.round(v.astype(np.float64), 2) for k, v in res.spec_db.items()},   # 0.01 dB
                       "rfwave_spectrograms_db.json")
download.download_csv(pd.DataFrame(res.audio), "rfwave_audio.csv")

left, right = st.columns(2)
with left:
    st.subheader("2 · Quality vs steps")
    fig = go.Figure()
    for g, d in res.sweep.items():
        ns = sorted(d)
        fig.add_trace(go.Scatter(x=ns, y=[d[n] for n in ns], mode="lines+markers", name=f"{g} grid"))
    refs = ((m["lsd_random_phase"], "dot", "random phase"), (m["lsd_gl10"], "dash", "Griffin-Lim, 10 it."))
    fig.update_layout(
        shapes=[dict(type="line", xref="x domain", x0=0, x1=1, yref="y", y0=y, y1=y, line=dict(dash=dash))
                for y, dash, _ in refs],
        annotations=[dict(xref="x domain", x=1, xanchor="right", yref="y", y=y, yanchor="bottom", text=text,
                          showarrow=False) for y, _, text in refs])
    charts.themed(fig, "LSD (dB) vs Euler steps, mean over the claim clips, noise seed " + str(cfg.seed), 380)
    fig.update_xaxes(title="N (Euler steps)", type="log")
    fig.update_yaxes(title="LSD (dB)")
    charts.show(fig, key="sweep")
    download.download_csv(pd.DataFrame([{"grid": g, "N": n, "lsd_db": v} for g, d in res.sweep.items()
                                        for n, v in d.items()]
                                       + [{"grid": f"reference line: {text}", "N": None, "lsd_db": y}
                                          for y, _, text in refs]), "rfwave_quality_vs_steps.csv")
    if not cfg.sweep:
        st.caption("Tick *Full quality-vs-steps sweep* under Advanced for N ∈ {1, 2, 4, 6, 10, 20, 50} on both grids.")
with right:
    st.subheader("3 · Straightness and the chosen time points")
    s = res.curve_s
    c = eng.cumulative_straightness(s)          # starts at C(0) = 0, then one value per fine step's end
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=res.curve_t, y=s / max(float(s.max()), 1e-12), mode="lines+markers",
                             name="S(t) (scaled)"))
    fig.add_trace(go.Scatter(x=np.concatenate([res.curve_t, [1.0]]), y=c, mode="lines", name="cumulative C(t)"))
    fig.update_layout(shapes=[dict(type="line", xref="x", x0=float(tk), x1=float(tk), yref="y domain", y0=0, y1=1,
                                   line=dict(color="#e4572e", width=1), opacity=0.6) for tk in res.grid])
    charts.themed(fig, f"Time points for N = {cfg.n_steps} ({cfg.grid}) in red", 380)
    fig.update_xaxes(title="t (0 = noise, 1 = data)")
    charts.show(fig, key="straight")
    download.download_csv(pd.DataFrame({"t": res.curve_t, "S": s, "C_at_step_end": c[1:]}),
                          "rfwave_straightness.csv")
    download.download_csv(pd.DataFrame({"t_k": res.grid}), "rfwave_time_grid.csv")

st.subheader("4 · One STFT value along the Euler path")
fig = go.Figure()
for n, path in sorted(res.traj.items()):
    fig.add_trace(go.Scatter(x=path.real, y=path.imag, mode="lines+markers", name=f"N = {n}",
                             marker=dict(size=4)))
fig.add_trace(go.Scatter(x=[res.traj_target.real], y=[res.traj_target.imag], mode="markers", name="ground truth",
                         marker=dict(symbol="star", size=14, color="black")))
fr, fb = res.traj_point
charts.themed(fig, f"Frame {fr}, bin {fb} ({fb * eng.SR / eng.N_FFT:.0f} Hz): noise → data in the complex plane",
              420)
fig.update_xaxes(title="real")
fig.update_yaxes(title="imaginary", scaleanchor="x", scaleratio=1)
charts.show(fig, key="traj")
st.caption("A different noise seed lands on a different phase; the magnitude (distance from 0) is what the "
           "Mel pins down.")
download.download_csv(pd.DataFrame([{"point": "path", "N": n, "step": k, "re": p.real, "im": p.imag}
                                    for n, path in res.traj.items() for k, p in enumerate(path)]
                                   + [{"point": "ground truth", "N": None, "step": None, "re": res.traj_target.real,
                                       "im": res.traj_target.imag}]),
                      "rfwave_trajectory.csv")

st.subheader("5 · Metrics")
table = pd.DataFrame(res.table)
st.dataframe(table, hide_index=True)
st.caption(f"For scale: a vocoder that works sample by sample would run its network on "
           f"{int(m['positions_samples'])} positions per call for this clip, against RFWave's "
           f"{int(m['positions_frames_bands'])} (frames × bands).")
download.download_csv(table, "rfwave_metrics.csv")

layout.how_it_works(r"""
**Representation.** $S = \mathrm{STFT}(x)/\sqrt{n_\text{fft}}$ (Hann, $n_\text{fft}=256$, hop 64), real and
imaginary parts as channels. Equaliser: $S$ is divided by a smooth envelope $E = W e^{c}$ read off the
conditioning Mel (each Mel band's mean level spread back over its bins; *our addition* — the paper uses per-bin
statistics only), then each bin is standardised with the training set's mean and std.
Condition: $c = \log\max(M|S|, 10^{-5})$ with a 40-band Mel filterbank $M$. Bins 0–127 are cut into 4 bands of
32 bins plus 4 overlap bins on each side; all bands go through **one** network in **one** batch, the band index
$i$ entering through adaptive LayerNorm.

**Rectified flow** ($t=0$ noise, $t=1$ data): $z_0\sim\mathcal N(0,I)$ (the shipped prior; the training
script's `noise=wave` option instead uses the equalised STFT of white noise), $z_t = t z_1 + (1-t) z_0$,
target velocity $u = z_1 - z_0$, prediction $\hat u = f_\theta(z_t, t, c, i)
 = \frac{2t-1}{t^2+(1-t)^2}\,z_t + g_\theta(z_t, t, c, i)$: the first term is the exact velocity if the data
were standard normal (*our addition*: the 64-wide backbone $g_\theta$, which reads the 80 channels of $z_t$ and
the 40 Mel channels, cannot pass $z_t$ through to its output, so it learns only the correction).

$$
\mathcal L = \Big\| \tfrac{\hat u - u}{\sigma_\text{frame}(u)} \Big\|^2
 + 0.01\,\big(\mathcal L_\text{STFT}(z_0+\hat u,\, z_1) + \mathcal L_\text{overlap}\big)
$$

where $\sigma_\text{frame}$ is the per-frame std over channels (quiet frames count as much as loud ones),
$\mathcal L_\text{STFT}$ compares log-magnitudes plus spectral convergence after un-equalising, and
$\mathcal L_\text{overlap}$ makes a band's overlap bins agree with its neighbour's interior.

**Sampling.** $z \leftarrow z + f_\theta(z, t_k, c, i)\,(t_{k+1}-t_k)$ for $k=0..N-1$, merge the bands (drop
overlaps), un-equalise, inverse STFT.

**Time points by straightness.** A 40-step uniform pass gives velocities $v_k$;
$S_k = \operatorname{mean}|v_k - v_\text{final}|$ and $C(t)=\sum_{t_j\le t} S_j / \sum_j S_j$. The $N$ steps are
put where $C$ crosses $k/N$: dense where the velocity still changes, i.e. near the noise end.

**Metric.** Log-spectral distance of the re-analysed waveform

$$
\mathrm{LSD} = \operatorname{mean}_\text{frames}\sqrt{\operatorname{mean}_\text{bins}(20\log_{10}|S| - 20\log_{10}|\hat S|)^2}
$$

(floor $10^{-5}$). Baselines from librosa: Griffin-Lim after NNLS Mel inversion (`mel_to_stft`), and the same
magnitude with uniformly random phase. Real-time factor = wall time of sampling + iSTFT / audio duration.
""")
