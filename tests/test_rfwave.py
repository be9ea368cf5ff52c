"""RFWave engine: claims at the default config (on the shipped checkpoint) and independent checks."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import rfwave as eng
from engine.core.nn import asset_path
from tests.pagetext import figures, open_page, values


@pytest.fixture(scope="module")
def default_result():
    return eng.run(eng.Config())


# Claims that do NOT reproduce with the shipped checkpoint (0.2 M parameters, 12 000 steps / 21 min of CPU
# training): measured at the default config LSD(RFWave, N=10) = 8.76 dB vs random phase 10.12 dB (ratio 0.866,
# needs <= 0.8) and vs Griffin-Lim (10 it.) 6.13 dB (ratio 1.43, needs < 1). Not a pipeline bug (the network
# overfits one clip to 5.0 dB < Griffin-Lim's 6.35 dB); trained on 512 clips it learns the envelope but not
# a coherent phase. The page shows these badges failing with an st.info box; they are excluded, not hidden.
NOT_REPRODUCED = ("LSD(RFWave) / LSD(random phase)", "LSD(RFWave) / LSD(Griffin-Lim)")


def test_claims_that_reproduce_pass_at_default(default_result):
    claims = eng.claims(default_result)
    labels = [c.label for c in claims]
    assert len(claims) == 6
    assert all(lbl in labels for lbl in NOT_REPRODUCED)
    # the real-time-factor badge is a timing claim (machine- and load-dependent): per team rules it is
    # shown on the page but excluded from this assertion
    checked = [c for c in claims if c.label not in eng.TIMING_CLAIM_LABELS and c.label not in NOT_REPRODUCED]
    assert [c.label for c in checked] == ["LSD(N=10) / LSD(N=50)", "LSD(N=1) / LSD(N=10)",
                                          "LSD(straightness) / LSD(uniform)"]
    failed = [c.describe() for c in checked if not c.passed]
    assert not failed, failed
    m = default_result.metrics
    # the negative control of the straightness claim: the reversed grid (dense near the data end) is worse
    assert m["lsd_reversed4"] > m["lsd_uniform4"] and m["lsd_reversed4"] > m["lsd_straight4"]
    # one Euler step gives the blurry, too-quiet average: its spectrum is far off, 50 steps are not
    assert m["lsd_n1"] > m["lsd_n50"]


def test_recorded_metrics_match_a_fresh_run(default_result):
    # the numbers stored in the checkpoint by `python -m engine.rfwave record` are what the page measures now
    meta = eng.load_vocoder().meta
    for k in ("lsd_n10", "lsd_n50", "lsd_random_phase", "lsd_gl10", "lsd_straight4", "lsd_uniform4"):
        assert abs(meta[f"default_{k}"] - default_result.metrics[k]) < 1e-3, k


def test_checkpoint_loads_and_is_small():
    path = asset_path(eng.CKPT_NAME)
    assert path.exists() and path.stat().st_size < 2 * 1024 * 1024
    voc = eng.load_vocoder()
    assert voc.mean.shape == (2, eng.N_BINS) and voc.std.shape == (2, eng.N_BINS)
    for n in (2, 4, 10):
        g = voc.grid("straightness", n)
        assert len(g) == n + 1 and g[0] == 0.0 and g[-1] == 1.0 and np.all(np.diff(g) > 0)
    g = voc.grid("straightness", 10)
    assert np.diff(g)[0] <= np.diff(g)[-1]          # t = 0 is noise: steps are not denser at the data end


def test_stft_matches_torch_and_round_trips():
    x = eng.synth_clip(3)
    S = eng.stft(x)
    T = torch.stft(torch.tensor(x), n_fft=eng.N_FFT, hop_length=eng.HOP, window=torch.hann_window(eng.N_FFT),
                   center=True, pad_mode="constant", return_complex=True).numpy() / math.sqrt(eng.N_FFT)
    assert S.shape == (eng.N_FFT // 2 + 1, eng.N_FRAMES)
    assert np.max(np.abs(np.abs(S) - np.abs(T))) < 1e-4
    y = torch.istft(torch.tensor(S) * math.sqrt(eng.N_FFT), n_fft=eng.N_FFT, hop_length=eng.HOP,
                    window=torch.hann_window(eng.N_FFT), center=True, length=len(x)).numpy()
    assert np.linalg.norm(y - x) / np.linalg.norm(x) < 1e-5
    # a perfect (oracle) spectrogram has ~zero distance after the engine's own synthesis path
    assert eng.lsd(x, eng.istft(S)) < 0.5


def test_mel_of_a_sinusoid_peaks_at_its_band():
    import librosa

    for f in (440.0, 1250.0, 2800.0):
        t = np.arange(eng.N_SAMPLES) / eng.SR
        m = eng.log_mel(eng.stft(0.5 * np.sin(2 * np.pi * f * t)))
        centres = librosa.mel_frequencies(n_mels=eng.N_MELS + 2, fmax=eng.SR / 2)[1:-1]
        k = int(np.argmax(m[:, 40:90].mean(axis=1)))
        assert abs(centres[k] - f) <= np.max(np.diff(centres)) / 1.0


def test_band_split_merge_is_lossless_and_overlaps_match():
    z = torch.randn(3, 2, eng.N_BINS, 17)
    zb = eng.split_bands(z)
    assert zb.shape == (3, eng.NUM_BANDS, eng.CH, 17)
    assert torch.equal(eng.merge_bands(zb), z)
    b = zb.reshape(3, eng.NUM_BANDS, 2, eng.BW, 17)
    for i in range(eng.NUM_BANDS - 1):
        assert torch.equal(b[:, i, :, eng.BAND + eng.OV:], b[:, i + 1, :, eng.OV:2 * eng.OV])
        assert torch.equal(b[:, i + 1, :, :eng.OV], b[:, i, :, eng.BAND:eng.BAND + eng.OV])
    assert torch.all(b[:, 0, :, :eng.OV] == 0) and torch.all(b[:, -1, :, -eng.OV:] == 0)


def test_euler_with_oracle_velocity_is_exact():
    g = torch.Generator().manual_seed(0)
    z0, z1 = torch.randn(5, 80, 9, generator=g), torch.randn(5, 80, 9, generator=g)
    z, _ = eng.euler(lambda z, t: z1 - z0, z0, eng.uniform_grid(1))
    assert torch.allclose(z, z1, atol=1e-6)
    z, _ = eng.euler(lambda z, t: z1 - z0, z0, np.array([0.0, 0.01, 0.3, 0.9, 1.0]))
    assert torch.allclose(z, z1, atol=1e-5)


def _pair(seed=0, nc=2, nt=12):
    g = torch.Generator().manual_seed(seed)
    z1 = eng.split_bands(torch.randn(nc, 2, eng.N_BINS, nt, generator=g))
    z0 = torch.randn(z1.shape, generator=g)
    mel = torch.randn(nc, eng.N_MELS, nt, generator=g) - 3
    return z0, z1, mel


def test_rf_loss_is_zero_at_the_optimum_and_one_for_zero_predictor():
    z0, z1, mel = _pair()
    mean, std = torch.zeros(2, eng.N_BINS), torch.ones(2, eng.N_BINS)
    u = (z1 - z0).reshape(-1, eng.CH, z1.shape[-1])
    _, parts = eng.rf_losses(lambda zt, t, m, b: u, z1, mel, mean, std, t=torch.rand(2), z0=z0)
    assert parts["rf"] < 1e-10 and parts["mag"] < 1e-8 and parts["sc"] < 1e-6 and parts["overlap"] < 1e-12
    _, parts = eng.rf_losses(lambda zt, t, m, b: torch.zeros_like(u), z1, mel, mean, std, t=torch.rand(2), z0=z0)
    assert abs(parts["rf"] - 1.0) < 0.05       # E[u^2] / Var(u) with a zero-mean target


def test_mel_envelope_recovers_a_flat_spectrum():
    # a spectrum that is flat within every Mel band is read back exactly by the envelope (closed form)
    a = 0.01
    S = np.full((eng.N_FFT // 2 + 1, 5), a, dtype=np.complex64)
    env = eng.mel_envelope(torch.tensor(eng.log_mel(S))).numpy()
    assert env.shape == (eng.N_BINS, 5)
    assert np.allclose(env, a + 1e-4, rtol=1e-4)
    # and it follows a louder band: a 20 dB step in level moves the envelope by ~20 dB there
    S[: eng.N_BINS // 2] *= 10
    env = eng.mel_envelope(torch.tensor(eng.log_mel(S))).numpy()
    assert np.allclose(env[5:40], 0.1 + 1e-4, rtol=1e-3) and np.allclose(env[90:], a + 1e-4, rtol=1e-3)


def test_velocity_skip_is_the_gaussian_posterior_mean():
    # with the learned correction switched off the model's velocity must equal E[z1 - z0 | z_t] for
    # standard-normal data, checked against a least-squares regression on sampled pairs
    model = eng._build_model(16, 1, skip=True)
    torch.nn.init.zeros_(model.out.weight)
    torch.nn.init.zeros_(model.out.bias)
    g = torch.Generator().manual_seed(1)
    for t in (0.1, 0.5, 0.8):
        z0, z1 = torch.randn(64, eng.CH, 32, generator=g), torch.randn(64, eng.CH, 32, generator=g)
        zt = t * z1 + (1 - t) * z0
        slope = float(torch.sum(zt * (z1 - z0)) / torch.sum(zt * zt))     # regression of u on z_t
        with torch.no_grad():
            v = model(zt[:2], torch.full((2,), t), torch.zeros(2, eng.N_MELS, 32), torch.zeros(2, dtype=torch.long))
        assert torch.allclose(v, slope * zt[:2], rtol=0.02, atol=0.02 * float(zt[:2].abs().max()))


def test_straightness_grid_follows_the_cumulative_curve():
    t = eng.uniform_grid(eng.FINE_STEPS)[:-1]
    s = np.exp(-8 * t)                          # velocity changes fast near the noise end
    g = eng.straightness_grid(t, s, 5)
    assert len(g) == 6 and g[1] < 0.2 and np.all(np.diff(np.diff(g)) >= -1e-9)
    flat = eng.straightness_grid(t, np.ones_like(t), 4)
    assert np.allclose(flat, eng.uniform_grid(4), atol=1.0 / eng.FINE_STEPS)


def test_baselines_come_from_librosa_and_clips_are_held_out():
    x = eng.synth_clip(1)
    S = eng.stft(x)
    gl = eng._griffin_lim(eng.log_mel(S), 32)
    rp = eng._griffin_lim(eng.log_mel(S), 0, random_phase=True)
    assert gl.shape == x.shape and rp.shape == x.shape
    assert eng.lsd(x, gl) < eng.lsd(x, rp)     # Griffin-Lim improves on a random phase
    assert not np.allclose(eng.synth_clip(0), eng.synth_clip(eng.TRAIN_SEED0))



def test_each_band_is_conditioned_on_the_mel_and_clips_do_not_mix():
    # the network itself (not only the envelope used to un-equalise) reads the Mel in every band, and the
    # band index changes its output; in the batched sampler one clip's Mel never reaches another clip
    voc = eng.load_vocoder()
    S, mel = voc.prepare([eng.synth_clip(0), eng.synth_clip(1)])
    melb = mel[:1].repeat(eng.NUM_BANDS, 1, 1).requires_grad_(True)
    z = torch.randn(eng.NUM_BANDS, eng.CH, eng.N_FRAMES, generator=torch.Generator().manual_seed(0))
    with torch.enable_grad():
        out = voc.model(z, torch.full((eng.NUM_BANDS,), 0.3), melb, torch.arange(eng.NUM_BANDS))
        for band in range(eng.NUM_BANDS):
            (g,) = torch.autograd.grad(out[band].square().sum(), melb, retain_graph=True)
            others = [i for i in range(eng.NUM_BANDS) if i != band]
            assert float(g[band].norm()) > 1e-3 and float(g[others].norm()) == 0
    with torch.no_grad():
        same = voc.model(z[:1].repeat(2, 1, 1), torch.full((2,), 0.3), mel[:1].repeat(2, 1, 1),
                         torch.tensor([0, 2]))
    assert float((same[0] - same[1]).abs().max()) > 1e-3
    a = voc.sample(mel, n_steps=2, noise_seed=3)
    mel2 = mel.clone()
    mel2[1] += 1.0
    b = voc.sample(mel2, n_steps=2, noise_seed=3)
    assert np.allclose(a[0], b[0], atol=1e-6) and not np.allclose(a[1], b[1], atol=1e-3)


def test_wave_noise_is_a_consistent_stft_at_unit_scale():
    # "wave" prior: un-equalised, z0 is c * STFT(white noise), so iSTFT then STFT (librosa) returns it;
    # the Gaussian prior, by contrast, is far from any consistent STFT
    voc = eng.load_vocoder()
    _, mel = voc.prepare([eng.synth_clip(0), eng.synth_clip(5)])
    env = eng.mel_envelope(mel)
    for kind, consistent in (("wave", True), ("gauss", False)):
        z0 = eng.make_noise(kind, mel, voc.mean, voc.std, torch.Generator().manual_seed(4))
        assert z0.shape == (2, eng.NUM_BANDS, eng.CH, eng.N_FRAMES)
        raw = eng.unequalise(eng.merge_bands(z0), voc.mean, voc.std, env).numpy()
        for r in raw:
            back = eng.to_channels(eng.stft(eng.istft(eng.from_channels(r))))
            err = np.linalg.norm(back - r) / np.linalg.norm(r)
            assert (err < 5e-3) if consistent else (err > 0.3), (kind, err)
        # overlaps of neighbouring bands hold the same (shared) noise, as for the data
        b = z0.reshape(2, eng.NUM_BANDS, 2, eng.BW, -1)
        assert torch.equal(b[:, 0, :, eng.BAND + eng.OV:], b[:, 1, :, eng.OV:2 * eng.OV]) == consistent
        rms = float(z0.square().mean().sqrt())
        assert 0.7 < rms < 1.3, (kind, rms)


def test_train_and_sample_draw_the_same_noise(tmp_path, monkeypatch):
    # a 2-step training run with noise="wave": every z0 drawn in training, validation and calibration is of
    # that kind, the checkpoint records it, and a Vocoder with that noise draws z0 through the same function
    kinds = []
    real = eng.make_noise

    def spy(kind, *a, **k):
        kinds.append(kind)
        return real(kind, *a, **k)

    monkeypatch.setattr(eng, "make_noise", spy)
    out = tmp_path / "wave.pt"
    eng.train(steps=2, n_clips=2, batch=2, noise="wave", out=str(out), val_every=1)
    assert kinds and set(kinds) == {"wave"}
    from engine.core.nn import load_state

    assert int(load_state(out)["extra"]["noise_wave"]) == 1
    voc = eng.load_vocoder()
    _, mel = voc.prepare([eng.synth_clip(2)])
    wave = eng.Vocoder(voc.model, voc.mean, voc.std, noise="wave")
    assert torch.equal(wave.noise_z0(mel, 7), real("wave", mel, voc.mean, voc.std, torch.Generator().manual_seed(7)))
    assert voc.noise == ("wave" if int(voc.meta.get("noise_wave", 0)) else "gauss")


def test_spectral_diagnosis_closed_forms():
    """The diagnosis against cases whose answers are known: the true STFT scores (almost) zero everywhere; a random
    phase keeps the magnitudes exact and breaks the phase advance (re-analysis of its waveform restores a little
    coherence, so not the pi/2 of independent phases); Griffin-Lim's 'output' = the clip itself has no phase error."""
    clip = eng.synth_clip(3)
    S = eng.stft(clip)
    d = eng.spectral_diagnosis(clip, S, clip)
    assert d["mag_lsd"] < 1e-3 and abs(d["loud_gap_db"]) < 1e-3
    assert d["true_phase_lsd"] < 0.5 and d["true_mag_lsd"] < 0.5
    assert d["adv_err"] < 0.05 and d["adv_err_gl"] < 0.05
    rng = np.random.default_rng(0)
    R = np.abs(S) * np.exp(2j * np.pi * rng.random(S.shape))
    d = eng.spectral_diagnosis(clip, R, clip)
    assert d["mag_lsd"] < 1e-3 and d["true_phase_lsd"] < 0.5       # magnitudes exact, so true phase repairs it
    assert d["true_mag_lsd"] > 3.0                                   # a random phase is what breaks it
    assert 0.6 < d["adv_err"] <= np.pi / 2 + 0.1 and d["adv_err_gl"] < 0.05


def test_diagnosis_metrics_in_the_default_run(default_result):
    m = default_result.metrics
    # generated phase is worse than Griffin-Lim's on the loud cells, and swapping in the true phase helps more than
    # swapping in the true magnitude (the page's reading of why the two claims fail)
    assert m["diag_adv_err"] > m["diag_adv_err_gl"]
    assert m["diag_true_phase_lsd"] < m["diag_true_mag_lsd"] < m["lsd_n10"]


# ------------------------------------------------------------------------------------------------- uploads

def _encode(x: np.ndarray, sr: int, fmt: str = "WAV", subtype: str | None = None) -> bytes:
    import io

    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, x, sr, format=fmt, subtype=subtype)
    return buf.getvalue()


def test_upload_is_mixed_resampled_and_its_loudest_second_is_kept():
    """A 3 s stereo 44.1 kHz file with a 440 Hz tone from 1.0 s to 2.0 s: the clip is the window around the tone
    (closed form: the tone's energy is whole only in windows starting 0.875-1.0 s), at 8 kHz, peak 0.5, and its
    spectrum peaks at 440 Hz."""
    sr = 44100
    t = np.arange(3 * sr) / sr
    tone = np.where((t >= 1.0) & (t < 2.0), 0.2 * np.sin(2 * np.pi * 440 * t), 0.0) + 1e-3 * np.sin(2 * np.pi * 90 * t)
    clip, notes = eng.decode_upload(_encode(np.stack([tone, 0.5 * tone], axis=1), sr))
    assert clip.shape == (eng.N_SAMPLES,)
    assert np.max(np.abs(clip)) == pytest.approx(eng.UPLOAD_PEAK, rel=1e-9)
    assert any("2 channels" in n for n in notes) and any("44100 Hz" in n for n in notes)
    start = float([n for n in notes if "loudest" in n][0].split("used: ")[1].split("–")[0])
    assert 0.875 <= start <= 1.0, notes
    spec = np.abs(np.fft.rfft(clip * np.hanning(len(clip))))
    assert np.fft.rfftfreq(len(clip), 1 / eng.SR)[int(np.argmax(spec))] == pytest.approx(440, abs=2)


@pytest.mark.parametrize("fmt,subtype", [("FLAC", "PCM_16"), ("OGG", "VORBIS"), ("MP3", "MPEG_LAYER_III")])
def test_upload_formats_decode(fmt, subtype):
    import soundfile as sf

    if fmt not in sf.available_formats():
        pytest.skip(f"this libsndfile has no {fmt}")
    sr = 16000
    t = np.arange(int(0.6 * sr)) / sr
    clip, notes = eng.decode_upload(_encode(0.3 * np.sin(2 * np.pi * 300 * t), sr, fmt, subtype))
    assert clip.shape == (eng.N_SAMPLES,) and np.all(np.isfinite(clip))
    assert any("padded with silence" in n for n in notes)
    assert np.max(np.abs(clip[int(0.7 * eng.SR):])) == 0.0          # the padding is silence
    spec = np.abs(np.fft.rfft(clip[:int(0.5 * eng.SR)]))
    assert np.fft.rfftfreq(int(0.5 * eng.SR), 1 / eng.SR)[int(np.argmax(spec))] == pytest.approx(300, abs=4)


def test_bad_uploads_give_clear_messages():
    from engine.core import InputError

    sr = 8000
    nan = np.full(4000, 0.1)
    nan[100] = np.nan
    cases = {
        b"": "empty",
        b"these are my notes, not a recording" * 20: "could not be read as audio",
        _encode(0.1 * np.ones(4000), sr)[:30]: "could not be read as audio",       # cut inside the header
        _encode(np.zeros(8000), sr): "every sample is zero",
        _encode(np.full(8000, 1e-6), sr, subtype="FLOAT"): "silent",
        _encode(0.1 * np.ones(800), sr): "at least 250 ms",
        _encode(nan, sr, subtype="FLOAT"): "not finite",
        b"\0" * (eng.MAX_UPLOAD_BYTES + 1): "the limit is 5 MB",
    }
    for data, needle in cases.items():
        with pytest.raises(InputError, match=needle):
            eng.decode_upload(data)


def test_long_upload_is_searched_only_in_its_first_seconds():
    sr = 8000
    x = np.zeros(int((eng.MAX_UPLOAD_SECONDS + 5) * sr))
    x[: sr // 2] = 0.05                                   # quiet, early
    x[-sr // 2:] = 0.9                                    # loud, but past the searched part
    clip, notes = eng.decode_upload(_encode(x, sr))
    assert np.max(np.abs(clip)) == pytest.approx(eng.UPLOAD_PEAK)
    assert any(f"first {eng.MAX_UPLOAD_SECONDS:.0f} s" in n for n in notes)
    assert any("0.00–1.02 s" in n for n in notes), notes


def test_run_upload_vocodes_the_file_and_keeps_the_claims_on_the_synthetic_clips(default_result):
    sr = 8000
    payload = _encode(eng.synth_clip(123) * 0.8, sr)          # any recording; a synthetic one keeps it quick
    res = eng.run_upload(eng.Config(), payload=payload)
    clip, notes = eng.decode_upload(payload)
    np.testing.assert_allclose(res.audio["original"], clip)
    assert res.source == "your recording" and res.notes == notes
    assert res.metrics["lsd_shown"] == pytest.approx(eng.lsd(clip, res.audio["RFWave"]))
    # the same numbers up to float rounding: on some machines the two runs do not agree to the last bit (on one
    # they differed in the 8th digit), so this asks for agreement to 6 digits
    for a, b in zip(eng.claims(res), eng.claims(default_result)):
        if a.label not in eng.TIMING_CLAIM_LABELS:
            assert a.measured == pytest.approx(b.measured, rel=1e-6), a.label
    assert default_result.source == "held-out synthetic clip 0" and default_result.notes == []


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["WAV", "FLAC", "junk"]), st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 255)),
                                                          max_size=12), st.integers(0, 40_000))
def test_any_damaged_file_gives_a_clip_or_a_clear_message(fmt, edits, cut):
    """Byte edits and truncations of a real WAV / FLAC file, or random bytes: a valid clip or an InputError."""
    from tests.uploads import damaged, read_or_refuse

    rng = np.random.default_rng(cut)
    data = (rng.integers(0, 256, size=cut % 3000, dtype=np.uint8).tobytes() if fmt == "junk" else
            _encode(0.3 * np.sin(np.arange(12000) / 5.0), 16000, fmt)[:cut])
    out = read_or_refuse(eng.decode_upload, damaged(data, edits))
    if out is not None:
        clip, notes = out
        assert clip.shape == (eng.N_SAMPLES,) and np.all(np.isfinite(clip)) and notes
        assert np.max(np.abs(clip)) == pytest.approx(eng.UPLOAD_PEAK)


# ------------------------------------------------------------------------------ time grids and the diagnosis

def test_flat_straightness_gives_the_uniform_grid_exactly():
    """C(t) holds one value per fine-grid end point, C(0) = 0 ... C(1) = 1; constant straightness makes it linear, so
    the k/N crossings land exactly on the uniform grid whenever N divides the fine step count."""
    t = eng.uniform_grid(eng.FINE_STEPS)[:-1]
    s = np.full_like(t, 0.3)
    np.testing.assert_allclose(eng.cumulative_straightness(s), np.linspace(0, 1, eng.FINE_STEPS + 1), atol=1e-12)
    for n in (2, 4, 5, 8, 10, 20):
        np.testing.assert_allclose(eng.straightness_grid(t, s, n), eng.uniform_grid(n), atol=1e-9)


def test_reversed_grid_mirrors_the_straightness_grid():
    """The negative control's grid is t -> 1 - t of the straightness grid, still run from noise (0) to data (1): it
    rises from 0 to 1 and its step sizes are the straightness steps in reverse order."""
    voc = eng.load_vocoder()
    for n in (2, 4, 10):
        st_g, rv = voc.grid("straightness", n), voc.grid("reversed", n)
        assert rv[0] == 0.0 and rv[-1] == 1.0 and np.all(np.diff(rv) > 0)
        np.testing.assert_allclose(np.diff(rv), np.diff(st_g)[::-1], atol=1e-9)


def test_calibration_measures_distance_to_the_final_velocity():
    """Spec: on a fine uniform pass S_k = mean |v_k - v_final|, so S vanishes at the last step and not at the first;
    the times are the pass's step starts."""
    voc = eng.load_vocoder()
    _, mel = voc.prepare([eng.synth_clip(2)])
    t, s = voc.calibrate(mel, noise_seed=1)
    _, vs = voc.sample(mel, n_steps=eng.FINE_STEPS, noise_seed=1, return_velocities=True)
    np.testing.assert_allclose(t, np.arange(eng.FINE_STEPS) / eng.FINE_STEPS, atol=1e-12)
    np.testing.assert_allclose(s, [np.mean(np.abs(v - vs[-1])) for v in vs], rtol=1e-5)
    assert s[-1] == 0.0 and s[0] > 0.0


def test_loud_gap_reads_only_the_loudest_cells():
    """loud_gap_db is the mean dB shortfall on the loudest LOUD_SHARE of the true cells: quieting the loudest 5 % of
    cells (a superset) by exactly 20 dB and leaving the rest untouched gives +20 dB; the magnitude LSD counts every
    frame, so it stays far below 20."""
    clip = eng.synth_clip(4)
    S = eng.stft(clip)[:eng.N_BINS]
    order = np.argsort(np.abs(S), axis=None)[::-1]
    top = np.unravel_index(order[: int(0.05 * S.size)], S.shape)
    G = S.copy()
    G[top] *= 0.1
    d = eng.spectral_diagnosis(clip, G, clip)
    assert d["loud_gap_db"] == pytest.approx(20.0, abs=1e-3)
    assert 0.0 < d["mag_lsd"] < 10.0


def test_rf_loss_balances_frames():
    """Time/energy balance (spec): each frame's error is divided by the spread of its target over channels, so
    scaling one frame of target and prediction by 1000 leaves the RF loss unchanged."""
    z0, z1, mel = _pair(seed=2, nt=8)
    mean, std = torch.zeros(2, eng.N_BINS), torch.ones(2, eng.N_BINS)
    err = 0.3 * torch.randn(z1.shape, generator=torch.Generator().manual_seed(5))
    t = torch.tensor([0.3, 0.7])

    def rf(z0, z1, err):
        uh = (z1 - z0 + err).reshape(-1, eng.CH, z1.shape[-1])
        return eng.rf_losses(lambda *_: uh, z1, mel, mean, std, t=t, z0=z0)[1]["rf"]

    gain = torch.ones(z1.shape[-1])
    gain[3] = 1000.0
    assert rf(z0 * gain, z1 * gain, err * gain) == pytest.approx(rf(z0, z1, err), rel=1e-4)


# ------------------------------------------------------------------ second mutation round: what the page shows
def _scipy_mag(x):
    """|STFT| on the engine's scale from scipy (periodic Hann, hop 64, zero-padded centring), bins 0..127."""
    from scipy.signal import get_window
    from scipy.signal import stft as sp_stft

    win = get_window("hann", eng.N_FFT)
    _, _, Z = sp_stft(np.asarray(x, np.float64), window=win, nperseg=eng.N_FFT, noverlap=eng.N_FFT - eng.HOP,
                      boundary="zeros", padded=False)
    return Z[: eng.N_BINS] * win.sum() / math.sqrt(eng.N_FFT)


def test_lsd_matches_a_scipy_reference():
    """LSD = mean over frames of the RMS over bins 0..127 of the dB difference, with scipy's STFT as reference."""
    ref, est = eng.synth_clip(2), eng.synth_clip(5)
    a = np.maximum(np.abs(_scipy_mag(ref)), eng.FLOOR)
    b = np.maximum(np.abs(_scipy_mag(est)), eng.FLOOR)
    assert a.shape == (eng.N_BINS, eng.N_FRAMES)
    d = 20 * np.log10(a / b)
    expected = np.mean([np.sqrt(np.mean(d[:, t] ** 2)) for t in range(d.shape[1])])
    assert eng.lsd(ref, est) == pytest.approx(expected, rel=1e-3)


def test_istft_inverts_stft_to_float_precision():
    x = eng.synth_clip(6).astype(np.float64)
    y = eng.istft(eng.stft(x))
    assert y.shape == x.shape and np.linalg.norm(y - x) / np.linalg.norm(x) < 1e-5
    # the 128-bin form (Nyquist bin dropped) loses only what lies at 4 kHz
    assert np.linalg.norm(eng.istft(eng.stft(x)[: eng.N_BINS]) - x) / np.linalg.norm(x) < 1e-2


def test_shown_spectrograms_are_db_of_the_waveforms(default_result):
    for name, wav in default_result.audio.items():
        ref = 20 * np.log10(np.maximum(np.abs(_scipy_mag(wav)), eng.FLOOR))
        got = default_result.spec_db[name]
        loud = ref > -80
        assert loud.mean() > 0.2
        np.testing.assert_allclose(got[loud], ref[loud], atol=0.02, err_msg=name)


def test_trajectory_panel_follows_the_loudest_cell_and_ends_at_the_sample(default_result):
    """Panel 4: the traced cell is the loudest (bin, frame) of the shown clip's STFT, the star is its true value, the
    paths hold N + 1 points (z0, then one per Euler step) and the N = 10 path ends at the sampler's output there."""
    r = default_result
    S = eng.stft(r.audio["original"])[: eng.N_BINS]
    fbin, fr = np.unravel_index(int(np.argmax(np.abs(S))), S.shape)
    assert r.traj_point == (fr, fbin)
    assert abs(r.traj_target - S[fbin, fr]) <= 1e-6 * abs(S[fbin, fr])
    assert sorted(r.traj) == [4, 10, 50] and all(len(r.traj[n]) == n + 1 for n in r.traj)
    voc = eng.load_vocoder()
    _, mel = voc.prepare([eng.synth_clip(i) for i in range(r.config.n_eval)])
    out = voc.sample(mel, grid=voc.grid("straightness", 10), noise_seed=r.config.seed)
    end = out[0][fbin, fr]
    assert abs(r.traj[10][-1] - end) <= 1e-4 * abs(end) + 1e-7


@pytest.fixture(scope="module")
def n10_and_n4():
    """The default run's comparison samples rebuilt with the vocoder: straightness grid, N = 10 (seed 0) and N = 4
    (seeds 0 and 1), on the claim clips 0 and 1."""
    voc = eng.load_vocoder()
    clips = [eng.synth_clip(i) for i in range(eng.Config().n_eval)]
    _, mel = voc.prepare(clips)
    out = {(n, s): voc.sample(mel, grid=voc.grid("straightness", n), noise_seed=s) for n, s in ((10, 0), (4, 0), (4, 1))}
    return clips, mel, out


def test_straightness_numbers_match_their_rebuild(default_result, n10_and_n4):
    """The quality-vs-steps points are noise seed 0 (the title says so) and the N = 4 claim averages seeds 0 and 1."""
    clips, _, out = n10_and_n4
    m, sw = default_result.metrics, default_result.sweep
    lsd = {k: np.mean([eng.lsd(c, eng.istft(o)) for c, o in zip(clips, v)]) for k, v in out.items()}
    assert sw["straightness"][4] == pytest.approx(lsd[(4, 0)], rel=1e-4)
    assert m["lsd_straight4"] == pytest.approx(0.5 * (lsd[(4, 0)] + lsd[(4, 1)]), rel=1e-4)
    assert sw["straightness"][10] == m["lsd_n10"] == pytest.approx(lsd[(10, 0)], rel=1e-4)
    assert sw["uniform"][50] == m["lsd_n50"] and sw["uniform"][1] == m["lsd_n1"]


def test_diagnosis_box_is_measured_on_the_n10_samples(default_result, n10_and_n4):
    clips, mel, out = n10_and_n4
    mel_np = mel.numpy()
    diag = [eng.spectral_diagnosis(c, o, eng._griffin_lim(mel_np[i], 10, seed=0)) for i, (c, o)
            in enumerate(zip(clips, out[(10, 0)]))]
    for k in diag[0]:
        assert default_result.metrics[f"diag_{k}"] == pytest.approx(np.mean([d[k] for d in diag]), rel=1e-3, abs=1e-4), k


def test_every_recorded_default_metric_matches_a_fresh_run(default_result):
    meta = eng.load_vocoder().meta
    keys = [k[len("default_"):] for k in meta if k.startswith("default_") and k != "default_claims_passed"]
    assert {"lsd_n1", "lsd_reversed4", "lsd_shown", "lsd_gl_shown"} <= set(keys)
    for k in keys:
        assert abs(meta[f"default_{k}"] - default_result.metrics[k]) < 1e-3, k


def test_metrics_table_of_another_clip_is_measured_on_that_clip():
    """With clip 3 shown (outside the claim clips), the audio, both LSDs and the log-Mel L1 of the metrics table are
    those of clip 3's waveforms, recomputed from the returned audio."""
    r = eng.run(eng.Config(clip=3, n_eval=1))
    orig = r.audio["original"]
    np.testing.assert_array_equal(orig, eng.synth_clip(3))
    mel0 = eng.log_mel(eng.stft(orig))
    for row, name in zip(r.table, ("RFWave", "Griffin-Lim")):
        assert row["LSD (dB)"] == pytest.approx(eng.lsd(orig, r.audio[name]), rel=1e-5)
        assert row["log-Mel L1"] == pytest.approx(np.mean(np.abs(eng.log_mel(eng.stft(r.audio[name])) - mel0)),
                                                  rel=1e-4)
    assert r.metrics["lsd_shown"] == r.table[0]["LSD (dB)"] and r.metrics["lsd_gl_shown"] == r.table[1]["LSD (dB)"]


def test_phase_advance_error_matches_a_loop():
    """adv_err: on the loudest 2 % of the true cells at frame t ≥ 1, |wrapped (advance of the re-analysed estimate −
    true advance)| between frames t − 1 and t, with scipy's STFT for the re-analysis and loops over cells."""
    clip = eng.synth_clip(7)
    S = eng.stft(clip)[: eng.N_BINS]
    rng = np.random.default_rng(1)
    G = S * np.exp(1j * rng.uniform(-1.0, 1.0, S.shape))
    gl = clip + 0.05 * rng.standard_normal(len(clip))
    T = _scipy_mag(clip)
    a = np.abs(T)
    thr = np.quantile(a, 1 - eng.LOUD_SHARE)

    def ref(wave):
        E = _scipy_mag(wave)
        errs = []
        for k in range(eng.N_BINS):
            for t in range(1, T.shape[1]):
                if a[k, t] >= thr:
                    d = np.angle(E[k, t] * np.conj(E[k, t - 1])) - np.angle(T[k, t] * np.conj(T[k, t - 1]))
                    errs.append(abs((d + np.pi) % (2 * np.pi) - np.pi))
        return np.mean(errs)

    d = eng.spectral_diagnosis(clip, G, gl)
    assert d["adv_err"] == pytest.approx(ref(eng.istft(G)), rel=2e-3)
    assert d["adv_err_gl"] == pytest.approx(ref(gl), rel=2e-3)


def test_loud_gap_reads_exactly_the_loudest_two_percent():
    # quieting the loudest 3 % by 20 dB: the loudest 2 % (a subset) read +20 dB; a wider set would dilute it
    clip = eng.synth_clip(4)
    S = eng.stft(clip)[: eng.N_BINS]
    order = np.argsort(np.abs(S), axis=None)[::-1]
    top = np.unravel_index(order[: int(0.03 * S.size)], S.shape)
    G = S.copy()
    G[top] *= 0.1
    assert eng.spectral_diagnosis(clip, G, clip)["loud_gap_db"] == pytest.approx(20.0, abs=1e-3)


def test_upload_mixes_both_channels():
    # the tone is only in the right channel: a mono mix keeps it (at half level, then scaled to the peak)
    sr = 8000
    t = np.arange(2 * sr) / sr
    right = 0.4 * np.sin(2 * np.pi * 700 * t)
    clip, notes = eng.decode_upload(_encode(np.stack([np.zeros_like(right), right], axis=1), sr, subtype="FLOAT"))
    assert np.max(np.abs(clip)) == pytest.approx(eng.UPLOAD_PEAK)
    np.testing.assert_allclose(clip, right[: eng.N_SAMPLES] / 0.4 * eng.UPLOAD_PEAK, atol=1e-6)


def test_upload_window_is_searched_in_eighths_of_a_second():
    # one second of tone starting at 1.125 s: only the window starting exactly there (a multiple of 1/8 s) holds all
    # of it; a coarser search would cut some off
    sr = 8000
    x = np.zeros(3 * sr)
    x[9000:17000] = 0.3 * np.cos(2 * np.pi * 500 * np.arange(8000) / sr)
    clip, _ = eng.decode_upload(_encode(x, sr, subtype="FLOAT"))
    assert np.count_nonzero(clip) == np.count_nonzero(x)
    assert clip[0] == pytest.approx(eng.UPLOAD_PEAK)


# ----------------------------------------------------------------------------- what the page draws


def test_page_band_highlight_tiles_and_straightness_follow_the_result(default_result):
    """The page opened with band 2 highlighted, read back: each spectrogram has a dotted line at every inner band
    edge (multiples of 32 bins, in Hz) and an outline over exactly band 2's bins; the two LSD tiles are the LSD of
    the shown RFWave and Griffin-Lim waveforms against the original (recomputed from the audio); the straightness
    panel draws S(t) scaled to a maximum of 1."""
    res = default_result
    at = open_page("rfwave", {"band_view": "2"}, seed=(("engine.rfwave", eng.Config(), default_result),))
    specs = figures(at)

    hz_per_bin = eng.SR / eng.N_FFT
    for i in range(3):
        shapes = specs[f"spec{i}"]["layout"]["shapes"]
        lines = sorted(s["y0"] for s in shapes if s["type"] == "line")
        assert lines == pytest.approx([32 * hz_per_bin * k for k in range(1, eng.NUM_BANDS)])
        rects = [(s["y0"], s["y1"]) for s in shapes if s["type"] == "rect"]
        assert rects == [pytest.approx((64 * hz_per_bin, 96 * hz_per_bin))]

    tiles = {mt.label: mt.value for mt in at.metric}
    assert tiles["LSD RFWave (this clip)"] == f"{eng.lsd(res.audio['original'], res.audio['RFWave']):.2f} dB"
    gl = next(v for k, v in tiles.items() if k.startswith("LSD Griffin-Lim"))
    assert gl == f"{eng.lsd(res.audio['original'], res.audio['Griffin-Lim']):.2f} dB"

    paths = {t["name"]: (values(t["x"]), values(t["y"])) for t in specs["traj"]["data"]}
    for n, path in res.traj.items():
        np.testing.assert_allclose(paths[f"N = {n}"][0], np.real(path), rtol=1e-6)
        np.testing.assert_allclose(paths[f"N = {n}"][1], np.imag(path), rtol=1e-6)
    assert paths["ground truth"][0][0] == pytest.approx(float(np.real(res.traj_target)), rel=1e-6)
    assert paths["ground truth"][1][0] == pytest.approx(float(np.imag(res.traj_target)), rel=1e-6)

    s_line = next(t for t in specs["straight"]["data"] if t["name"] == "S(t) (scaled)")
    y = values(s_line["y"])
    assert y.max() == pytest.approx(1.0)
    np.testing.assert_allclose(y * res.curve_s.max(), res.curve_s, rtol=1e-6)


def test_page_waveforms_are_the_players_clips(default_result):
    """The waveform panel draws, on one time axis in seconds, the same three clips the audio players get (clipped to
    ±1 as the players are), one row each, in the players' order."""
    res = default_result
    at = open_page("rfwave", seed=(("engine.rfwave", eng.Config(), default_result),))
    fig = figures(at)["waves"]
    names = [t["name"] for t in fig["data"]]
    assert names == ["original", "RFWave", "Griffin-Lim"]
    axes = [t.get("yaxis", "y") for t in fig["data"]]
    assert len(set(axes)) == 3
    for t in fig["data"]:
        y = values(t["y"])
        np.testing.assert_allclose(y, np.clip(res.audio[t["name"]], -1, 1), rtol=1e-6)
        x = values(t["x"])
        assert len(x) == len(y) and x[0] == 0 and x[1] == pytest.approx(1 / eng.SR)


# ---- added by mutation testing (2026-12-07): each kills a mutant the file above let through ----

def test_rf_training_input_runs_from_noise_at_t0_to_data_at_t1_like_the_sampler():
    """The training loss and the sampler must share one time convention: the sampler starts at z0 (noise)
    at t = grid[0] = 0 and integrates to t = 1, so training must feed the network z_t = t z1 + (1 - t) z0
    (the noise at t = 0, the data at t = 1) with the clip's t for every band, that clip's Mel and the band
    index, and regress onto u = z1 - z0. Recorded from the network's inputs, against the formula written
    here."""
    z0, z1, mel = _pair(seed=4, nc=3)
    nc, nb, ch, nt = z1.shape
    mean, std = torch.zeros(2, eng.N_BINS), torch.ones(2, eng.N_BINS)
    t = torch.tensor([0.0, 0.3, 1.0])
    seen = {}

    def model(zt, tt, m, b):
        seen.update(zt=zt.clone(), t=tt.clone(), mel=m.clone(), band=b.clone())
        return (z1 - z0).reshape(nc * nb, ch, nt)          # the exact velocity: every loss part must vanish

    _, parts = eng.rf_losses(model, z1, mel, mean, std, t=t, z0=z0)
    zt = seen["zt"].reshape(nc, nb, ch, nt)
    for c in range(nc):
        want = float(t[c]) * z1[c] + (1 - float(t[c])) * z0[c]
        torch.testing.assert_close(zt[c], want, rtol=0, atol=1e-6)
        for k in range(nb):
            i = c * nb + k
            assert float(seen["t"][i]) == float(t[c]) and int(seen["band"][i]) == k
            assert torch.equal(seen["mel"][i], mel[c])
    assert torch.equal(zt[0], z0[0]) and torch.equal(zt[2], z1[2])    # t = 0: pure noise; t = 1: the data
    assert parts["rf"] < 1e-10


def test_sampler_gives_every_row_its_own_band_index_clip_mel_and_noise():
    """Batched sampling stacks the bands of all clips clip by clip (row = clip * NUM_BANDS + band, as
    ``split_bands`` and ``merge_bands`` lay them out): each network call must get, for every row, that band's
    index, that clip's Mel and the shared time t. Today only a recorded-metrics snapshot notices when the band
    indices run in the other order (band-major); this reads the network's inputs directly."""
    voc = eng.load_vocoder()
    _, mel = voc.prepare([eng.synth_clip(0), eng.synth_clip(1), eng.synth_clip(2)])
    nc = mel.shape[0]
    seen = []
    real = voc.model

    def spy(z, t, m, b):
        seen.append((z.clone(), t.clone(), m.clone(), b.clone()))
        return real(z, t, m, b)

    voc.model = spy
    try:
        voc.sample(mel, n_steps=2, noise_seed=1)
    finally:
        voc.model = real
    assert len(seen) == 2
    z0 = voc.noise_z0(mel, 1).reshape(nc * eng.NUM_BANDS, eng.CH, -1)
    assert torch.equal(seen[0][0], z0)                            # the first step starts from this noise
    for _z, t, m, b in seen:
        for i in range(nc * eng.NUM_BANDS):
            assert int(b[i]) == i % eng.NUM_BANDS and torch.equal(m[i], mel[i // eng.NUM_BANDS])
        assert len(set(t.tolist())) == 1
