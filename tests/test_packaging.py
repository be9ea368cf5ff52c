"""Deployment files stay in step with pyproject.toml; the CI entry point calls the README's command."""

import tomllib

from engine.registry import ROOT


def _reqs(lines):
    return sorted(line.strip() for line in lines if line.strip() and not line.strip().startswith("#"))


def test_requirements_match_pyproject():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert _reqs((ROOT / "requirements.txt").read_text().splitlines()) == sorted(deps)
    assert "torch==2.13.0" in deps, "torch must stay pinned (an open range pulls a CUDA build)"


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    commands = [line for line in readme.splitlines() if line.startswith("python3 -m venv .venv")]
    assert len(commands) == 2, "README gives two commands: run the app, run the tests"
    app, test = commands
    assert app.endswith("streamlit run app.py") and test.endswith("pytest -q")
    assert test in ci, ".ci/run must call the README's test command"


def test_streamlit_config_caps_uploads():
    cfg = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert 1 <= cfg["server"]["maxUploadSize"] <= 50
    # the uploader's own limit (shown under the widget) is the engine's, so a file it accepts is never refused later
    from engine.bilinear_mlp import MAX_UPLOAD_BYTES as DIGIT_BYTES
    from engine.densematcher import MAX_FILE_BYTES
    from engine.jl_dynamic_graph_metric import MAX_UPLOAD_BYTES as JL_BYTES
    from engine.rfwave import MAX_UPLOAD_BYTES

    assert cfg["server"]["maxUploadSize"] * 2**20 == MAX_FILE_BYTES == MAX_UPLOAD_BYTES == JL_BYTES == DIGIT_BYTES


def test_tab_icon_is_served_by_the_app_and_is_the_one_the_script_draws():
    """app.py names a local image as the tab icon (a Material-symbol or emoji icon makes the browser fetch it from a
    CDN), and assets/favicon.png is exactly what ``python -m components.favicon`` draws."""
    import numpy as np
    from PIL import Image

    from components import favicon

    app = (ROOT / "app.py").read_text()
    assert 'page_icon=str(Path(__file__).parent / "assets" / "favicon.png")' in app
    shipped = np.asarray(Image.open(favicon.PATH).convert("RGBA"))
    drawn = favicon.draw()
    assert shipped.shape == (favicon.SIZE, favicon.SIZE, 4)
    assert np.array_equal(shipped, drawn)
    # the drawing itself: transparent corners, the theme colour on the tile, a white stroke
    assert drawn[0, 0, 3] == 0 and drawn[-1, -1, 3] == 0
    assert tuple(drawn[60, 32, :3]) == favicon.PRIMARY and drawn[60, 32, 3] == 255
    assert (drawn[..., :3].min(axis=-1) == 255).sum() > 100


def test_readme_page_table_follows_the_registry():
    # one row per paper: its local link, its title and the registry's one-line summary, word for word
    from engine.registry import PAPERS

    readme = (ROOT / "README.md").read_text()
    for p in PAPERS:
        assert f"(http://localhost:8501/{p.url_path})" in readme, p.slug
        assert p.summary in readme, f"README's row for {p.slug} differs from the registry summary"
