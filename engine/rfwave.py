"""RFWave at small scale: a multi-band rectified flow that generates complex STFT frames from a log-Mel.

Signals are synthesised (speech-like harmonic signals with formants, noise bursts, tones and chirps) at
8 kHz. The STFT, the Mel filterbank, Griffin-Lim and the Mel inversion come from librosa. A small
ConvNeXt-style network, shared by all sub-bands (band index -> adaptive LayerNorm), predicts the
velocity of a rectified flow from Gaussian noise (t = 0) to the equalised banded STFT (t = 1); sampling
integrates it with a few Euler steps placed by the straightness of the trajectory.

Two departures from the paper's recipe, both needed by the tiny backbone (measured: without them the model
loses to a random-phase inversion):
- the equaliser divides S by a smooth per-(bin, frame) envelope read off the conditioning log-Mel before the
  per-bin standardisation with training-set statistics, so every time-frequency cell enters the flow at
  about unit scale (the paper's equaliser uses per-bin statistics only; its network is ~100x larger);
- the velocity is a fixed linear skip c(t) z_t (the exact velocity for standard-normal data) plus the
  network's output: a 64-wide backbone cannot copy its 80 input channels through to its output.

Training (no page can afford it live): ``python -m engine.rfwave train`` writes assets/rfwave/rfwave_small.pt
(shipped: 12 000 steps, lr 1e-3, 21 min on one CPU thread).

A user's recording can take the shown clip's place (``run_upload``; ``decode_upload`` turns a WAV / FLAC / OGG / MP3
file into an 8 kHz, 1.024 s clip). The claims are always measured on the synthetic held-out clips.

Why two claims fail (measured; see the page): the data path is sound (channels, equaliser and band split
round-trip exactly, t = 0 is noise in the loss and in the sampler, every band reads its own clip's Mel), and
the same network trained on ONE clip reaches LSD 5.0 dB there after 1 200 steps (Griffin-Lim, 10 it.: 6.35).
Trained on 512 clips it stalls at the random-phase level: validation LSD (N = 10) 9.63 dB from step 1 000
to 12 000 while the RF loss only moves 0.61 -> 0.56. Its samples' own magnitudes are 8.4 dB (LSD) from the
truth, 3.8 dB too quiet on loud cells, and their phase is incoherent (frame-to-frame phase-advance error on
the strongest 2 % of cells 1.27 rad; Griffin-Lim 0.57). Every run now measures this (``spectral_diagnosis``, shown
in the page's diagnosis box; default: 8.4 dB; 6.4 dB too quiet on the loudest 2 % of the true cells; phase-advance
error 1.10 rad vs Griffin-Lim 0.57, both waveforms re-analysed; true phase 5.7 dB, true magnitude 6.8 dB). The 1.27
above was read off the generated STFT itself, and the 3.8 dB on another set of loud cells. About 3/4 of the noise
lies outside the subspace of consistent STFTs and is exactly predictable from z_t by a local linear map; our
reading is that the 64-wide backbone, fed 80 noisy channels, cannot represent that map (a scalar Gaussian skip
cannot either). Width 96
does fit the default-run budget now (see the capacity test below), but it does not help.

Tried and not shipped (rule fixed beforehand: ship only if validation LSD at N = 10 beats the shipped 9.62 dB):
the official code's "wave" noise option (``train noise=wave``; z0 is the equalised STFT of band-limited white noise, so
every z_t is a consistent STFT once un-equalised). Same network and data, 9 000 steps, 17 min on one thread:
validation LSD (N = 10) 11.03 dB at step 1 000, 10.09 at 4 000, 10.03 at 9 000 -- a plateau above the
Gaussian prior's 9.62 dB, so removing the inconsistent part of the noise alone does not unlock coherent phase.

Capacity test (rule fixed before training): with the app pre-importing librosa/torch, the default run costs
~1.5-1.9 s, so a backbone up to ~1.6x slower fits. A wider checkpoint is shipped only if (a) its validation LSD at
N = 10 (``_val_lsd``, the same 4 held-out validation clips and uniform grid as above) beats the shipped 9.62 dB
by at least 0.3 dB, i.e. <= 9.32 dB, and (b) the default ``run(Config())`` stays under 2.8 s (median of 3,
in a process where ``components.prewarm.warm()`` has run). Otherwise the 64-wide checkpoint stays.
Result: not shipped. ``train dim=96 steps=16000`` (0.39 M parameters vs 0.20 M; recipe otherwise identical:
512 clips, batch 8, crop 64, lr 1e-3 cosine, AdamW, seed 0), 39 min on one thread. The RF loss fell well below
the 64-wide model's (64 vs 96 wide: 0.61 vs 0.56 at step 1 000, 0.56 vs 0.48 at 12 000) but validation LSD
(N = 10) barely moved: 9.61 dB at step 1 000, 9.59 at 2 000, 9.58 at 3 000-4 000, 9.56 at 5 000-6 000, 9.54-9.56 from
7 000 to 16 000, 9.54 at the end (64-wide, same steps: 9.60, 9.63, 9.63, 9.62, 9.60, 9.64, 9.63, ...; 9.62 at
12 000). Gain 0.08 dB < 0.3 dB, so rule (a) fails; (b) holds (default run 2.38 s vs 1.87 s for width 64,
medians of 3 with the checkpoint load, after prewarm). At the default config it would have given LSD(N = 10)
8.69 dB (64-wide: 8.76), ratio to random phase 0.859 (0.866; needs <= 0.8) and to Griffin-Lim 10 it. 1.417
(1.429; needs < 1). Doubling the parameters lowers the training loss without making the phase coherent: the
stall is not a matter of width alone at this scale.

Under- or overfitting? (2026-12-05, shipped checkpoint, ``_val_lsd``.) LSD at N = 10 / 50 Euler steps: 8 of the
512 *training* clips 10.12 / 10.14 dB, the 4 validation clips 9.62 / 9.62, 8 fresh clips 9.71 / 9.72. The model is
no better on clips it trained on, so more (synthetic, hence unlimited) data would not help; and 50 steps give what
10 give, so the sampler is not the limit either: the learned flow itself stops at the random-phase level.
"""

from __future__ import annotations

import io
import math
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from engine.core import Bool, Choice, Claim, InputError, Int, check_upload, param, report, seed_everything

SR = 8000
N_FFT = 256
HOP = 64
N_SAMPLES = 8192                 # 1.024 s
N_FRAMES = N_SAMPLES // HOP + 1  # 129 (centred)
N_BINS = 128                     # bins 0..127 are modelled; the Nyquist bin is set to 0
N_MELS = 40
NUM_BANDS = 4
BAND = N_BINS // NUM_BANDS       # 32 interior bins per band
OV = 4                           # overlap bins on each side
BW = BAND + 2 * OV               # 40 bins per band
CH = 2 * BW                      # re + im channels per band
FLOOR = 1e-5
CKPT_NAME = "rfwave/rfwave_small.pt"
TRAIN_SEED0 = 1000
EVAL_CLIPS = 8
SWEEP_N = (1, 2, 4, 6, 10, 20, 50)
FINE_STEPS = 40
NOISE_FLOOR = 1e-3
WAVE_NOISE_FMAX = 3850.0         # Hz; the "wave" noise is white below it (the Nyquist bin is not modelled)


# ----------------------------------------------------------------------------------------------------------
# Synthetic audio
# ----------------------------------------------------------------------------------------------------------

def _smooth_track(rng, n, lo, hi, seg_lo, seg_hi):
    """Piecewise-linear random targets in [lo, hi], a new one every seg_lo..seg_hi samples."""
    knots_t, knots_v, t = [0], [rng.uniform(lo, hi)], 0
    while t < n:
        t += int(rng.uniform(seg_lo, seg_hi))
        knots_t.append(t)
        knots_v.append(rng.uniform(lo, hi))
    return np.interp(np.arange(n), knots_t, knots_v)


def synth_clip(seed: int, n: int = N_SAMPLES, sr: int = SR) -> np.ndarray:
    """One seeded synthetic clip, peak 0.5: speech-like (80 %) or a tone / chirp sweep (20 %)."""
    rng = np.random.default_rng(int(seed) + 7919)
    t = np.arange(n) / sr
    if rng.random() < 0.2:
        f_a, f_b = rng.uniform(150, 3000, size=2)
        kind = rng.integers(3)
        if kind == 0:        # steady tone with two partials
            f = np.full(n, f_a)
        elif kind == 1:      # linear chirp
            f = np.linspace(f_a, f_b, n)
        else:                # exponential sweep
            f = f_a * (f_b / f_a) ** (t / t[-1])
        ph = 2 * np.pi * np.cumsum(f) / sr
        x = np.sin(ph) + 0.3 * np.where(2 * f < 3900, np.sin(2 * ph + 1.0), 0.0)
        env = np.clip(np.minimum(t, t[-1] - t) / 0.02, 0, 1)
        x = x * env
    else:
        f0 = _smooth_track(rng, n, 90, 260, 0.15 * sr, 0.35 * sr)
        f0 = f0 * (1 + 0.02 * np.sin(2 * np.pi * 5 * t + rng.uniform(0, 6.3)))
        ph = 2 * np.pi * np.cumsum(f0) / sr
        formants = [(_smooth_track(rng, n, lo, hi, 0.12 * sr, 0.25 * sr), bw)
                    for lo, hi, bw in ((300, 900, 80), (900, 2500, 120), (2300, 3500, 180))]
        x = np.zeros(n)
        for k in range(1, 45):
            fk = k * f0
            live = fk < 3800
            if not live.any():
                break
            amp = k ** -1.2 * sum(1.0 / (1 + ((fk - fc) / bw) ** 2) for fc, bw in formants)
            x += np.where(live, amp * np.sin(k * ph), 0.0)
        # syllables: raised-cosine envelopes with silent gaps
        env = np.zeros(n)
        pos = int(rng.uniform(0, 0.1) * sr)
        while pos < n:
            length = int(rng.uniform(0.12, 0.3) * sr)
            seg = np.arange(length)
            w = 0.5 - 0.5 * np.cos(2 * np.pi * seg / length)
            end = min(n, pos + length)
            env[pos:end] = np.maximum(env[pos:end], w[: end - pos])
            pos += length + int(rng.uniform(0.03, 0.12) * sr)
        x = x * env
        # unvoiced bursts of band-limited noise (2-4 kHz)
        for _ in range(rng.integers(1, 4)):
            c = int(rng.uniform(0, n))
            length = int(rng.uniform(0.03, 0.08) * sr)
            noise = rng.standard_normal(n)
            spec = np.fft.rfft(noise)
            fr = np.fft.rfftfreq(n, 1 / sr)
            spec[(fr < 2000) | (fr > 3900)] = 0
            noise = np.fft.irfft(spec, n)
            w = np.exp(-0.5 * ((np.arange(n) - c) / (length / 2)) ** 2)
            x += 0.6 * np.max(np.abs(x) + 1e-9) * noise / (np.max(np.abs(noise)) + 1e-9) * w
    x = x / (np.max(np.abs(x)) + 1e-9) * 0.5
    x = x + NOISE_FLOOR * rng.standard_normal(n)     # a recording's noise floor (about -54 dB re peak)
    return x.astype(np.float32)


# ----------------------------------------------------------------------------------------------------------
# STFT / Mel (librosa) and the banded representation
# ----------------------------------------------------------------------------------------------------------

def stft(x: np.ndarray) -> np.ndarray:
    """Complex STFT (bins 0..128, frames) scaled by 1/sqrt(n_fft), Hann window, centred."""
    import librosa

    return librosa.stft(np.asarray(x, np.float32), n_fft=N_FFT, hop_length=HOP, window="hann",
                        center=True) / math.sqrt(N_FFT)


def istft(S: np.ndarray, length: int = N_SAMPLES) -> np.ndarray:
    """Inverse of ``stft``; S may hold 128 bins (the Nyquist bin is then taken as 0)."""
    import librosa

    S = np.asarray(S)
    if S.shape[-2] == N_BINS:
        S = np.concatenate([S, np.zeros_like(S[..., :1, :])], axis=-2)
    return librosa.istft(S * math.sqrt(N_FFT), hop_length=HOP, window="hann", center=True, length=length)


_MEL = None


def mel_basis() -> np.ndarray:
    global _MEL
    if _MEL is None:
        import librosa

        _MEL = librosa.filters.mel(sr=SR, n_fft=N_FFT, n_mels=N_MELS).astype(np.float32)
    return _MEL


def log_mel(S: np.ndarray) -> np.ndarray:
    """log(max(M |S|, 1e-5)), shape (n_mels, frames)."""
    return np.log(np.maximum(mel_basis() @ np.abs(S), FLOOR)).astype(np.float32)


def split_bands(z):
    """(..., 2, 128, T) -> (..., B, 2*BW, T): bands of 32 bins plus 4 overlap bins a side (zero-padded)."""
    import torch

    pad = torch.nn.functional.pad(z, (0, 0, OV, OV))
    bands = [pad[..., :, i * BAND: i * BAND + BW, :] for i in range(NUM_BANDS)]
    out = torch.stack(bands, dim=-4)                     # (..., B, 2, BW, T)
    return out.reshape(*out.shape[:-3], CH, out.shape[-1])


def merge_bands(zb):
    """Inverse of split_bands: keep each band's interior bins (overlaps are dropped)."""
    import torch

    zb = zb.reshape(*zb.shape[:-2], 2, BW, zb.shape[-1])
    return torch.cat([zb[..., i, :, OV:OV + BAND, :] for i in range(NUM_BANDS)], dim=-2)


def to_channels(S: np.ndarray) -> np.ndarray:
    """Complex (>=128 bins, T) -> real (2, 128, T)."""
    S = S[:N_BINS]
    return np.stack([S.real, S.imag]).astype(np.float32)


def from_channels(z: np.ndarray) -> np.ndarray:
    return z[0] + 1j * z[1]


def lsd(ref: np.ndarray, est: np.ndarray) -> float:
    """Log-spectral distance in dB between two waveforms, after STFT analysis of both."""
    a = np.maximum(np.abs(stft(ref)[:N_BINS]), FLOOR)
    b = np.maximum(np.abs(stft(est)[:N_BINS]), FLOOR)
    d = 20 * np.log10(a) - 20 * np.log10(b)
    return float(np.mean(np.sqrt(np.mean(d ** 2, axis=0))))


LOUD_SHARE = 0.02   # the diagnosis looks at the strongest 2 % of time-frequency cells of the true STFT


def spectral_diagnosis(clip: np.ndarray, S_gen: np.ndarray, wav_gl: np.ndarray) -> dict[str, float]:
    """Where a generated STFT falls short of the clip's own: magnitude or phase.

    mag_lsd: LSD between the generated magnitudes and the true ones (no re-analysis); loud_gap_db: mean dB by
    which the generated magnitude is below the truth on the loudest LOUD_SHARE of cells; true_phase_lsd /
    true_mag_lsd: LSD of the waveform made from the generated magnitude with the true phase / the true magnitude with
    the generated phase; adv_err / adv_err_gl: mean |phase-advance error| (frame to frame, wrapped, radians) on the
    loudest cells, of the generated waveform and of Griffin-Lim's, both re-analysed by the STFT.
    """
    S_true = stft(clip)[:N_BINS]
    G = np.asarray(S_gen)[:N_BINS]
    a, b = np.maximum(np.abs(S_true), FLOOR), np.maximum(np.abs(G), FLOOR)
    d = 20 * np.log10(a) - 20 * np.log10(b)
    loud = a >= np.quantile(a, 1.0 - LOUD_SHARE)

    def adv_err(wave: np.ndarray) -> float:
        E = stft(wave)[:N_BINS]
        adv_e = E[:, 1:] * np.conj(E[:, :-1])
        adv_t = S_true[:, 1:] * np.conj(S_true[:, :-1])
        err = np.abs(np.angle(adv_e * np.conj(adv_t)))
        return float(err[loud[:, 1:]].mean())

    return {"mag_lsd": float(np.mean(np.sqrt(np.mean(d ** 2, axis=0)))),
            "loud_gap_db": float(d[loud].mean()),
            "true_phase_lsd": lsd(clip, istft(np.abs(G) * np.exp(1j * np.angle(S_true)))),
            "true_mag_lsd": lsd(clip, istft(np.abs(S_true) * np.exp(1j * np.angle(G)))),
            "adv_err": adv_err(istft(G)), "adv_err_gl": adv_err(wav_gl)}


# ----------------------------------------------------------------------------------------------------------
# Network (small ConvNeXt-V2 backbone with band-conditioned adaptive LayerNorm)
# ----------------------------------------------------------------------------------------------------------

def _build_model(dim: int = 64, n_blocks: int = 4, skip: bool = True):
    import torch
    from torch import nn

    class AdaLN(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.scale = nn.Embedding(NUM_BANDS, d)
            self.shift = nn.Embedding(NUM_BANDS, d)
            nn.init.ones_(self.scale.weight)
            nn.init.zeros_(self.shift.weight)
            self.d = d

        def forward(self, x, band):          # x: (N, T, d)
            x = nn.functional.layer_norm(x, (self.d,), eps=1e-6)
            return x * self.scale(band)[:, None, :] + self.shift(band)[:, None, :]

    class GRN(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.gamma = nn.Parameter(torch.zeros(1, 1, d))
            self.beta = nn.Parameter(torch.zeros(1, 1, d))

        def forward(self, x):                # x: (N, T, d)
            g = torch.norm(x, p=2, dim=1, keepdim=True)
            nx = g / (g.mean(dim=-1, keepdim=True) + 1e-6)
            return self.gamma * (x * nx) + self.beta + x

    class Block(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.dw = nn.Conv1d(d, d, 7, padding=3, groups=d)
            self.norm = AdaLN(d)
            self.pw1 = nn.Linear(d, 3 * d)
            self.grn = GRN(3 * d)
            self.pw2 = nn.Linear(3 * d, d)

        def forward(self, x, band, temb):    # x: (N, d, T)
            x = x + temb[:, :, None]
            h = self.dw(x).transpose(1, 2)
            h = self.pw2(self.grn(nn.functional.gelu(self.pw1(self.norm(h, band)))))
            return x + h.transpose(1, 2)

    class Backbone(nn.Module):
        def __init__(self):
            super().__init__()
            self.dim = dim
            self.embed = nn.Conv1d(CH + N_MELS, dim, 7, padding=3)
            self.norm0 = AdaLN(dim)
            self.tmlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
            self.blocks = nn.ModuleList(Block(dim) for _ in range(n_blocks))
            self.out_norm = nn.LayerNorm(dim, eps=1e-6)
            self.out = nn.Linear(dim, CH)
            # log-Mel standardisation (training-set statistics, set by the training script)
            self.register_buffer("mel_mu", torch.zeros(1, N_MELS, 1))
            self.register_buffer("mel_sd", torch.ones(1, N_MELS, 1))

        def time_embedding(self, t):
            half = self.dim // 2
            freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device) / half)
            a = 1000.0 * t[:, None] * freqs[None]
            return self.tmlp(torch.cat([torch.sin(a), torch.cos(a)], dim=1))

        def forward(self, zt, t, mel, band):
            """zt: (N, CH, T), t: (N,), mel: (N, N_MELS, T), band: (N,) long -> velocity (N, CH, T)."""
            x = self.embed(torch.cat([zt, (mel - self.mel_mu) / self.mel_sd], dim=1))
            x = self.norm0(x.transpose(1, 2), band).transpose(1, 2)
            temb = self.time_embedding(t)
            for blk in self.blocks:
                x = blk(x, band, temb)
            v = self.out(self.out_norm(x.transpose(1, 2))).transpose(1, 2)
            if skip:
                # fixed linear skip: the exact velocity E[z1 - z0 | z_t] if the (equalised) data were N(0, I).
                # The 64-wide backbone cannot copy its 80 input channels through to the output, so it
                # learns only the correction to this Gaussian baseline.
                c = (2 * t - 1) / (t ** 2 + (1 - t) ** 2)
                v = v + c[:, None, None] * zt
            return v

    return Backbone()


# ----------------------------------------------------------------------------------------------------------
# Flow: equaliser, losses, sampler, time grids
# ----------------------------------------------------------------------------------------------------------

_ENV_W = None


def mel_envelope(mel):
    """Per-(bin, frame) magnitude envelope read off the log-Mel (known at inference), (..., 128, T).

    Each Mel band's mean magnitude (its value divided by its filter's weight sum) is spread back onto the
    bins it covers, weighted by the filter: a smooth spectral envelope at the Mel resolution, floored.
    """
    import torch

    global _ENV_W
    if _ENV_W is None:
        m = mel_basis()[:, :N_BINS].astype(np.float64)                   # (n_mels, 128)
        cover = m.sum(axis=0)
        w = (m / np.maximum(cover, 1e-12)[None, :]).T @ np.diag(1.0 / m.sum(axis=1))   # (128, n_mels)
        for b in np.where(cover <= 1e-12)[0]:                              # bins no filter covers (DC)
            nb = int(np.argmin(np.where(cover > 1e-12, np.abs(np.arange(N_BINS) - b), 1e9)))
            w[b] = w[nb]
        _ENV_W = torch.tensor(w, dtype=torch.float32)
    return torch.matmul(_ENV_W, torch.exp(mel)) + 1e-4


def equalise(z, mean, std, env=None):
    """(..., 2, 128, T) -> per-bin standardised values of S / env (env: Mel envelope, (..., 128, T))."""
    if env is not None:
        z = z / env[..., None, :, :]
    return (z - mean[..., None]) / std[..., None]


def unequalise(z, mean, std, env=None):
    z = z * std[..., None] + mean[..., None]
    if env is not None:
        z = z * env[..., None, :, :]
    return z


def make_noise(kind: str, mel, mean, std, generator, env=None):
    """The flow's starting point z0, banded and equalised: (C, N_MELS, T) -> (C, B, CH, T).

    "gauss": z0 ~ N(0, I) in the equalised domain (the paper's default).
    "wave": z0 = equalise(c * STFT(w)) with w white Gaussian noise of the clip's length and c one scalar per
    clip, chosen so the equalised channels have unit RMS; un-equalised it is c * STFT(w), an exactly
    consistent STFT (so is every z_t on the way to the data).
    """
    import torch

    nc, _, nt = mel.shape
    if kind == "gauss":
        return torch.randn((nc, NUM_BANDS, CH, nt), generator=generator)
    if kind != "wave":
        raise InputError(f"unknown noise type {kind!r}")
    env = mel_envelope(mel) if env is None else env
    w = torch.randn((nc, (nt - 1) * HOP), generator=generator).numpy()
    # band-limit below the Nyquist bin (which is not modelled) so that dropping it keeps the STFT consistent
    spec = np.fft.rfft(w, axis=-1)
    spec[:, np.fft.rfftfreq(w.shape[-1], 1 / SR) > WAVE_NOISE_FMAX] = 0
    w = np.fft.irfft(spec, w.shape[-1], axis=-1).astype(np.float32)
    nz = torch.tensor(np.stack([to_channels(stft(x)) for x in w]))            # (C, 2, 128, T)
    scaled = nz / env[:, None] / std[None, :, :, None]
    c = 1.0 / torch.sqrt(torch.mean(scaled ** 2, dim=(1, 2, 3), keepdim=True)).clamp_min(1e-12)
    return split_bands(equalise(c * nz, mean, std, env))


def rf_losses(model, z1b, mel, mean, std, t=None, z0=None, generator=None):
    """RFWave training losses for a batch. z1b: (C, B, CH, T) equalised banded data, mel: (C, N_MELS, T)."""
    import torch

    nc, nb, ch, nt = z1b.shape
    if z0 is None:
        z0 = torch.randn(z1b.shape, generator=generator)
    if t is None:
        t = torch.rand(nc, generator=generator)
    tt = t[:, None, None, None]
    zt = tt * z1b + (1 - tt) * z0
    u = z1b - z0
    band = torch.arange(nb).repeat(nc)
    uh = model(zt.reshape(nc * nb, ch, nt), t.repeat_interleave(nb), mel.repeat_interleave(nb, 0), band)
    uh = uh.reshape(nc, nb, ch, nt)
    # time/energy-balanced RF loss: per-frame scale from the target's variance over channels
    scale = torch.sqrt(u.var(dim=2, keepdim=True) + 1e-6)
    l_rf = torch.mean(((uh - u) / scale) ** 2)
    # magnitude-domain STFT loss on the implied clean estimates
    env = mel_envelope(mel)
    s_hat = unequalise(merge_bands(z0 + uh), mean, std, env)
    s_ref = unequalise(merge_bands(z1b), mean, std, env)
    m_hat = torch.sqrt(s_hat[:, 0] ** 2 + s_hat[:, 1] ** 2 + 1e-10)
    m_ref = torch.sqrt(s_ref[:, 0] ** 2 + s_ref[:, 1] ** 2 + 1e-10)
    l_mag = torch.mean((torch.log10(m_hat.clamp_min(FLOOR)) - torch.log10(m_ref.clamp_min(FLOOR))) ** 2)
    l_sc = torch.norm(m_hat - m_ref) / (torch.norm(m_ref) + 1.0)
    # overlap loss: neighbours must agree where their bins coincide
    est = (z0 + uh).reshape(nc, nb, 2, BW, nt)
    right_ov = est[:, :-1, :, BAND + OV:, :]          # band i's right overlap bins
    next_in = est[:, 1:, :, OV:2 * OV, :]            # band i+1's first interior bins
    left_ov = est[:, 1:, :, :OV, :]                  # band i+1's left overlap bins
    prev_in = est[:, :-1, :, BAND:BAND + OV, :]      # band i's last interior bins
    l_ov = 0.5 * (torch.mean((right_ov - next_in) ** 2) + torch.mean((left_ov - prev_in) ** 2))
    total = l_rf + 0.01 * (l_mag + l_sc + l_ov)
    return total, {k: float(v.detach()) for k, v in (("rf", l_rf), ("mag", l_mag), ("sc", l_sc), ("overlap", l_ov))}


def euler(velocity, z0, grid, trace=None):
    """Integrate dz/dt = velocity(z, t) from grid[0] to grid[-1] with explicit Euler steps."""
    z = z0
    vs = []
    for k in range(len(grid) - 1):
        v = velocity(z, float(grid[k]))
        vs.append(v)
        z = z + v * float(grid[k + 1] - grid[k])
        if trace is not None:
            trace(k, z)
    return z, vs


def uniform_grid(n: int) -> np.ndarray:
    return np.linspace(0.0, 1.0, int(n) + 1)


def cumulative_straightness(s: np.ndarray) -> np.ndarray:
    """C(t) on the fine grid's end points (t_0 = 0, ..., 1): cumulative S normalised to end at 1."""
    c = np.concatenate([[0.0], np.cumsum(s)])
    return c / max(float(c[-1]), 1e-12)


def straightness_grid(curve_t: np.ndarray, s: np.ndarray, n: int) -> np.ndarray:
    """Place n steps where the cumulative straightness C(t) crosses k/n of its total (nearest fine point)."""
    c = cumulative_straightness(s)
    fine = np.concatenate([curve_t, [1.0]])
    pts = [0.0]
    for k in range(1, n):
        j = int(np.argmin(np.abs(c - k / n)))
        tk = float(fine[j])
        pts.append(tk)
    pts.append(1.0)
    pts = np.unique(np.round(pts, 6))
    # if two crossings hit the same fine point, fill the gap with uniform points
    while len(pts) < n + 1:
        gaps = np.diff(pts)
        i = int(np.argmax(gaps))
        pts = np.sort(np.append(pts, 0.5 * (pts[i] + pts[i + 1])))
    return pts


class Vocoder:
    """The trained model plus the equaliser statistics and stored time grids."""

    def __init__(self, model, mean, std, grids: dict[int, np.ndarray] | None = None, curve=None, meta=None,
                 noise: str = "gauss"):
        self.model = model
        self.noise = noise           # z0 type the model was trained with ("gauss" or "wave")
        self.mean = mean
        self.std = std
        self.grids = grids or {}
        self.curve = curve           # (t_k, S_k) of the fine calibration pass
        self.meta = meta or {}

    def prepare(self, clips: list[np.ndarray]):
        import torch

        S = [stft(x) for x in clips]
        mel = torch.tensor(np.stack([log_mel(s) for s in S]))
        return S, mel

    def sample(self, mel, n_steps: int | None = None, grid=None, noise_seed: int = 0, trace=None,
               return_velocities: bool = False):
        """All bands of all clips in one batch: (C, N_MELS, T) -> complex STFTs (C, 128, T)."""
        import torch

        nc, _, nt = mel.shape
        grid = uniform_grid(n_steps) if grid is None else np.asarray(grid)
        z0 = self.noise_z0(mel, noise_seed).reshape(nc * NUM_BANDS, CH, nt)
        band = torch.arange(NUM_BANDS).repeat(nc)
        melb = mel.repeat_interleave(NUM_BANDS, 0)

        def velocity(z, t):
            return self.model(z, torch.full((z.shape[0],), t), melb, band)

        with torch.inference_mode():
            z, vs = euler(velocity, z0, grid, trace=trace)
            s = unequalise(merge_bands(z.reshape(nc, NUM_BANDS, CH, nt)), self.mean, self.std,
                           mel_envelope(mel)).numpy()
        out = s[:, 0] + 1j * s[:, 1]
        if return_velocities:
            return out, [v.numpy() for v in vs]
        return out

    def noise_z0(self, mel, noise_seed: int = 0):
        """z0 for a batch of clips, (C, B, CH, T), from the noise type the model was trained with."""
        import torch

        return make_noise(self.noise, mel, self.mean, self.std, torch.Generator().manual_seed(int(noise_seed)))

    def grid(self, kind: str, n: int) -> np.ndarray:
        if kind == "uniform":
            return uniform_grid(n)
        if kind == "reversed":
            return (1.0 - self.grid("straightness", n))[::-1].copy()
        if n in self.grids:
            return self.grids[n]
        t, s = self.curve
        return straightness_grid(t, s, n)

    def calibrate(self, mel, noise_seed: int = 0):
        """Fine uniform Euler pass; S_k = mean |v_k - v_final|; returns (t_k, S_k)."""
        _, vs = self.sample(mel, n_steps=FINE_STEPS, noise_seed=noise_seed, return_velocities=True)
        vf = vs[-1]
        s = np.array([float(np.mean(np.abs(v - vf))) for v in vs])
        return uniform_grid(FINE_STEPS)[:-1], s


_VOCODER = None


def load_vocoder() -> Vocoder:
    global _VOCODER
    if _VOCODER is None:
        import torch

        from engine.core.nn import asset_path, load_state, set_cpu_threads

        set_cpu_threads()
        path = asset_path(CKPT_NAME)
        if not path.exists():
            raise InputError(f"The RFWave checkpoint {path.name} is missing; run `python -m engine.rfwave train`.")
        ck = load_state(path)
        ex = ck["extra"]
        model = _build_model(int(ex["dim"]), int(ex["n_blocks"]), bool(int(ex.get("skip", 0))))
        model.load_state_dict(ck["state"])
        model.eval()
        grids = {int(k): np.asarray(v, dtype=np.float64) for k, v in zip(ex["grid_n"].tolist(),
                                                                           _unpack_grids(ex["grids"]))}
        _VOCODER = Vocoder(model, ex["mean"].float(), ex["std"].float(), grids,
                           (ex["curve_t"].numpy(), ex["curve_s"].numpy()),
                           {k: float(v) for k, v in ex.items() if isinstance(v, float | int)},
                           "wave" if int(ex.get("noise_wave", 0)) else "gauss")
        torch.set_grad_enabled(True)
    return _VOCODER


def _pack_grids(grids: dict[int, np.ndarray]):
    import torch

    rows = torch.full((len(grids), 101), -1.0, dtype=torch.float64)
    for i, n in enumerate(sorted(grids)):
        rows[i, : len(grids[n])] = torch.tensor(grids[n])
    return rows


def _unpack_grids(rows):
    return [r[r >= 0].numpy() for r in rows]


# ----------------------------------------------------------------------------------------------------------
# Engine contract
# ----------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Config:
    clip: int = param(0, Int(0, EVAL_CLIPS - 1, "Test clip", help="held-out synthetic clip (seed 0-7; "
                                                                     "training used seeds 1000+)"))
    n_steps: int = param(10, Int(1, 100, "Euler steps N", help="network evaluations of the flow sampler"))
    grid: str = param("straightness", Choice(("straightness", "uniform"), "Time grid",
                                             help="where the N steps are placed in t ∈ [0, 1]",
                                             widget="radio"))
    gl_iters: int = param(32, Int(1, 100, "Griffin-Lim iterations", help="for the Griffin-Lim audio and "
                                                                          "spectrogram shown below"))
    seed: int = param(0, Int(0, 99, "Noise seed", help="z0 ~ N(0, I); changes the phase realisation"))
    n_eval: int = param(2, Int(1, EVAL_CLIPS, "Clips in the claims", help="claims average over clips 0..n-1",
                               group="Advanced"))
    sweep: bool = param(False, Bool("Full quality-vs-steps sweep", help="N ∈ {1,2,4,6,10,20,50} on both grids",
                                    group="Advanced"))
    recompute: bool = param(False, Bool("Recompute straightness grid", help="rerun the 40-step calibration "
                                        "pass on the shown clip instead of the stored grids",
                                        group="Advanced"))


@dataclass
class Result:
    config: Config
    audio: dict[str, np.ndarray]            # original / RFWave / Griffin-Lim (shown clip)
    spec_db: dict[str, np.ndarray]          # 20 log10 |S| (128 x T) of each, re-analysed
    grid: np.ndarray                        # time points used for the shown run
    curve_t: np.ndarray
    curve_s: np.ndarray
    sweep: dict[str, dict[int, float]]      # grid -> {N: LSD}
    traj: dict[int, np.ndarray]             # N -> complex path of one (frame, bin) value
    traj_target: complex
    traj_point: tuple[int, int]
    table: list[dict]
    metrics: dict[str, float] = field(default_factory=dict)
    source: str = ""                        # what the shown clip is ("held-out synthetic clip 0", an upload)
    notes: list[str] = field(default_factory=list)   # how an upload was turned into the shown clip


def _mel_to_mag(mel_log: np.ndarray) -> np.ndarray:
    """NNLS inverse of the Mel filterbank (librosa), in librosa's unscaled STFT magnitude domain."""
    import librosa

    mel_mag = np.exp(mel_log) * math.sqrt(N_FFT)
    return librosa.feature.inverse.mel_to_stft(mel_mag, sr=SR, n_fft=N_FFT, power=1.0)


def _griffin_lim(mel_log: np.ndarray, n_iter: int, random_phase: bool = False, seed: int = 0,
                 mag: np.ndarray | None = None) -> np.ndarray:
    """Mel -> waveform with librosa: NNLS mel inversion, then Griffin-Lim (or one random phase)."""
    import librosa

    mag = _mel_to_mag(mel_log) if mag is None else mag
    if random_phase:
        ph = np.random.default_rng(seed).uniform(0, 2 * np.pi, size=mag.shape)
        return librosa.istft(mag * np.exp(1j * ph), hop_length=HOP, window="hann", length=N_SAMPLES)
    return librosa.griffinlim(mag, n_iter=int(n_iter), hop_length=HOP, window="hann", length=N_SAMPLES,
                              init="random", random_state=seed)


def _db(x: np.ndarray) -> np.ndarray:
    return (20 * np.log10(np.maximum(np.abs(stft(x)[:N_BINS]), FLOOR))).astype(np.float32)


# ---------------------------------------------------------------------------------------------- uploads
MAX_UPLOAD_BYTES = 5 * 2**20      # the app's upload cap (.streamlit/config.toml): about a minute of 44.1 kHz WAV
MAX_UPLOAD_SECONDS = 30.0         # only this much of a longer file is decoded and searched
MIN_UPLOAD_SECONDS = 0.25
UPLOAD_PEAK = 0.5                 # the synthetic clips' peak: the model was trained at that level
SILENCE_PEAK = 1e-4               # -80 dBFS
UPLOAD_FORMATS = ("wav", "flac", "ogg", "mp3")


def decode_upload(data: bytes) -> tuple[np.ndarray, list[str]]:
    """An uploaded audio file -> the 1.024 s, 8 kHz, mono clip the vocoder is run on, plus notes on what was done.

    Decoding is libsndfile's (the soundfile package librosa reads with), resampling librosa's. A longer file
    contributes its loudest 1.024 s window (searched in steps of 1/8 s over its first 30 s), a shorter one is padded
    with silence; the clip is scaled to the training clips' peak level. Anything that is not usable audio raises
    ``InputError`` with a message for the user.
    """
    import soundfile as sf

    data = check_upload(data, MAX_UPLOAD_BYTES)
    try:
        with sf.SoundFile(io.BytesIO(bytes(data))) as f:
            sr, channels, frames = int(f.samplerate), int(f.channels), int(f.frames)
            if not 1000 <= sr <= 384_000:
                raise InputError(f"The file says its sample rate is {sr} Hz; expected 1 000 to 384 000 Hz.")
            x = f.read(frames=int(MAX_UPLOAD_SECONDS * sr), dtype="float64", always_2d=True)
    except InputError:
        raise
    except Exception as e:        # libsndfile's errors: unknown format, truncated or corrupt data, ...
        raise InputError("The file could not be read as audio (WAV, FLAC, OGG/Vorbis or MP3 expected): "
                         f"{str(e).split(': ')[-1][:120]}") from None
    notes: list[str] = []
    if x.shape[0] == 0:
        raise InputError("The file holds no audio samples.")
    if not np.all(np.isfinite(x)):
        raise InputError("The file holds samples that are not finite numbers (NaN or infinity).")
    if x.shape[0] / sr < MIN_UPLOAD_SECONDS:
        raise InputError(f"The recording is {x.shape[0] / sr * 1000:.0f} ms long; at least "
                         f"{MIN_UPLOAD_SECONDS * 1000:.0f} ms are needed.")
    if frames > x.shape[0]:
        notes.append(f"only the first {MAX_UPLOAD_SECONDS:.0f} s of the {frames / sr:.1f} s file were searched")
    mono = x.mean(axis=1)
    if channels > 1:
        notes.append(f"{channels} channels mixed down to mono")
    if sr != SR:
        import librosa

        mono = librosa.resample(mono, orig_sr=sr, target_sr=SR)
        notes.append(f"resampled from {sr} Hz to {SR} Hz (the model's rate: nothing above {SR // 2} Hz is kept)")
    if len(mono) < N_SAMPLES:
        notes.append(f"{len(mono) / SR:.2f} s long: padded with silence to {N_SAMPLES / SR:.3f} s")
        clip = np.concatenate([mono, np.zeros(N_SAMPLES - len(mono))])
    else:
        step = SR // 8
        starts = np.arange(0, len(mono) - N_SAMPLES + 1, step)
        energy = np.array([float(np.sum(mono[a:a + N_SAMPLES] ** 2)) for a in starts])
        a = int(starts[int(np.argmax(energy))])
        clip = mono[a:a + N_SAMPLES]
        if len(mono) > N_SAMPLES:
            notes.append(f"the loudest {N_SAMPLES / SR:.3f} s are used: {a / SR:.2f}–{(a + N_SAMPLES) / SR:.2f} s")
    peak = float(np.max(np.abs(clip)))
    if peak < SILENCE_PEAK:
        level = "every sample is zero" if peak == 0 else f"peak {20 * math.log10(peak):.0f} dBFS"
        raise InputError(f"The recording is silent ({level}); there is nothing to vocode.")
    notes.append(f"scaled by {UPLOAD_PEAK / peak:.3g} to peak {UPLOAD_PEAK} like the training clips")
    return (clip * (UPLOAD_PEAK / peak)).astype(np.float64), notes


def run_upload(config: Config, progress=None, payload: bytes = b"") -> Result:
    """``run`` with the shown clip replaced by an uploaded recording (the claims stay on the synthetic clips)."""
    report(progress, 0.0, "reading the upload")
    clip, notes = decode_upload(payload)
    return _run(config, progress, shown=clip, source="your recording", notes=notes)


def run(config: Config, progress=None) -> Result:
    return _run(config, progress)


def _run(config: Config, progress=None, shown: np.ndarray | None = None, source: str = "",
         notes: list[str] | None = None) -> Result:
    from engine.core import get_device

    seed_everything(config.seed)
    get_device()                          # CPU here; the model is tiny, so inference stays on CPU
    voc = load_vocoder()
    eval_ids = list(range(config.n_eval))
    if shown is None:
        clip_ids = eval_ids + ([config.clip] if config.clip not in eval_ids else [])
        clips = [synth_clip(i) for i in clip_ids]
        ci = clip_ids.index(config.clip)
        source = f"held-out synthetic clip {config.clip}"
    else:                                 # the claim clips, then the upload
        clips = [synth_clip(i) for i in eval_ids] + [np.asarray(shown, dtype=np.float64)]
        ci = len(eval_ids)
    S, mel = voc.prepare(clips)
    ne = len(eval_ids)

    report(progress, 0.02, "sampling")
    curve_t, curve_s = voc.curve
    if config.recompute:
        curve_t, curve_s = voc.calibrate(mel[ci:ci + 1], noise_seed=config.seed)
        voc_grid = Vocoder(voc.model, voc.mean, voc.std, {}, (curve_t, curve_s), voc.meta, voc.noise)
    else:
        voc_grid = voc

    def wave_lsd(Ss, ids):
        outs = [istft(s) for s in Ss]
        return outs, float(np.mean([lsd(clips[i], o) for i, o in zip(ids, outs)]))

    # the shown run (timed for the real-time factor): mel -> STFT of every band at once -> iSTFT
    grid_main = voc_grid.grid(config.grid, config.n_steps)
    trace_pt = (int(np.argmax(np.abs(S[ci][:N_BINS]).max(axis=0))), 0)
    fr = trace_pt[0]
    fbin = int(np.argmax(np.abs(S[ci][:N_BINS, fr])))
    trace_pt = (fr, fbin)
    t0 = time.perf_counter()
    out_main = voc_grid.sample(mel[ci:ci + 1], grid=grid_main, noise_seed=config.seed)
    wav_main = istft(out_main[0])
    rtf = (time.perf_counter() - t0) / (N_SAMPLES / SR)
    report(progress, 0.15, "claims: comparison runs")

    # comparison runs: all clips (eval + shown) in one batch, all bands at once; noise seeds seed, seed+1
    runs: dict[tuple[str, int, int], float] = {}
    needed = [("uniform", 1, 0), ("straightness", 10, 0), ("uniform", 50, 0)]
    needed += [(g, 4, s) for g in ("straightness", "uniform", "reversed") for s in (0, 1)]
    if config.sweep:
        needed += [(g, n, 0) for g in ("straightness", "uniform") for n in SWEEP_N]
    traced = {(config.grid, 4, 0): 4, (config.grid, 10, 0): 10, ("uniform", 50, 0): 50}
    needed += [k for k in traced if k not in needed]
    needed = list(dict.fromkeys(needed))
    traj: dict[int, np.ndarray] = {}
    nb_all = len(clips)

    def _point(z):
        zz = unequalise(merge_bands(z.reshape(nb_all, NUM_BANDS, CH, -1)[ci:ci + 1]), voc.mean, voc.std,
                        mel_envelope(mel[ci:ci + 1]))[0]
        return complex(float(zz[0, fbin, fr]), float(zz[1, fbin, fr]))

    for j, (g, n, s) in enumerate(needed):
        pts: list[complex] = []
        tr = None
        if (g, n, s) in traced:
            pts.append(_point(voc_grid.noise_z0(mel, config.seed + s)))

            def tr(k, z, pts=pts):
                pts.append(_point(z))
        out = voc_grid.sample(mel, grid=voc_grid.grid(g, n), noise_seed=config.seed + s, trace=tr)
        if (g, n, s) in traced:
            traj[traced[(g, n, s)]] = np.array(pts)
        _, runs[(g, n, s)] = wave_lsd(out[:ne], eval_ids)
        if (g, n, s) == ("straightness", 10, 0):
            out_n10 = out[:ne]                  # kept for the magnitude / phase diagnosis below
        report(progress, 0.15 + 0.7 * (j + 1) / len(needed), f"comparison run {j + 1}/{len(needed)}: {g}, N={n}")
    report(progress, 0.85, "baselines (librosa)")

    # baselines on the eval clips: random phase, Griffin-Lim at equal iterations (= N = 10)
    mel_np = mel.numpy()
    mags = {i: _mel_to_mag(mel_np[i]) for i in sorted(set(eval_ids) | {ci})}     # one NNLS per clip
    rp = float(np.mean([lsd(clips[i], _griffin_lim(mel_np[i], 0, random_phase=True, seed=config.seed,
                                                   mag=mags[i])) for i in eval_ids]))
    wav_gl10 = [_griffin_lim(mel_np[i], 10, seed=config.seed, mag=mags[i]) for i in eval_ids]
    gl_eq = float(np.mean([lsd(clips[i], w) for i, w in zip(eval_ids, wav_gl10)]))
    diag = [spectral_diagnosis(clips[i], out_n10[k], wav_gl10[k]) for k, i in enumerate(eval_ids)]
    t_gl = time.perf_counter()
    wav_gl = _griffin_lim(mel_np[ci], config.gl_iters, seed=config.seed)          # timed with its NNLS
    rtf_gl = (time.perf_counter() - t_gl) / (N_SAMPLES / SR)

    lsd_main = lsd(clips[ci], wav_main)
    lsd_gl = lsd(clips[ci], wav_gl)
    orig = clips[ci]
    mel_l1 = {name: float(np.mean(np.abs(log_mel(stft(w)) - log_mel(stft(orig)))))
              for name, w in (("RFWave", wav_main), ("Griffin-Lim", wav_gl))}
    st_m = {k[0]: {} for k in runs}
    for (g, n, s), v in runs.items():
        if s == 0:
            st_m.setdefault(g, {})[n] = v
    sweep = {g: dict(sorted(d.items())) for g, d in st_m.items()}

    st4 = 0.5 * (runs[("straightness", 4, 0)] + runs[("straightness", 4, 1)])
    un4 = 0.5 * (runs[("uniform", 4, 0)] + runs[("uniform", 4, 1)])
    rv4 = 0.5 * (runs[("reversed", 4, 0)] + runs[("reversed", 4, 1)])
    metrics = {
        "lsd_n1": runs[("uniform", 1, 0)], "lsd_n10": runs[("straightness", 10, 0)],
        "lsd_n50": runs[("uniform", 50, 0)], "lsd_straight4": st4, "lsd_uniform4": un4, "lsd_reversed4": rv4,
        "lsd_random_phase": rp, "lsd_gl10": gl_eq, "lsd_shown": lsd_main, "lsd_gl_shown": lsd_gl,
        "rtf": rtf, "rtf_gl": rtf_gl,
        "positions_frames_bands": float(N_FRAMES * NUM_BANDS), "positions_samples": float(N_SAMPLES),
        **{f"diag_{k}": float(np.mean([d[k] for d in diag])) for k in diag[0]},
    }
    table = [
        {"method": f"RFWave ({config.grid}, N={config.n_steps})", "LSD (dB)": lsd_main,
         "log-Mel L1": mel_l1["RFWave"], "real-time factor": rtf,
         "network positions per call": N_FRAMES * NUM_BANDS, "network calls": config.n_steps},
        {"method": f"Griffin-Lim ({config.gl_iters} it.)", "LSD (dB)": lsd_gl, "log-Mel L1": mel_l1["Griffin-Lim"],
         "real-time factor": rtf_gl, "network positions per call": 0, "network calls": 0},
    ]
    report(progress, 1.0, "done")
    return Result(config=config,
                  audio={"original": orig, "RFWave": wav_main.astype(np.float32),
                         "Griffin-Lim": wav_gl.astype(np.float32)},
                  spec_db={"original": _db(orig), "RFWave": _db(wav_main), "Griffin-Lim": _db(wav_gl)},
                  grid=np.asarray(grid_main), curve_t=np.asarray(curve_t), curve_s=np.asarray(curve_s),
                  sweep=sweep, traj=traj, traj_target=complex(S[ci][fbin, fr]), traj_point=(fr, fbin),
                  table=table, metrics=metrics, source=source, notes=list(notes or ()))


HEAVY_CONFIG = Config(clip=7, n_steps=100, n_eval=EVAL_CLIPS, sweep=True, recompute=True, gl_iters=100)

TIMING_CLAIM_LABELS = ("real-time factor",)


def claims(result: Result) -> list[Claim]:
    m = result.metrics
    n_eval = result.config.n_eval
    return [
        Claim("A straight flow needs few steps: 10 Euler steps (straightness grid) are within 10 % of 50 "
              "uniform steps", m["lsd_n10"] / m["lsd_n50"], "<=", 1.10, label="LSD(N=10) / LSD(N=50)",
              detail=f"{m['lsd_n10']:.2f} vs {m['lsd_n50']:.2f} dB, mean over {n_eval} held-out clip(s)",
              fmt=".3f"),
        Claim("…and one step is not enough: a single Euler step gives the blurry average",
              m["lsd_n1"] / m["lsd_n10"], ">=", 1.25, label="LSD(N=1) / LSD(N=10)",
              detail=f"{m['lsd_n1']:.2f} vs {m['lsd_n10']:.2f} dB", fmt=".3f"),
        Claim("Generating the complex spectrogram beats magnitude-only inversion with random phase",
              m["lsd_n10"] / m["lsd_random_phase"], "<=", 0.8, label="LSD(RFWave) / LSD(random phase)",
              detail=f"{m['lsd_n10']:.2f} vs {m['lsd_random_phase']:.2f} dB", fmt=".3f"),
        Claim("At equal steps RFWave (10 Euler steps) has a lower spectral distance than Griffin-Lim "
              "(10 iterations)", m["lsd_n10"] / m["lsd_gl10"], "<", 1.0, label="LSD(RFWave) / LSD(Griffin-Lim)",
              detail=f"{m['lsd_n10']:.2f} vs {m['lsd_gl10']:.2f} dB", fmt=".3f"),
        Claim("Time points chosen by straightness beat uniform ones at N = 4",
              m["lsd_straight4"] / m["lsd_uniform4"], "<", 1.0, label="LSD(straightness) / LSD(uniform)",
              detail=f"{m['lsd_straight4']:.2f} vs {m['lsd_uniform4']:.2f} dB (reversed grid, the negative "
                     f"control: {m['lsd_reversed4']:.2f} dB), noise seeds {result.config.seed} and "
                     f"{result.config.seed + 1}", fmt=".3f"),
        Claim("Faster than real time on this CPU (timing, machine-dependent)", m["rtf"], "<", 1.0,
              label="real-time factor", detail="wall time of sampling + iSTFT / audio duration, one thread",
              fmt=".3f"),
    ]


# ----------------------------------------------------------------------------------------------------------
# Training script
# ----------------------------------------------------------------------------------------------------------

def _val_lsd(voc: Vocoder, clips: list[np.ndarray], n_steps: int, noise_seed: int = 0) -> float:
    """Mean LSD of re-analysed samples (uniform grid) on validation clips."""
    _, mel = voc.prepare(clips)
    out = voc.sample(mel, grid=uniform_grid(n_steps), noise_seed=noise_seed)
    return float(np.mean([lsd(x, istft(o)) for x, o in zip(clips, out)]))


def train(steps: int = 12000, n_clips: int = 512, batch: int = 8, crop: int = 64, dim: int = 64,
          n_blocks: int = 4, lr: float = 1e-3, seed: int = 0, time_limit: float = 2400.0, skip: int = 1,
          out: str = CKPT_NAME, val_every: int = 1000, noise: str = "gauss") -> None:
    import torch

    from engine.core.nn import asset_path, make_optimizer, save_state, set_cpu_threads

    set_cpu_threads()
    seed_everything(seed, torch_too=True)
    t_start = time.time()
    clips = [synth_clip(TRAIN_SEED0 + i) for i in range(n_clips)]
    val = [synth_clip(TRAIN_SEED0 + n_clips + 10 + i) for i in range(4)]   # validation, still >= 1000
    S = [stft(x) for x in clips]
    Z = torch.tensor(np.stack([to_channels(s) for s in S]))            # (n, 2, 128, T)
    MEL = torch.tensor(np.stack([log_mel(s) for s in S]))
    ENV = mel_envelope(MEL)
    Zg = Z / ENV[:, None, :, :]
    mean = Zg.mean(dim=(0, 3))                                           # equaliser: training-set statistics
    std = Zg.std(dim=(0, 3)).clamp_min(1e-4)
    ZB = split_bands(equalise(Z, mean, std, ENV))                   # (n, B, CH, T)
    print(f"data ready in {time.time() - t_start:.1f}s", flush=True)
    model = _build_model(dim, n_blocks, bool(skip))
    if skip:
        torch.nn.init.zeros_(model.out.weight)
        torch.nn.init.zeros_(model.out.bias)
    model.mel_mu.copy_(MEL.mean(dim=(0, 2))[None, :, None])
    model.mel_sd.copy_(MEL.std(dim=(0, 2)).clamp_min(1e-3)[None, :, None])
    print("parameters:", sum(p.numel() for p in model.parameters()), flush=True)
    opt = make_optimizer(model.parameters(), "adamw", lr=lr, weight_decay=0.01)
    warm = max(1, steps // 15)

    def lr_at(k):
        if k < warm:
            return lr * (k + 1) / warm
        p = (k - warm) / max(1, steps - warm)
        return 1e-5 + 0.5 * (lr - 1e-5) * (1 + math.cos(math.pi * p))

    gen = torch.Generator().manual_seed(seed)
    hist, curve = [], []
    for k in range(steps):
        for gr in opt.param_groups:
            gr["lr"] = lr_at(k)
        idx = torch.randint(0, n_clips, (batch,), generator=gen)
        off = int(torch.randint(0, N_FRAMES - crop + 1, (1,), generator=gen))
        z0 = make_noise(noise, MEL[idx], mean, std, gen, ENV[idx])[..., off:off + crop]   # whole-clip noise, cropped
        loss, parts = rf_losses(model, ZB[idx, :, :, off:off + crop], MEL[idx, :, off:off + crop], mean, std,
                                z0=z0, generator=gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        hist.append(parts["rf"])
        if k % 50 == 0:
            print(f"step {k} loss {np.mean(hist[-50:]):.4f} {time.time() - t_start:.0f}s", flush=True)
        stop = time.time() - t_start > time_limit
        if (k + 1) % val_every == 0 or k == steps - 1 or stop:
            model.eval()
            voc = Vocoder(model, mean, std, noise=noise)
            v1, v10 = _val_lsd(voc, val, 1), _val_lsd(voc, val, 10)
            model.train()
            curve.append((k + 1, float(np.mean(hist[-100:])), v1, v10))
            print(f"  val step {k + 1}: rf {curve[-1][1]:.4f}  LSD N=1 {v1:.2f}  N=10 {v10:.2f}", flush=True)
        if stop:
            print(f"time limit reached at step {k}", flush=True)
            break
    model.eval()
    voc = Vocoder(model, mean, std, noise=noise)
    cal = [synth_clip(TRAIN_SEED0 + n_clips + i) for i in range(2)]    # calibration clips, still >= 1000
    _, mel_cal = voc.prepare(cal)
    curve_t, curve_s = voc.calibrate(mel_cal, noise_seed=0)
    grids = {n: straightness_grid(curve_t, curve_s, n) for n in range(2, 101)}
    grids[1] = uniform_grid(1)
    print("grid N=10:", np.round(grids[10], 3), flush=True)
    save_state(model, asset_path(out), extra={
        "mean": mean, "std": std, "dim": dim, "n_blocks": n_blocks, "steps_done": len(hist),
        "skip": int(skip), "noise_wave": int(noise == "wave"), "lr": float(lr), "batch": batch, "crop": crop,
        "grid_n": torch.tensor(sorted(grids)), "grids": _pack_grids(grids),
        "curve_t": torch.tensor(curve_t), "curve_s": torch.tensor(curve_s),
        "final_rf_loss": float(np.mean(hist[-100:])), "train_seconds": float(time.time() - t_start),
        "val_curve": torch.tensor(curve, dtype=torch.float64),   # (step, rf loss, val LSD N=1, val LSD N=10)
    })
    print(f"saved {asset_path(out)} after {time.time() - t_start:.0f}s", flush=True)
    if out == CKPT_NAME:
        record_default_metrics()


def record_default_metrics() -> dict[str, float]:
    """Run the default page configuration on the shipped checkpoint and store its metrics in the file."""
    from engine.core.nn import asset_path, load_state, save_state

    global _VOCODER
    _VOCODER = None
    res = run(Config())
    measured = {f"default_{k}": float(v) for k, v in res.metrics.items() if not k.startswith("rtf")}
    measured["default_claims_passed"] = int(sum(c.passed for c in claims(res)
                                                if c.label not in TIMING_CLAIM_LABELS))
    path = asset_path(CKPT_NAME)
    ck = load_state(path)
    extra = {k: v for k, v in ck["extra"].items() if k != "alpha"}
    extra.update(measured)
    model = _build_model(int(extra["dim"]), int(extra["n_blocks"]), bool(int(extra.get("skip", 0))))
    model.load_state_dict(ck["state"])
    save_state(model, path, extra=extra)
    _VOCODER = None
    print("recorded:", {k: round(v, 3) for k, v in measured.items()}, flush=True)
    return measured


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "record":
        record_default_metrics()
    elif len(sys.argv) > 1 and sys.argv[1] == "train":
        kw = {}
        for a in sys.argv[2:]:
            k, v = a.split("=")
            kw[k] = v if k in ("out", "noise") else (float(v) if "." in v else int(v))
        train(**kw)
    else:
        print("usage: python -m engine.rfwave train [steps=12000 lr=0.001 ...] | record")
