"""Widget specifications attached to Config fields (pure data, no streamlit).

Each field of an engine's frozen ``Config`` carries its widget in the field
metadata: ``rank: int = param(8, Int(1, 64, "Rank"))``. The page binds widgets
to fields one-to-one (components.state), the URL stores the same fields, and the
tests draw random valid configs from the same specs. A spec knows how to parse
a query-parameter string, reject bad values with a readable reason, and write a
value back as a string.
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass
from typing import Any

MAX_PARAM_CHARS = 300


class ParamError(ValueError):
    """A query-parameter value that cannot be used; the message says why."""


def _check_len(raw: str) -> str:
    if raw is None:
        raise ParamError("missing value")
    raw = str(raw)
    if len(raw) > MAX_PARAM_CHARS:
        raise ParamError(f"value is {len(raw)} characters long (limit {MAX_PARAM_CHARS})")
    return raw.strip()


@dataclass(frozen=True)
class Int:
    lo: int
    hi: int
    label: str
    help: str = ""
    step: int = 1
    widget: str = "slider"  # or "number"
    group: str = ""

    def parse(self, raw: str) -> int:
        s = _check_len(raw)
        try:
            f = float(s)
        except ValueError:
            raise ParamError(f"{s[:40]!r} is not a whole number") from None
        if not math.isfinite(f) or f != int(f):
            raise ParamError(f"{s[:40]!r} is not a whole number")
        return self.validate(int(f))

    def validate(self, v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int | float) or (isinstance(v, float) and v != int(v)):
            raise ParamError(f"{v!r} is not a whole number")
        v = int(v)
        if not self.lo <= v <= self.hi:
            raise ParamError(f"{v} is outside [{self.lo}, {self.hi}]")
        return v

    def to_str(self, v: int) -> str:
        return str(int(v))

    def sample(self, rng: random.Random) -> int:
        n = (self.hi - self.lo) // self.step
        return self.lo + self.step * rng.randint(0, n)

    def extremes(self) -> list[int]:
        return [self.lo, self.hi]


@dataclass(frozen=True)
class Float:
    lo: float
    hi: float
    label: str
    help: str = ""
    step: float | None = None
    fmt: str = "%.3g"
    widget: str = "slider"  # or "number"
    group: str = ""

    def parse(self, raw: str) -> float:
        s = _check_len(raw)
        try:
            v = float(s)
        except ValueError:
            raise ParamError(f"{s[:40]!r} is not a number") from None
        return self.validate(v)

    def validate(self, v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ParamError(f"{v!r} is not a number")
        v = float(v)
        if not math.isfinite(v):
            raise ParamError(f"{v} is not finite")
        if not self.lo <= v <= self.hi:
            raise ParamError(f"{v:g} is outside [{self.lo:g}, {self.hi:g}]")
        return v

    def to_str(self, v: float) -> str:
        return repr(float(v))

    def sample(self, rng: random.Random) -> float:
        if self.step:
            # the last step may overshoot when step does not divide the range: such a grid ends at hi itself
            n = int(round((self.hi - self.lo) / self.step))
            return min(round(self.lo + self.step * rng.randint(0, n), 10), self.hi)
        return rng.uniform(self.lo, self.hi)

    def extremes(self) -> list[float]:
        return [self.lo, self.hi]


def _match_option(options: tuple, s: str) -> Any:
    """The option whose text is ``s``; numeric options also accept another spelling ("0.10" for 0.1)."""
    for o in options:
        if str(o) == s:
            return o
    for o in options:
        if isinstance(o, int | float) and not isinstance(o, bool):
            try:
                if float(s) == float(o):
                    return o
            except ValueError:
                break
    shown = ", ".join(str(o) for o in options[:8])
    raise ParamError(f"{s[:40]!r} is not one of: {shown}{'…' if len(options) > 8 else ''}")


@dataclass(frozen=True)
class Choice:
    options: tuple
    label: str
    help: str = ""
    widget: str = "selectbox"  # "radio", "select_slider"
    labels: tuple | None = None  # display names, parallel to options
    group: str = ""

    def parse(self, raw: str) -> Any:
        return _match_option(self.options, _check_len(raw))

    def validate(self, v: Any) -> Any:
        if v not in self.options:
            raise ParamError(f"{v!r} is not an allowed option")
        return v

    def to_str(self, v: Any) -> str:
        return str(v)

    def display(self, v: Any) -> str:
        if self.labels:
            return str(self.labels[self.options.index(v)])
        return str(v)

    def sample(self, rng: random.Random) -> Any:
        return rng.choice(list(self.options))

    def extremes(self) -> list:
        return [self.options[0], self.options[-1]]


@dataclass(frozen=True)
class Multi:
    """A subset of ``options`` (a multiselect). The value is a tuple in the options' order; the URL writes it
    comma-separated. At least ``min_size`` options must be chosen."""

    options: tuple
    label: str
    help: str = ""
    labels: tuple | None = None  # display names, parallel to options
    min_size: int = 1
    group: str = ""
    aliases: tuple = ()   # (old URL string, value) pairs: links written before a setting became a multiselect

    def parse(self, raw: str) -> tuple:
        s = _check_len(raw)
        for old, value in self.aliases:
            if s == old:
                return self.validate(value)
        parts = [p.strip() for p in s.split(",") if p.strip()]
        return self.validate(tuple(_match_option(self.options, p) for p in parts))

    def validate(self, v: Any) -> tuple:
        if isinstance(v, str) or not isinstance(v, list | tuple):
            raise ParamError(f"{v!r} is not a list of options")
        for x in v:
            if x not in self.options:
                raise ParamError(f"{x!r} is not an allowed option")
        out = tuple(o for o in self.options if o in v)
        if len(out) < self.min_size:
            raise ParamError(f"choose at least {self.min_size} of the options" if self.min_size > 1
                             else "choose at least one option")
        return out

    def to_str(self, v: Any) -> str:
        return ",".join(str(o) for o in self.validate(v))

    def display(self, v: Any) -> str:
        if self.labels:
            return str(self.labels[self.options.index(v)])
        return str(v)

    def sample(self, rng: random.Random) -> tuple:
        k = rng.randint(self.min_size, len(self.options))
        return self.validate(tuple(rng.sample(list(self.options), k)))

    def extremes(self) -> list[tuple]:
        return [tuple(self.options[:self.min_size]), tuple(self.options)]


@dataclass(frozen=True)
class Bool:
    label: str
    help: str = ""
    widget: str = "checkbox"  # or "toggle"
    group: str = ""

    def parse(self, raw: str) -> bool:
        s = _check_len(raw).lower()
        if s in {"1", "true", "yes", "on"}:
            return True
        if s in {"0", "false", "no", "off"}:
            return False
        raise ParamError(f"{s[:40]!r} is not true/false")

    def validate(self, v: Any) -> bool:
        if not isinstance(v, bool):
            raise ParamError(f"{v!r} is not true/false")
        return v

    def to_str(self, v: bool) -> str:
        return "true" if v else "false"

    def sample(self, rng: random.Random) -> bool:
        return rng.random() < 0.5

    def extremes(self) -> list[bool]:
        return [False, True]


@dataclass(frozen=True)
class Text:
    label: str
    max_chars: int = 200
    help: str = ""
    group: str = ""
    alphabet: str = "abcdefghijklmnopqrstuvwxyz "

    def parse(self, raw: str) -> str:
        s = str(raw) if raw is not None else ""
        if len(s) > self.max_chars:
            raise ParamError(f"text is {len(s)} characters long (limit {self.max_chars})")
        return self.validate(s)

    def validate(self, v: Any) -> str:
        if not isinstance(v, str):
            raise ParamError("not text")
        if len(v) > self.max_chars:
            raise ParamError(f"text is {len(v)} characters long (limit {self.max_chars})")
        return "".join(ch for ch in v if ch.isprintable())

    def to_str(self, v: str) -> str:
        return v

    def sample(self, rng: random.Random) -> str:
        n = rng.randint(0, min(40, self.max_chars))
        return "".join(rng.choice(self.alphabet) for _ in range(n))

    def extremes(self) -> list[str]:
        return ["", self.alphabet[0] * self.max_chars]


Spec = Int | Float | Choice | Multi | Bool | Text


def param(default: Any, spec: Spec) -> Any:
    """A dataclass field whose default is ``default`` and whose widget is ``spec``."""
    return dataclasses.field(default=default, metadata={"widget": spec})


def widget_specs(config_cls) -> dict[str, Spec]:
    """Field name -> spec, for every field of a Config that carries a widget."""
    out = {}
    for f in dataclasses.fields(config_cls):
        spec = f.metadata.get("widget")
        if spec is not None:
            out[f.name] = spec
    return out


def defaults(config_cls) -> dict[str, Any]:
    return {f.name: f.default for f in dataclasses.fields(config_cls)}


def random_config(config_cls, rng: random.Random, **fixed):
    """A random valid Config drawn from the widget specs (for tests)."""
    values = {name: spec.sample(rng) for name, spec in widget_specs(config_cls).items()}
    values.update(fixed)
    return config_cls(**values)


def to_query(config) -> dict[str, str]:
    """Config -> query parameters (every widget field, as strings)."""
    specs = widget_specs(type(config))
    return {name: spec.to_str(getattr(config, name)) for name, spec in specs.items()}


def upgrade_query(config_cls, query: dict[str, str]) -> dict[str, str]:
    """A copy of ``query`` with the names of links written before a setting was renamed translated to today's, by
    the Config's own ``upgrade_query`` (a static method, where a page has one); other names are left as they are."""
    fn = getattr(config_cls, "upgrade_query", None)
    return fn(dict(query)) if fn is not None else dict(query)


def from_query(config_cls, query: dict[str, str]) -> tuple[Any, list[str]]:
    """Query parameters -> (Config, notices). Bad values fall back to defaults."""
    query = upgrade_query(config_cls, query)
    specs = widget_specs(config_cls)
    base = defaults(config_cls)
    notices: list[str] = []
    values = {}
    for name, spec in specs.items():
        if name in query:
            try:
                values[name] = spec.parse(query[name])
            except ParamError as e:
                notices.append(f"`{name}`: {e}; using the default ({spec.to_str(base[name])})")
    try:
        cfg = config_cls(**values)
    except (ValueError, TypeError) as e:
        notices.append(f"these settings do not fit together ({e}); using the defaults")
        cfg = config_cls()
    return cfg, notices
