"""Progress protocol: a callable ``progress(fraction, message)``, fraction in [0, 1].

Engines call ``report(progress, f, msg)`` in long loops; ``ProgressSpan`` maps a
sub-task onto a slice of the overall bar so nested loops can share one bar.
"""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[float, str], None]


def report(progress: Progress | None, fraction: float, message: str = "") -> None:
    if progress is None:
        return
    f = min(1.0, max(0.0, float(fraction)))
    progress(f, message)


class ProgressSpan:
    """Forward progress of a sub-task onto [start, stop] of the parent bar."""

    def __init__(self, progress: Progress | None, start: float, stop: float, prefix: str = ""):
        self.progress = progress
        self.start = float(start)
        self.stop = float(stop)
        self.prefix = prefix

    def __call__(self, fraction: float, message: str = "") -> None:
        f = min(1.0, max(0.0, float(fraction)))
        msg = f"{self.prefix}{message}" if self.prefix else message
        report(self.progress, self.start + (self.stop - self.start) * f, msg)

    def sub(self, start: float, stop: float, prefix: str = "") -> ProgressSpan:
        a = self.start + (self.stop - self.start) * start
        b = self.start + (self.stop - self.start) * stop
        return ProgressSpan(self.progress, a, b, prefix or self.prefix)
