"""Checks on a sweep's points that run before any work, without building a large grid's points all at once.

A grid of up to FULL_CHECK_POINTS points has every point validated; a larger one has every pair of axis values
validated (SimConfig's cross-field rules relate two fields at a time), the smallest pairs of axes first, within
PAIR_BUDGET points, so a 4M-point grid is checked in a second or two. A point the checks could not reach and that
SimConfig still refuses stops the sweep when its chunk is built (one line; the parts before it are kept).
Profiles, data files and every (hardware, stack, tp, target, draft) cost model are checked once per distinct
value. Each failure is one ConfigError naming the spec file and the field (`grid.gamma`).
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from specsim.config import FLAT_FIELDS, RuleViolation, SimConfig, field_of_loc
from specsim.errors import ConfigError, SpecsimError
from specsim.setup.deployment import Deployment, load_profile, resolve_stack
from specsim.sweep.grid import DATA_FIELDS, Grid, canonical_json, digest, source_label, sources
from specsim.sweep.values import rule, shown

FULL_CHECK_POINTS = 100_000
PAIR_BUDGET = 200_000
PATH_FIELDS = DATA_FIELDS  # data files a point reads: relative to the spec when written relative
_FIELDS = list(FLAT_FIELDS)


def check_points(g: Grid, path: Path, where) -> dict[str, list[SimConfig]]:
    """Validate every point of a small grid, every pair of axis values of a large one (SimConfig's cross-field
    rules relate two fields); return point 0 and, per axis, the points that vary that axis alone."""
    sizes = [len(v) for _, v in g.axes]
    strides = [math.prod(sizes[k + 1:]) for k in range(len(sizes))]
    reps: dict[str, list[SimConfig]] = {"": [_validate(g, 0, path, where)]}
    for (name, vals), stride in zip(g.axes, strides):
        reps[name] = [_validate(g, j * stride, path, where) for j in range(len(vals))]
    if len(g) <= FULL_CHECK_POINTS:
        indices: Any = range(len(g))
    else:
        indices = (i * strides[a] + j * strides[b] for a, b in _axis_pairs(sizes)
                   for i in range(sizes[a]) for j in range(sizes[b]))
    values, validate = g.values, SimConfig.model_validate
    for i in indices:
        try:
            validate(values(i))
        except ValidationError as e:
            raise _point_error(e, path, where) from None
        except ConfigError as e:
            raise _rebased(e, path, where) from None
    return reps


def _axis_pairs(sizes: list[int]) -> list[tuple[int, int]]:
    """Pairs of axes to check value by value, smallest first, within PAIR_BUDGET points: the cross-field rules
    relate few-valued fields (engine_profile, policy); two long numeric axes are left to the lazy build."""
    pairs = sorted(itertools.combinations(range(len(sizes)), 2), key=lambda ab: sizes[ab[0]] * sizes[ab[1]])
    out, spent = [], 0
    for a, b in pairs:
        spent += sizes[a] * sizes[b]
        if spent > PAIR_BUDGET:
            break
        out.append((a, b))
    return out


def _validate(g: Grid, i: int, path: Path, where) -> SimConfig:
    try:
        return g.point(i)
    except ValidationError as e:
        raise _point_error(e, path, where) from None
    except ConfigError as e:
        raise _rebased(e, path, where) from None


def _rebased(err: ConfigError, path: Path, where) -> ConfigError:
    """A refusal raised while a point's config was read (vLLM's speculative config is read into its fields there,
    naming its flag: `--speculative-config.num_speculative_tokens`) as the spec file says it:
    `grid.speculative_config.num_speculative_tokens` in the spec file; one about another file stays as it is."""
    if err.file is not None:
        return err
    head, dot, rest = (err.field or "").partition(".")
    name = head.lstrip("-").replace("-", "_")
    if name not in FLAT_FIELDS:
        name = _first_field_named(err.message) or name
    return ConfigError(err.message, file=path, field=where(name) + dot + rest, value=err.value, allowed=err.allowed)


def _point_error(err: ValidationError, path: Path, where) -> ConfigError:
    e = err.errors()[0]
    field = field_of_loc(e["loc"])
    if e["type"] == "missing":
        return ConfigError("required field is missing (give it in [grid] or [fixed])", file=path,
                           field=where(field))
    msg = str(e.get("msg", "invalid")).removeprefix("Value error, ")
    violation = (e.get("ctx") or {}).get("error")
    if isinstance(violation, RuleViolation):  # a cross-field rule: blame the first field it names
        if violation.fields == ("alpha", "trace"):
            return ConfigError("give exactly one of alpha and trace (in [grid], in [fixed], or as draft "
                               "'name:ALPHA')", file=path, field=where("alpha"))
        return ConfigError(str(violation), file=path, field=where(violation.fields[0]))
    if field is None:  # another model-level rule: name the first field the message mentions
        return ConfigError(msg, file=path, field=where(_first_field_named(msg) or "alpha"))
    return ConfigError(msg, file=path, field=where(field), value=shown(e.get("input")),
                       allowed=rule(field).allowed() if field in FLAT_FIELDS else None)


def _first_field_named(msg: str) -> str | None:
    """The SimConfig field a model-level message names first (as `block_size` or as `--block-size`)."""
    found = []
    for f in _FIELDS:
        at = [i for i in (msg.find(f), msg.find(f.replace("_", "-"))) if i >= 0]
        if at:
            found.append((min(at), -len(f), f))  # the longest name at the same place: engine_profile, not engine
    return min(found)[2] if found else None


def grid_key(reps: dict[str, list[SimConfig]], paired_drafts: bool) -> str:
    """The grid's identity in normalized values (so `rate = 2` and `rate = 2.0` are the same sweep)."""
    axes = []
    for name, cfgs in reps.items():
        if name:
            include = {name, "alpha", "trace"} if name == "draft" and paired_drafts else {name}
            axes.append([name, [{k: v for k, v in c.flat(mode="json").items() if k in include} for c in cfgs]])
    return json.dumps({"point0": canonical_json(reps[""][0]), "axes": axes}, sort_keys=True)


def digests_of(configs: list[SimConfig], path: Path, where) -> dict:
    out = {}
    for cfg in configs:
        for key in sources(cfg):
            if key not in out:
                try:
                    out[key] = digest(key)
                except (OSError, ValueError, SpecsimError) as e:
                    raise ConfigError(f"cannot read {source_label(key)} ({e})", file=path,
                                      field=where({"model": "target", "file": "trace"}.get(key[0], key[0])
                                                  if key[0] != "default-stack" else "hardware")) from None
    return out


def check_files_and_profiles(points: list[SimConfig], path: Path, where) -> None:
    """Unknown profiles, unreadable profile files, missing traces and impossible TP fail now, not mid-sweep."""
    for f in PATH_FIELDS:
        for value in sorted({p.get(f) for p in points} - {None}):
            problem = _file_problem(value)
            if problem:
                raise ConfigError(problem, file=path, field=where(f), value=shown(value))
    for f in ("hardware", "target", "draft"):
        for name in sorted({p.get(f) for p in points}):
            _load_profile(f, name, path, where)
    distinct = [sorted({p.get(f) for p in points}, key=repr) for f in ("hardware", "stack", "tp")]
    pairs = sorted({(p.deployment.target, p.deployment.draft) for p in points})
    for (hw_name, stack_name, tp), (target, draft) in itertools.product(itertools.product(*distinct), pairs):
        hw = load_profile("hardware", hw_name)
        if stack_name is None:  # the hardware's default stack (Deployment's stack rule)
            try:
                stack = resolve_stack(hw, None)
            except (ConfigError, OSError, ValueError) as e:
                raise ConfigError(f"default stack {hw.default_stack!r} of hardware {hw_name!r} cannot be loaded "
                                  f"({e}); set 'stack' in [fixed] or [grid]", file=path,
                                  field=where("hardware")) from None
        else:
            stack = _load_profile("stack", stack_name, path, where, hw)
        t, d = load_profile("target", target), load_profile("draft", draft)
        if t.architecture != d.architecture:
            raise ConfigError(f"draft {draft!r} is {d.architecture} but target {target!r} is {t.architecture}",
                              file=path, field=where("draft"), allowed=f"a {t.architecture} draft")
        for f, m in (("target", t), ("draft", d)):
            _check_cost_model(Deployment(hw, stack, m, tp=tp), f, path, where)
    _check_combinations(points, path, where)


def _check_combinations(points: list[SimConfig], path: Path, where) -> None:
    """Parts that cannot run together fail now: a head on a target it cannot read (`heads.check_against_target`),
    and prompt_len + output_len past a model's context (`ModelProfile.check_context`; with a length distribution
    the run still checks its longest drawn request)."""
    from specsim.methods import heads
    from specsim.profiles.loader import is_path
    from specsim.profiles.schema import ModelProfile

    combos = {(p.deployment.target, p.deployment.draft, p.workload.prompt_len, p.workload.output_len)
              for p in points}
    for target, draft, prompt, output in sorted(combos, key=repr):
        t, d = load_profile("target", target), load_profile("draft", draft)
        try:
            if isinstance(d, heads.HeadProfile):
                heads.check_against_target(d, t, draft if is_path(draft) else None)
            for role, m in (("target", t), ("draft", d)):
                if isinstance(m, ModelProfile):
                    m.check_context(prompt, output, role)
        except ConfigError as e:
            field = "draft" if e.field not in ("prompt_len", "output_len", "prompt_len + output_len") else \
                e.field.split(" + ")[0]
            raise ConfigError(f"{e}", file=path, field=where(field)) from None


def _file_problem(value: str) -> str | None:
    p = Path(value)
    try:
        if p.is_dir():
            return "is a directory, not a file"
        if not p.exists():
            return "file not found"
        if not p.is_file():
            return "not a regular file"
    except (OSError, ValueError) as e:
        return f"cannot be read ({e})"
    return None


def _load_profile(field: str, name, path: Path, where, hardware=None):
    try:
        return load_profile(field, name, hardware)
    except ConfigError as e:
        if e.file is None:  # an unknown name
            raise ConfigError(f"unknown {field} profile", file=path, field=where(field), value=shown(e.value),
                              allowed=e.allowed) from None
        raise ConfigError(f"profile {shown(name)!r} is invalid: {e}", file=path, field=where(field)) from None
    except (OSError, ValueError, RecursionError) as e:  # a folder, a binary file, an unreadable path
        raise ConfigError(f"profile {shown(name)!r} cannot be read ({type(e).__name__}: {e})", file=path,
                          field=where(field)) from None


def _check_cost_model(dep: Deployment, field: str, path: Path, where) -> None:
    """The roofline cost model of one model of the deployment (its `target`) builds and prices a pass."""
    model, hw, tp = dep.target, dep.hardware, dep.tp
    try:
        dep.cost_models[0].pass_time_s(1, 1, 0)
    except SpecsimError as e:
        culprit = "tp" if getattr(e, "field", None) in ("tp", "interconnect_bandwidth_gb_s") else field
        raise ConfigError(f"{model.name} on {hw.name} (tp {tp}): {e}", file=path, field=where(culprit)) from None
