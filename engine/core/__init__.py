"""Shared engine pieces: claims, device choice, seeding, progress.

Importing this package does not import torch; the torch helpers live in
``engine.core.nn`` and are imported only by engines that train models.
"""

from engine.core.claims import Claim, all_passed, auc_chance_bar, auc_standard_error
from engine.core.device import FORCE_CPU_ENV, device_label, get_device
from engine.core.progress import Progress, ProgressSpan, report
from engine.core.seeding import make_rng, seed_everything

__all__ = [
    "Claim",
    "all_passed",
    "auc_chance_bar",
    "auc_standard_error",
    "FORCE_CPU_ENV",
    "device_label",
    "get_device",
    "Progress",
    "ProgressSpan",
    "report",
    "make_rng",
    "seed_everything",
]

from engine.core.params import Bool, Choice, Float, Int, Multi, ParamError, Text, param, widget_specs  # noqa: E402

__all__ += ["Bool", "Choice", "Float", "Int", "Multi", "ParamError", "Text", "param", "widget_specs"]


class InputError(ValueError):
    """A problem with what the user supplied (an upload, a combination of settings).

    Pages catch it and show its message; it never reaches the user as a traceback.
    """


__all__ += ["InputError"]


def check_upload(data, max_bytes: int, blank_is_empty: bool = False) -> bytes:
    """The bytes of an uploaded file, or an InputError when there are none (or, for text formats with
    ``blank_is_empty``, only whitespace) or more than ``max_bytes``."""
    if not isinstance(data, bytes | bytearray) or len(data) == 0 or (blank_is_empty and not data.strip()):
        raise InputError("The uploaded file is empty.")
    if len(data) > max_bytes:
        raise InputError(f"The file is {len(data) / 2**20:.1f} MB; the limit is {max_bytes // 2**20} MB.")
    return bytes(data)


__all__ += ["check_upload"]
