"""Loading profiles: names and paths resolved explicitly, TOML parsed, one-line errors, cached loaders.

A bare name is looked up in $SPECSIM_PROFILE_PATH then the built-in folders (hardware_profiles/, model_profiles/);
a path (it has a separator or a suffix) is read as given. The working directory is never searched for a name.
"""

from __future__ import annotations

import os
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
from pathlib import Path

from pydantic import ValidationError

from specsim.errors import ConfigError, field_ranges, translate_validation_error
from specsim.inputs.files import loads_toml
from specsim.profiles.schema import HardwareProfile, IDEAL_STACK, ModelProfile, StackProfile

REPO_ROOT = Path(__file__).resolve().parents[2]
HARDWARE_DIR = REPO_ROOT / "hardware_profiles"
STACK_DIR = HARDWARE_DIR / "stacks"
MODEL_DIR = REPO_ROOT / "model_profiles"


# --- one-line errors --------------------------------------------------------------------------------

_RANGES = {cls: field_ranges(cls) for cls in (HardwareProfile, StackProfile, ModelProfile)}
_RANGES[HardwareProfile]["peak_tflops"] = "> 0 and <= 1000000.0 TFLOP/s per dtype"


_OUT_OF_RANGE = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")


def _translate(err: ValidationError, file: str | Path | None, cls=None, schema: str | None = None) -> ConfigError:
    """pydantic's report as one line naming file, field (dotted), value and allowed range — never the whole dict
    (a bound is worded "value out of range", as every other reader words it, not in pydantic's words)."""
    cls = cls or next((c for c in _RANGES if c.__name__ == err.title), None)
    if cls is not None and cls not in _RANGES:
        _RANGES[cls] = field_ranges(cls)
    schema = schema or (f"{cls.__name__} (specsim/profiles/schema.py)" if cls else "the schema")
    out = translate_validation_error(err, file, schema=schema, bounds=_RANGES.get(cls))
    if err.errors()[0]["type"] in _OUT_OF_RANGE and out.message.startswith("Input should be"):
        return ConfigError("value out of range", file=out.file, field=out.field, value=out.value,
                           allowed=out.allowed)
    return out


# --- loading ----------------------------------------------------------------------------------

def load_toml(path: str | Path) -> dict:
    """A TOML file as a dict; a missing, unreadable, non-UTF-8 or malformed file is one ConfigError naming it."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            raw = f.read()
        return loads_toml(raw.decode("utf-8"), file=path)  # depth-bounded; a malformed file: its own line
    except FileNotFoundError:
        why = "file not found"
    except IsADirectoryError:
        why = "is a directory, not a TOML file"
    except UnicodeDecodeError as e:
        why = f"not a UTF-8 text file (byte {e.start})"
    except tomllib.TOMLDecodeError as e:
        why = f"malformed TOML: {e}"
    except (OSError, ValueError) as e:
        why = f"cannot read the file ({type(e).__name__}: {e})"
    raise ConfigError(why, file=path)


def _load(cls, path: Path):
    if path.is_dir() or path.suffix == ".json":
        if cls is ModelProfile:
            return ModelProfile.from_hf_config(path)
        raise ConfigError(f"a {cls.__name__} is a TOML file", file=path, allowed="a .toml profile file")
    data = load_toml(path)
    data.setdefault("name", path.stem)
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        raise _translate(e, path, cls) from None


def _search_dirs(default: Path) -> list[Path]:
    extra = os.environ.get("SPECSIM_PROFILE_PATH", "")
    return [Path(p) for p in extra.split(os.pathsep) if p] + [default]


def is_path(name_or_path: str | Path) -> bool:
    """A path contains a path separator or ends in .toml / .json; anything else is a profile name."""
    text = str(name_or_path)
    seps = [s for s in (os.sep, os.altsep, "/") if s]
    return any(s in text for s in seps) or text.endswith((".toml", ".json"))


def _stat(p: Path):
    try:
        return p.stat()
    except (OSError, ValueError):  # missing, a name too long, an embedded NUL byte
        return None


def _resolve(name_or_path: str | Path, default_dir: Path, kind: str) -> Path:
    """Where a profile argument points, by one explicit rule.

    - A *path* (contains a path separator, or ends in .toml / .json) is used as given, relative to the working
      directory: it must exist; a directory is accepted only for a model, and only when it holds a Hugging Face
      `config.json` (imported by `ModelProfile.from_hf_config`); a `.json` file is such a config.
    - A bare *name* is looked up only on the profile search path: the folders in $SPECSIM_PROFILE_PATH
      (os.pathsep-separated, first match wins), then the built-in folder. The working directory is never searched,
      so an entry there named like a built-in profile (`mkdir llama-3.1-8b`) cannot hijack the name; give
      `./NAME.toml` or `./FOLDER` to use such an entry.
    """
    if is_path(name_or_path):
        p = Path(name_or_path)
        st = _stat(p)
        if st is None:
            raise ConfigError(f"file not found (a {kind} path)", file=p)
        if p.is_dir():
            if kind != "model":
                raise ConfigError(f"is a directory, not a {kind} profile", file=p,
                                  allowed="a .toml profile file")
            if _stat(p / "config.json") is None:
                raise ConfigError("is a directory without a Hugging Face config.json", file=p,
                                  allowed="a .toml profile file, or a folder holding config.json")
        return p
    name = str(name_or_path)
    for d in _search_dirs(default_dir):
        cand = d / f"{name}.toml"
        if name and _stat(cand) is not None and cand.is_file():
            return cand
    known = ", ".join(list_names(default_dir))
    local = next((c for c in (name, f"{name}.toml") if name and _stat(Path(c)) is not None), None)
    hint = f" (the working directory is not searched: give ./{local} to use that entry)" if local else ""
    raise ConfigError(f"unknown {kind} profile{hint}", field=kind, value=name,
                      allowed=f"{known}; or a path to a .toml file")


def list_names(directory: Path) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.toml"))


def load_hardware(name: str | Path) -> HardwareProfile:
    return _load(HardwareProfile, _resolve(name, HARDWARE_DIR, "hardware"))


def load_stack(name: str | Path | None) -> StackProfile:
    if name is None or name == "ideal":
        return IDEAL_STACK
    return _load(StackProfile, _resolve(name, STACK_DIR, "stack"))


def load_model(name: str | Path) -> ModelProfile:
    return _load(ModelProfile, _resolve(name, MODEL_DIR, "model"))


class _Cache:
    """Profiles are immutable; load each file once per process (sweeps load them thousands of times).

    A path is keyed with its size and modification time too, so a file edited in place is read again."""

    def __init__(self):
        self._d: dict = {}

    def get(self, fn, name):
        st = _stat(Path(name)) if name is not None and is_path(name) else None
        key = (fn.__name__, str(name), (st.st_mtime_ns, st.st_size) if st is not None else None)
        if key not in self._d:
            self._d[key] = fn(name)
        return self._d[key]


_CACHE = _Cache()


def hardware(name: str | Path) -> HardwareProfile:
    return _CACHE.get(load_hardware, name)


def stack(name: str | Path | None) -> StackProfile:
    return _CACHE.get(load_stack, name)


def model(name: str | Path) -> ModelProfile:
    return _CACHE.get(load_model, name)
