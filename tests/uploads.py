"""Helpers shared by the upload fuzz tests."""

from __future__ import annotations

from engine.core import InputError


def damaged(data: bytes, edits: list[tuple[int, int]]) -> bytes:
    """``data`` with byte ``pos`` set to ``value`` for each (pos, value) in ``edits`` that falls inside it."""
    out = bytearray(data)
    for pos, value in edits:
        if pos < len(out):
            out[pos] = value
    return bytes(out)


def read_or_refuse(reader, data: bytes):
    """``reader(data)``, or None when it refuses the file with an InputError (any other exception propagates)."""
    try:
        return reader(data)
    except InputError:
        return None
