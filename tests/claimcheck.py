"""Shared check for the claims tests of engines whose badges include some read from a clock."""

from __future__ import annotations

import math


def assert_untimed_claims_pass(claims, timing_labels, n_timed: int) -> None:
    """Every badge not read from a clock passes; the `n_timed` clock badges (labels in `timing_labels`) are shown
    with a finite measurement, but their verdicts are not asserted (the team asserts no wall time in tests)."""
    timed = [c for c in claims if c.label in timing_labels]
    assert len(timed) == n_timed, [c.label for c in timed]
    assert all(math.isfinite(c.measured) for c in timed), [c.describe() for c in timed]
    failed = [c.describe() + " — " + c.statement for c in claims if c.label not in timing_labels and not c.passed]
    assert not failed, failed
