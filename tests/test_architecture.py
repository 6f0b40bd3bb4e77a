"""The import graph of `specsim/` flows one way (issue 25): every import — module-level or lazy inside a function —
goes to its own layer or a lower one, and the packages form no cycle.

Layers, low -> high (`LAYERS`; a module may import only its own layer or lower):
  foundations (errors, rng, limits, registry, theory, inputs, config_rules) -> profiles -> cost -> methods
  -> config (SimConfig: above methods, see LAYERS) -> traces -> engine -> setup (resolve(cfg) -> RunSetup)
  -> simulate -> validation -> sweep -> studies -> executor (the torch code) -> cli -> __main__.

`ALLOWLIST` holds the upward imports still present; it may only shrink: the test fails on an upward import not
listed, and on a listed one that no longer exists (so the list stays honest).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "specsim"

# unit (a subpackage or a top-level module of specsim) -> layer rank; one rank may hold several units
LAYERS: dict[str, int] = {
    "errors": 0, "rng": 0, "limits": 0, "theory": 0, "inputs": 0,  # foundations: import nothing above them
    "registry": 0,  # plugin names -> "module:attribute" strings (imports nothing; the engine loads them)
    "config_rules": 0,  # SimConfig's cross-field rule type, vLLM's engine-argument rules, field -> flag names
    "profiles": 1,
    "cost": 2,
    "methods": 3,  # methods price their passes through cost.roofline and read head profiles
    # SimConfig sits above methods: building one normalizes its input surface (vLLM's speculative config names a
    # head or a repo id, a head's name says its method, a token tree fixes γ) with the methods' parsers and the
    # profiles, so the CLI, a sweep and the API all see the same fields; nothing below needs SimConfig
    "config": 4,
    "traces": 5,
    "engine": 6,
    "setup": 7,
    "simulate": 8,
    "validation": 9,  # analysis of real runs: replays them through the engine
    "sweep": 10,
    "studies": 11,  # studies run sweeps (plan's bisection rounds are sweeps)
    "executor": 12,  # torch: may import anything below cli
    "cli": 13,
    "__main__": 14, "__init__": 14,
}

# Upward imports still present: (importing module, imported module). Only ever remove lines from this list.
ALLOWLIST: set[tuple[str, str]] = set()  # emptied: the bands advice's point runner is passed down (setup.advice)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


def unit(module: str) -> str:
    """'specsim.engine.acceptance' -> 'engine'; 'specsim.config' -> 'config'; 'specsim' -> '__init__'."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports() -> list[tuple[str, str, int]]:
    """(importing module, imported module, line) for every specsim import in specsim/, lazy ones included. A
    `from specsim.x import y` where y is a submodule names specsim.x.y."""
    modules = {_module_name(p) for p in ROOT.rglob("*.py")}
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        src = _module_name(path)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level:
                raise AssertionError(f"{src} line {node.lineno}: relative import; write specsim.… in full")
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "specsim":
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    out.append((src, sub if sub in modules else node.module, node.lineno))
            elif isinstance(node, ast.Import):
                out += [(src, a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "specsim"]
    return out


def upward() -> dict[tuple[str, str], list[int]]:
    found: dict[tuple[str, str], list[int]] = defaultdict(list)
    for src, dst, line in imports():
        if LAYERS[unit(dst)] > LAYERS[unit(src)]:
            found[(src, dst)].append(line)
    return found


def test_every_unit_has_a_layer():
    units = {unit(m) for edge in imports() for m in edge[:2]} | {unit(_module_name(p)) for p in ROOT.rglob("*.py")}
    assert not units - set(LAYERS), f"give these a layer in LAYERS: {sorted(units - set(LAYERS))}"


def test_no_upward_import_outside_the_allowlist():
    new = {e: lines for e, lines in upward().items() if e not in ALLOWLIST}
    assert not new, "upward imports (a module may import only its own layer or lower):\n" + "\n".join(
        f"  {a} -> {b} (line {', '.join(map(str, ls))}): {unit(a)} [{LAYERS[unit(a)]}] -> {unit(b)} "
        f"[{LAYERS[unit(b)]}]" for (a, b), ls in sorted(new.items()))


def test_allowlist_only_names_upward_imports_that_exist():
    gone = ALLOWLIST - set(upward().keys())
    assert not gone, f"no longer upward imports: drop them from ALLOWLIST: {sorted(gone)}"


def _cycles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(list(graph)):
        if v not in index:
            visit(v)
    return out


def test_no_cycle_between_packages():
    """Between units (packages and top-level modules), over every import not allowlisted: no cycle. (A cycle
    through an allowlisted upward import is that import's fault, already listed.)"""
    edges = {(unit(a), unit(b)) for a, b, _ in imports() if unit(a) != unit(b) and (a, b) not in ALLOWLIST}
    assert not _cycles(edges), f"import cycles between packages: {_cycles(edges)}"


def test_the_checker_sees_lazy_and_upward_imports():
    """The checker itself: a lazy import inside a function is found, and an import into a higher layer is flagged
    (the engine asking studies, as the bands policy once did)."""
    tree = ast.parse("def f():\n    from specsim.studies.choose import advise\n")
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom))
    assert node.module == "specsim.studies.choose" and LAYERS[unit(node.module)] > LAYERS["engine"]
    assert _cycles({("a", "b"), ("b", "a"), ("b", "c")}) == [["a", "b"]] and not _cycles({("a", "b"), ("b", "c")})
    assert any(src == "specsim.simulate" for src, _, _ in imports())  # the walk reaches modules at all


def test_registry_entries_name_engine_code_only():
    """specsim.registry's strings are imports the walk above cannot see: each must name a module of the engine
    layer (a plugin), so the registry cannot smuggle an upward dependency into config."""
    from specsim import registry

    for table in (registry.POLICIES, registry.ENGINE_PROFILES):
        for _name, where in table.items():
            module = where.partition(":")[0]
            assert unit(module) == "engine" and (ROOT.parent / (module.replace(".", "/") + ".py")).exists(), where


def test_limits_are_stated_once():
    """SimConfig's bounds are specsim.limits' (a bound restated as a literal would drift)."""
    from specsim import limits
    from specsim.config import FLAT_FIELDS
    from specsim.methods.tree import MAX_TREE_DEPTH

    def le(field):
        return next(m.le for m in FLAT_FIELDS[field].metadata if getattr(m, "le", None) is not None)

    assert (le("gamma"), MAX_TREE_DEPTH) == (limits.GAMMA_CAP,) * 2
    assert le("batch") == le("max_batch") == limits.MAX_BATCH
    assert le("tp") == le("draft_tp") == limits.MAX_TP and le("replicas") == limits.MAX_REPLICAS
    assert le("prompt_len") == le("output_len") == limits.MAX_LENGTH_TOKENS and le("requests") == limits.MAX_REQUESTS
    assert le("max_num_seqs") == limits.MAX_NUM_SEQS and le("max_num_batched_tokens") == limits.MAX_BATCHED_TOKENS
