"""A measured power row resolved into the passes its GPU ran (`RowParts`), for the power-curve fit
(`specsim.cost.power_fit`): each row is its own deployment — model, GPU, stack, TP — resolved like any run's, so
this is setup's work, not the cost layer's. The rule (one decode pass at the row's batch and mean live context plus
its share of prefills) is `specsim.cost.power_fit`'s module docstring."""

from __future__ import annotations

from specsim.cost.power_fit import PowerRow, RowParts
from specsim.errors import ConfigError
from specsim.setup.deployment import Deployment


def row_parts(row: PowerRow) -> RowParts:
    """The row's decode pass and its prefill share, priced by the cost model (`specsim.cost.power_fit`'s module
    docstring)."""
    dep = Deployment.resolve(row.gpu, row.model, stack=row.stack, tp=row.tp)  # roofline or measured kernels alike
    hw, cm = dep.hardware, dep.cost_models[0]
    if hw.tdp_w is None or hw.idle_w is None:
        raise ConfigError("the hardware profile has no tdp_w / idle_w to fit a power curve to", field="gpu",
                          value=row.gpu, allowed="a profile with tdp_w and idle_w")
    B = max(1, int(round(row.batch)))
    dec = cm.pass_cost(B, 1, int(row.prompt_len + row.output_len / 2))
    pre = cm.prefill_cost(1, row.prompt_len)
    bw, peak = dep.peak_bytes_s, dep.peak_flops
    parts = tuple((p.time_s * w, p.bytes / (p.time_s * bw), p.flops / (p.time_s * peak))
                  for p, w in ((dec, 1.0), (pre, B / row.output_len)))
    return RowParts(row, parts, hw.tdp_w, hw.idle_w)
