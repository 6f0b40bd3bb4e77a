"""The setup stage (`specsim.setup.run.resolve`): a config resolved once, in one place — the engine profile's
refusals first, the policy with its bands worked out, the engine path with its reason — and `simulate` running it."""

from __future__ import annotations

import pytest

from specsim.engine import engine_profiles
from specsim.engine.policies import BandsPolicy
from specsim.errors import ConfigError
from specsim.setup.run import RunSetup, resolve
from specsim.simulate import make_config, simulate

HW = dict(hardware="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", stack="ideal", alpha=0.7)


def test_resolve_builds_what_a_run_needs_and_says_which_engine_and_why():
    one = resolve(make_config(**HW, requests=4))
    assert isinstance(one, RunSetup) and one.engine_path == "fast" and "batch 1" in one.engine_reason
    assert one.deployment is not None and one.target is one.deployment.cost_models[0] and one.mem_spec is not None
    assert one.c == one.costs.derived_c(one.cfg.workload.prompt_len) and one.policy.gamma == 4
    eight = resolve(make_config(**HW, batch=8, requests=16))
    assert eight.engine_path == "simpy" and "auto" in eight.engine_reason
    forced = resolve(make_config(**HW, requests=4, engine="simpy"))
    assert (forced.engine_path, forced.engine_reason) == ("simpy", "engine 'simpy' asked for")
    fixed_c = resolve(make_config(hardware="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", fixed_c=0.1,
                                  alpha=0.7, requests=4))
    assert fixed_c.deployment is None and fixed_c.target is None and fixed_c.peaks == (None, None)


def test_simulate_resolves_once_and_runs_the_profile_on_the_setup(monkeypatch):
    import specsim.simulate as sim

    calls = []
    real = sim.resolve
    monkeypatch.setattr(sim, "resolve", lambda cfg, run_point=None: calls.append(cfg) or real(cfg, run_point))
    res = simulate(make_config(**HW, batch=4, requests=8))
    assert len(calls) == 1 and res.summary["engine"] == "simpy"


def test_the_bands_default_is_worked_out_in_setup_never_inside_the_policy(monkeypatch):
    """The policy builds from bands it is handed; without them it refuses instead of running choose-draft."""
    from specsim.setup import advice
    from specsim.simulate import run_point

    cfg = make_config(**HW, batch=8, requests=16, output_len=32, policy="bands")
    with pytest.raises(ValueError, match="setup stage"):
        BandsPolicy.build(4, 0.7, 0.1, cfg)
    assert BandsPolicy.build(4, 0.7, 0.1, cfg, bands=((1, 64, 3),)).source == "choose-draft"
    s = resolve(cfg, run_point=run_point)  # the simulate layer hands its point runner down (`simulate.resolved`)
    assert s.policy.source == "choose-draft" and s.policy.bands[0][0] == 1
    monkeypatch.setattr(advice, "load_points", lambda *a, **k: pytest.fail("asked for the advice again"))
    # cached per setup; no point is simulated again
    assert resolve(cfg, run_point=run_point).policy.bands == s.policy.bands
    given = make_config(**HW, policy="bands", num_speculative_tokens_per_batch_size=[[1, 9, 3]])
    assert resolve(given).policy.bands == ((1, 9, 3),) and resolve(given).policy.source == "given"


@pytest.mark.parametrize("profile, fields, needle", [
    ("hf-assisted", dict(batch=2), "batch 1"),
    ("hf-assisted", dict(policy="heuristic"), "num_assistant_tokens"),
    ("vllm-v1", dict(replicas=2), "vllm-v1 engine profile"),
    ("specsim", dict(batch=2, engine="fast"), "fast path"),
])
def test_a_profile_lists_what_it_cannot_model_and_setup_refuses_it_first(profile, fields, needle):
    cfg = make_config(**HW, engine_profile=profile, **fields)
    violations = engine_profiles.get(profile).accepts(cfg)
    assert violations and all(isinstance(v, ConfigError) for v in violations)
    assert needle in str(violations[0])
    # refused before any profile is read: an unknown hardware profile would be named otherwise
    with pytest.raises(ConfigError, match=needle):
        resolve(cfg.replace(hardware="no-such-hardware"))
    with pytest.raises(ConfigError, match="unknown hardware"):
        resolve(make_config(**{**HW, "hardware": "no-such-hardware"}, engine_profile=profile))
    assert not engine_profiles.get(profile).accepts(make_config(**HW, engine_profile=profile))


def test_a_plugin_is_one_registry_line_the_config_and_the_engine_follow():
    """specsim.registry is the one list: config's choices (and its field description) and the engine's lookup tables
    come from it, and every entry loads a plugin of the right kind named as its key."""
    from typing import get_args

    from specsim import config, registry
    from specsim.engine.engine_profiles.base import EngineProfile as Base
    from specsim.engine.policies import POLICIES, Policy

    assert get_args(config.EngineProfile) == tuple(registry.ENGINE_PROFILES) == tuple(engine_profiles.PROFILES)
    assert get_args(config.Policy) == tuple(registry.POLICIES) == tuple(POLICIES)
    assert config.SpeculationConfig.model_fields["policy"].description.endswith("oracle | bands")
    for name in registry.ENGINE_PROFILES:
        p = engine_profiles.get(name)
        assert isinstance(p, Base) and p.name == name and type(p).run is not Base.run
    for name, cls in POLICIES.items():
        assert issubclass(cls, Policy) and cls.name == name
    with pytest.raises(ConfigError, match="policy"):
        make_config(**HW, policy="greedy")


def test_a_new_profile_and_policy_are_one_file_and_one_registry_line_each(tmp_path):
    """What CONVENTIONS promises, done for real in a fresh interpreter: a profile module and a policy module
    outside specsim, one registry line each (made before config is imported, as the line in the file would be),
    and `simulate` accepts both names, runs them, and the profile's own refusal reaches the user as one line."""
    import json
    import subprocess
    import sys

    (tmp_path / "toy_plugins.py").write_text('''
from specsim.engine.engine_profiles.base import EngineProfile
from specsim.engine.policies.fixed import FixedPolicy
from specsim.engine.simpy_engine import run_engine
from specsim.errors import ConfigError


class Toy(EngineProfile):
    name = "toy"

    def accepts(self, cfg):
        bad = cfg.workload.replicas != 1
        return [ConfigError("not what toy models", field="--replicas", value=cfg.workload.replicas, allowed="1")] \\
            if bad else []

    def run(self, s):
        spec = run_engine(s.workload, s.costs, s.acceptance, s.policy, s.mem_spec, 1, seed=s.cfg.workload.seed)
        base = run_engine(s.workload, s.costs, None, None, s.mem_base, 1, seed=s.cfg.workload.seed)
        return spec, base, {"engine": "toy-loop"}


PROFILE = Toy()


class AlwaysTwo(FixedPolicy):
    name = "always-two"

    @classmethod
    def build(cls, gamma, alpha, c, cfg=None, **resolved):
        return cls(2)
''')
    script = f'''
import json, sys
sys.path.insert(0, {str(tmp_path)!r})
from specsim import registry
registry.ENGINE_PROFILES["toy"] = "toy_plugins:PROFILE"
registry.POLICIES["always-two"] = "toy_plugins:AlwaysTwo"
from specsim.cli import main
sys.exit(main(sys.argv[1:]))
'''
    base = ["--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--alpha", "0.7",
            "--batch", "4", "--requests", "8", "--engine-profile", "toy", "--policy", "always-two"]
    run = subprocess.run([sys.executable, "-c", script, "simulate", *base, "--json"], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert (out["engine"], out["engine_profile"], out["policy"], out["gamma"]) == ("toy-loop", "toy", "always-two", 2)
    refused = subprocess.run([sys.executable, "-c", script, "simulate", *base, "--replicas", "2"],
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "not what toy models" in refused.stderr and "Traceback" not in refused.stderr
