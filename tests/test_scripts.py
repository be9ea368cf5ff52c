"""The hand-run scripts still work: the widget-extremes sweep finds a flip that must be there."""

import pytest

from tests import extremes


def test_extremes_sweep_sees_the_mechanism_switched_off(capsys):
    extremes.probe("engine.moe_continual", limit=60.0)
    out = capsys.readouterr().out
    # one expert is no mixture at all: the MoE-vs-single badge must flip there
    block = out.split("  experts=1:")[1].split("\n  ")[0:4]
    assert any("median G_T(MoE) / G_T(single): pass" in line and "-> FAIL" in line for line in block), out
    # a setting the engine refuses is reported as such, with the engine's message
    assert "  pool=1: refused: the pool (N = 1) must hold at least one task per cluster" in out, out


def test_seed_sweep_writes_the_flips_the_claims_panel_reads(tmp_path, monkeypatch):
    """`tests.seeds --write` on the cheapest page whose badges flip with the seed (moe-continual: its gating
    badges change between seeds 0 and 1) stores them, and `seed_notes.note` turns them into the panel's line."""
    import importlib
    import json
    import sys

    from components import seed_notes
    from tests import seeds

    out = tmp_path / "flips.json"
    out.write_text(json.dumps({"pages": {"some-other-page": {"measured": "x", "seeds": [0], "flips": {}}}}))
    monkeypatch.setattr(sys, "argv", ["seeds", "--pages", "moe-continual", "--seeds", "0,1", "--write",
                                      "--out", str(out)])
    seeds.main()
    data = json.loads(out.read_text())
    assert "some-other-page" in data["pages"]                     # pages not run keep their entry
    page = data["pages"]["moe-continual"]
    assert page["seeds"] == [0, 1] and page["flips"]
    eng = importlib.import_module("engine.moe_continual")
    labels = {c.label for c in eng.claims(eng.run(eng.Config()))}
    for label, rows in page["flips"].items():
        assert label in labels
        assert len({ok for _, ok, _ in rows}) == 2                 # a stored flip really changes verdict
        line = seed_notes.note("moe-continual", label, path=str(out))
        assert line.startswith("At the default settings this verdict changes with the seed: seed 0 ")
    assert seed_notes.note("moe-continual", "no such badge", path=str(out)) is None
    assert seed_notes.note(None, next(iter(page["flips"])), path=str(out)) is None


def test_shipped_seed_flips_name_existing_badges():
    """Every badge named in the shipped assets/seed_flips.json is still a claim label of that page at its default
    config (a renamed badge would silently lose its note), and every stored flip really changes verdict."""
    import importlib
    import json

    from components import seed_notes
    from engine.registry import built_papers

    data = json.loads(seed_notes.PATH.read_text())
    papers = {p.slug: p for p in built_papers()}
    assert set(data["pages"]) <= set(papers)
    for slug, page in data["pages"].items():
        if not page["flips"]:
            continue
        eng = importlib.import_module(papers[slug].module)
        claims = {c.label: c for c in eng.claims(eng.run(eng.Config()))}
        seed0 = eng.Config().seed
        for label, rows in page["flips"].items():
            assert label in claims, (slug, label)
            assert len({ok for _, ok, _ in rows}) == 2, (slug, label)
            # the stored row of the default seed is this very run: same verdict, same value (the data are current),
            # where the survey was made on a machine of this kind (or before surveys recorded the machine)
            same_kind = page.get("machine", seed_notes.machine()) == seed_notes.machine()
            for seed, ok, value in rows:
                if seed == seed0 and same_kind:
                    c = claims[label]
                    assert ok == c.passed and value == pytest.approx(c.measured, rel=1e-4, abs=1e-6), \
                        (slug, label, value, c.measured)


def test_bench_table_keeps_the_rows_of_pages_it_did_not_rerun():
    from tests import bench

    block = ("| page | claims | a | b | c | d | e | f |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n"
             "| p1 | 1/1 | 1.00 | 0.50 | 1.10 | 0.050 | 3.0 | 100 |\n"
             "| p2 | 2/2 | 2.00 | 0.60 | 1.20 | 0.060 | 4.0 | 200 |\n\n"
             "| page | kernel | ours (s) | reference | reference (s) | ratio ours/ref |\n"
             "| --- | --- | --- | --- | --- | --- |\n| p2 | k | 0.0010 | ref | 0.0020 | 0.50 |\n")
    fresh = [{"page": "p1", "claims": "1/1", "cold_s": 0.9, "warm_s": 0.4, "page_cold_s": 1.0, "page_warm_s": 0.7,
              "hit_s": 0.04,
              "heavy_s": 2.5, "rss_mib": 99, "kernels": [{"name": "k1", "ours_s": 0.001, "ref": "r", "ref_s": 0.002}]}]
    md = bench.table(0.4, fresh, bench._old_rows(block), ["p1", "p2"], bench._old_kernel_rows(block))
    assert "| p1 | 1/1 | 0.90 | 0.40 | 1.00 | 0.70 | 0.040 | 2.5 | 99 |" in md
    # an older row without the warm-server page render keeps its numbers under the right columns
    assert "| p2 (earlier run) | 2/2 | 2.00 | 0.60 | 1.20 | — | 0.060 | 4.0 | 200 |" in md
    assert "| p1 | k1 | 0.0010 | r | 0.0020 | 0.50 |" in md and "| p2 | k | 0.0010 | ref | 0.0020 | 0.50 |" in md


def test_a_seed_note_says_when_its_survey_came_from_another_kind_of_machine(tmp_path):
    import json

    from components import seed_notes

    here = seed_notes.machine()
    assert here.split()[0] and len(here.split()) == 2
    rows = {"badge": [[0, True, 1.5], [1, False, 0.5]]}
    for where, mentioned in ((here, False), ("x86_64 X86_V3" if "X86_V3" not in here else "aarch64 ASIMD", True),
                             (None, False)):
        entry = {"measured": "2026-12-06", "seeds": [0, 1], "flips": rows}
        if where:
            entry["machine"] = where
        path = tmp_path / f"flips{len(str(where))}.json"
        path.write_text(json.dumps({"pages": {"demo": entry}}))
        line = seed_notes.note("demo", "badge", path=str(path))
        assert line.startswith("At the default settings this verdict changes with the seed: seed 0 pass 1.5")
        assert ("another kind" in line) == mentioned and (where in line if mentioned else True), line
        if mentioned:
            assert here in line
