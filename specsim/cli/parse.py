"""Option-value parsing shared by the commands (one parser, one error wording)."""

from __future__ import annotations

from specsim.errors import ConfigError


def int_list(text: str, field: str, lo: int = 1, hi: int | None = None) -> list[int]:
    """'1,2,4' or ranges like '1-6' → sorted distinct integers in [lo, hi]; a clear error otherwise."""
    vals: set[int] = set()
    try:
        for part in filter(None, (p.strip() for p in text.split(","))):
            a, _, b = part.partition("-")
            vals.update(range(int(a), int(b or a) + 1))
    except ValueError:
        raise ConfigError("must be comma-separated integers (or ranges like 1-6)", field=field, value=text,
                          allowed="e.g. 1,2,4,8 or 1-6") from None
    if not vals or min(vals) < lo or (hi is not None and max(vals) > hi):
        raise ConfigError("value out of range", field=field, value=text,
                          allowed=f">= {lo}" if hi is None else f"[{lo}, {hi}]")
    return sorted(vals)
