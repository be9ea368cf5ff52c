"""A claim of a paper, checked against a number the engine measured.

``passed`` is not a field: it is computed from ``measured``, ``op`` and
``threshold`` so a claim can never be marked as passing by hand.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

_OPS = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


@dataclass(frozen=True)
class Claim:
    """One paper statement reproduced at small scale.

    statement: the paper's claim, in our words.
    measured:  the value the engine measured on this run.
    op:        one of "<", "<=", ">", ">=" (measured OP threshold must hold).
    threshold: the bar a correct implementation clears and a broken one does not.
    label:     short name for the measured quantity (shown on the badge).
    detail:    optional context (what baseline, which setting).
    fmt:       format spec used to print measured and threshold.
    """

    statement: str
    measured: float
    op: str
    threshold: float
    label: str = ""
    detail: str = ""
    fmt: str = ".3g"

    def __post_init__(self) -> None:
        if self.op not in _OPS:
            raise ValueError(f"Claim op must be one of {sorted(_OPS)}, got {self.op!r}")
        object.__setattr__(self, "measured", float(self.measured))
        object.__setattr__(self, "threshold", float(self.threshold))

    @property
    def passed(self) -> bool:
        if not math.isfinite(self.measured):
            return False
        return bool(_OPS[self.op](self.measured, self.threshold))

    def describe(self) -> str:
        m = format(self.measured, self.fmt)
        t = format(self.threshold, self.fmt)
        name = self.label or "measured"
        return f"{name} = {m} (needs {self.op} {t})"

    def to_dict(self) -> dict:
        return {
            "statement": self.statement,
            "label": self.label,
            "measured": self.measured,
            "op": self.op,
            "threshold": self.threshold,
            "passed": self.passed,
            "detail": self.detail,
        }


def all_passed(claims: list[Claim]) -> bool:
    return all(c.passed for c in claims)


def auc_chance_bar(n_pos: int, n_neg: int, k: float = 3.0) -> float:
    """0.5 + k·σ₀, where σ₀ = √((n₊ + n₋ + 1) / (12 n₊ n₋)) is the standard deviation of the AUC (Mann–Whitney
    U / n₊n₋) of a score unrelated to the labels: an AUC at or above it is clearly better than chance."""
    return 0.5 + k * math.sqrt((n_pos + n_neg + 1) / (12.0 * n_pos * n_neg))


def auc_standard_error(auc: float, n_pos: int, n_neg: int) -> float:
    """Hanley & McNeil's (1982) standard error of an AUC measured on n₊ positives and n₋ negatives."""
    q1, q2 = auc / (2 - auc), 2 * auc * auc / (1 + auc)
    var = (auc * (1 - auc) + (n_pos - 1) * (q1 - auc * auc) + (n_neg - 1) * (q2 - auc * auc)) / (n_pos * n_neg)
    return math.sqrt(max(var, 0.0))
