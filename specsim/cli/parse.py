"""Option-value parsing shared by the commands (one parser, one error wording)."""

from __future__ import annotations

from specsim.errors import ConfigError

MAX_LIST_VALUES = 4096  # a list option expands to at most this many values (a typo like 1-100000000 must not hang)


def int_list(text: str, field: str, lo: int = 1, hi: int | None = 1 << 20,
             max_values: int = MAX_LIST_VALUES) -> list[int]:
    """'1,2,4' or ranges like '1-6' → sorted distinct integers in [lo, hi]; a clear error otherwise."""
    allowed = f">= {lo}" if hi is None else f"[{lo}, {hi}]"
    spans: list[tuple[int, int]] = []
    try:
        for part in filter(None, (p.strip() for p in text.split(","))):
            a, _, b = part.partition("-")
            spans.append((int(a), int(b or a)))
    except ValueError:
        raise ConfigError("must be comma-separated integers (or ranges like 1-6)", field=field, value=text,
                          allowed="e.g. 1,2,4,8 or 1-6") from None
    if not spans:
        raise ConfigError("value out of range: the list is empty", field=field, value=text, allowed=allowed)
    for a, b in spans:
        if a > b:
            raise ConfigError("a range must run upwards", field=field, value=text, allowed="e.g. 1-6")
        if a < lo or (hi is not None and b > hi):
            raise ConfigError("value out of range", field=field, value=text, allowed=allowed)
    if sum(b - a + 1 for a, b in spans) > max_values:
        raise ConfigError("too many values", field=field, value=text, allowed=f"at most {max_values} values")
    vals: set[int] = set()
    for a, b in spans:
        vals.update(range(a, b + 1))
    return sorted(vals)
