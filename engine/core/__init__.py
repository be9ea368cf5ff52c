"""Shared engine pieces: claims, device choice, seeding, progress.

Importing this package does not import torch; the torch helpers live in
``engine.core.nn`` and are imported only by engines that train models.
"""

from engine.core.claims import Claim, all_passed, auc_chance_bar
from engine.core.device import FORCE_CPU_ENV, device_label, get_device
from engine.core.progress import Progress, ProgressSpan, report
from engine.core.seeding import make_rng, seed_everything

__all__ = [
    "Claim",
    "all_passed",
    "auc_chance_bar",
    "FORCE_CPU_ENV",
    "device_label",
    "get_device",
    "Progress",
    "ProgressSpan",
    "report",
    "make_rng",
    "seed_everything",
]

from engine.core.params import Bool, Choice, Float, Int, ParamError, Text, param, widget_specs  # noqa: E402

__all__ += ["Bool", "Choice", "Float", "Int", "ParamError", "Text", "param", "widget_specs"]


class InputError(ValueError):
    """A problem with what the user supplied (an upload, a combination of settings).

    Pages catch it and show its message; it never reaches the user as a traceback.
    """


__all__ += ["InputError"]
