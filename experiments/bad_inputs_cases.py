"""The inputs experiments/bad_inputs.py runs: files written into a scratch folder, and the command lines.

Each case is (kind, name, args, expect): `args` is a command line for the installed `specsim` with {d} (the scratch
folder) and {port} (a loopback HTTP server that is not a Dask scheduler); `expect` is "error" (a bad input: exit
2 with one line), "good" (exit 0 with one JSON object), "either" (exit 0 with one JSON object, or a clear refusal:
e.g. a Hugging Face config folder given as --target may be imported or refused) or "recover" (a damaged sweep
folder: recomputing it and saying so on stderr, or refusing it in one line, are both right; silence is not).
`KIND_PART` says which part of issue 13 owns a kind, so a failing case points at the right files.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from bad_inputs_more import _cases_plan_methods, _plan_moe_files
from bad_inputs_newer import NEWER_PARTS, newer_cases, newer_files

REPO = Path(__file__).resolve().parents[1]
KIND_PART = {"profile": "A", "tp": "A", "cli": "A", "path": "A", "compare": "A/B", "spec": "B", "sweep-files": "B",
             "scheduler": "B", "trace": "C", "arrivals": "C", "measured": "C", "executor": "C", "good": "-",
             "plan": "16", "method": "15", "tree": "15", "moe": "15", **NEWER_PARTS}
SIM = "simulate --hardware a100-80gb --target llama-3.1-8b --draft llama-3.2-1b --requests 2 --output-len 8 --json"
SIM_A = SIM + " --alpha 0.7"
REC = "record --target profile:llama-68m:layers=1 --draft bigram --prompts {d}/p.txt --max-new-tokens 4 --json"
TH = "# a TOML header the bad variants below change one line of\n"
TRACE_HEAD = "sequence_id,position,beta\n"
ARR_HEAD = "arrival_s,prompt_len,output_len\n"
M_HEAD = "kind,batch,positions,context,time_s\n"
M_GOOD = M_HEAD + "".join(f"decode,1,{p},{c},{0.01 + 0.001 * p}\n" for p in (1, 4) for c in (0, 512))
LLAMA_CFG = {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 32}
TINY_SPEC = ('name = "tiny"\n[fixed]\nhardware = "a100-80gb"\ntarget = "llama-3.1-8b"\nrequests = 2\noutput_len = 8\n'
             '[grid]\ndraft = ["llama-3.2-1b:0.7"]\ngamma = [1, 2, 3]\n')


def _profile_variants(d: Path) -> None:
    hw = (REPO / "hardware_profiles" / "a100-80gb.toml").read_text()
    model = (REPO / "model_profiles" / "llama-3.1-8b.toml").read_text()
    hw_lines = {"hw_inf": ("memory_bandwidth_gb_s = 2039.0", "memory_bandwidth_gb_s = inf"),
                "hw_str": ("memory_bandwidth_gb_s = 2039.0", 'memory_bandwidth_gb_s = "2039"'),
                "hw_bool": ("memory_capacity_gb = 80.0", "memory_capacity_gb = true"),
                "hw_neg": ("memory_bandwidth_gb_s = 2039.0", "memory_bandwidth_gb_s = -1.0"),
                "hw_nan_peak": ("bf16 = 312.0", "bf16 = nan"),
                "hw_inf_peak": ("bf16 = 312.0", "bf16 = inf"),
                "hw_no_bw": ("memory_bandwidth_gb_s = 2039.0", ""),
                "hw_extra_key": ('kind = "gpu"', 'kind = "gpu"\ncolour = "green"'),
                "hw_chips_float": ("chips_per_node = 8", "chips_per_node = 8.5")}
    for name, (a, b) in hw_lines.items():
        (d / f"{name}.toml").write_text(hw.replace(a, b, 1))
    m_lines = {"m_layers_true": ("n_layers = 32", "n_layers = true"),
               "m_layers_zero": ("n_layers = 32", "n_layers = 0"),
               "m_layers_float": ("n_layers = 32", "n_layers = 32.5"),
               "m_dmodel_str": ("d_model = 4096", 'd_model = "4096"'),
               "m_head_dim": ("head_dim = 128", "head_dim = 1024"),
               "m_published": ("published_params = 8.03e9", "published_params = 8.03e11"),
               "m_vocab_neg": ("vocab_size = 128256", "vocab_size = -5"),
               "m_ffn": ('ffn = "gated"', 'ffn = "relu-squared"'), "m_dtype": ('dtype = "bf16"', 'dtype = "fp7"'),
               "m_kv_heads": ("n_kv_heads = 8", "n_kv_heads = 7")}
    for name, (a, b) in m_lines.items():
        (d / f"{name}.toml").write_text(model.replace(a, b, 1))
    (d / "hw_latin1.toml").write_bytes(hw.replace("NVIDIA", "NVIDIA \xe9").encode("latin-1"))
    (d / "hw_broken.toml").write_text(hw.replace("kind = ", "kind == ", 1))
    (d / "hw_empty.toml").write_text("")
    (d / "hw_dir.toml").mkdir()
    (d / "hw_dir").mkdir()
    (d / "stack_frac.toml").write_text('name = "s"\nbandwidth_fraction = 1.5\n')
    (d / "stack_str.toml").write_text('name = "s"\nper_call_overhead_s = "1e-5"\n')
    for name, cfg in (("mixtral_cfg", {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
                                       "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                                       "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2}),
                      ("hf_cfg", {**LLAMA_CFG, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
                                  "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256})):
        (d / name).mkdir()
        (d / name / "config.json").write_text(json.dumps(cfg))
    (d / "hf_broken_cfg").mkdir()
    (d / "hf_broken_cfg" / "config.json").write_text('{"model_type": "llama", ')
    (d / "hijack" / "llama-3.1-8b").mkdir(parents=True)


def _table_files(d: Path) -> None:
    files = {
        "t_good.csv": TRACE_HEAD + "0,0,0.5\n0,1,0.75\n1,0,1\n", "t_bool.csv": TRACE_HEAD + "0,0,true\n0,1,false\n",
        "t_nan.csv": TRACE_HEAD + "0,0,nan\n", "t_blank.csv": TRACE_HEAD + "0,0,\n",
        "t_above.csv": TRACE_HEAD + "0,0,1.5\n",
        "t_gap.csv": TRACE_HEAD + "0,0,0.5\n0,2,0.5\n", "t_floatpos.csv": TRACE_HEAD + "0,0.0,0.5\n",
        "t_bigid.csv": TRACE_HEAD + "99999999999999999999,0,0.5\n", "t_extra.csv": TRACE_HEAD + "0,0,0.5,1\n",
        "t_dup.csv": "sequence_id,position,beta,beta\n0,0,0.5,0.5\n", "t_missing.csv": "sequence_id,beta\n0,0.5\n",
        "t_header.csv": TRACE_HEAD, "t_empty.csv": "", "t_slot.csv": "# slot_decay: 2\n" + TRACE_HEAD + "0,0,0.5\n",
        "a_good.csv": ARR_HEAD + "0.0,16,4\n0.5,8,3\n", "a_bool.csv": ARR_HEAD + "true,16,4\n",
        "a_neg.csv": ARR_HEAD + "-1,16,4\n", "a_nan.csv": ARR_HEAD + "nan,16,4\n", "a_inf.csv": ARR_HEAD + "inf,16,4\n",
        "a_floatlen.csv": ARR_HEAD + "0,16.0,4\n", "a_zero.csv": ARR_HEAD + "0,16,0\n",
        "a_long.csv": ARR_HEAD + "0,16,10000001\n", "a_text.csv": ARR_HEAD + "0,sixteen,4\n",
        "a_missing.csv": "arrival_s,prompt_len\n0,16\n", "a_header.csv": ARR_HEAD, "a_empty.csv": "",
        "m_good.csv": M_GOOD, "m_bool.csv": M_HEAD + "decode,1,1,0,true\n", "m_nan.csv": M_HEAD + "decode,1,1,0,nan\n",
        "m_zero.csv": M_HEAD + "decode,1,1,0,0\n", "m_batch0.csv": M_HEAD + "decode,0,1,0,0.01\n",
        "m_floatpos.csv": M_HEAD + "decode,1,1.0,0,0.01\n", "m_kind.csv": M_HEAD + "verify,1,1,0,0.01\n",
        "m_prefill.csv": M_HEAD + "prefill,1,1,0,0.01\n",
        "m_grid.csv": M_HEAD + "decode,1,1,0,0.01\ndecode,1,2,9,0.01\n",
        "m_missing.csv": "batch,positions,context\n1,1,0\n", "m_empty.csv": "",
        "m_hour.csv": M_HEAD + "decode,1,1,0,7200\n",
    }
    for name, text in files.items():
        (d / name).write_text(text, encoding="utf-8")
    (d / "binary.csv").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    (d / "dir.csv").mkdir()
    (d / "a_file").write_text("not a folder\n")
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"sequence_id": [0] * 400, "position": list(range(400)), "beta": [0.5] * 400}),
                   d / "t_good.parquet")
    data = (d / "t_good.parquet").read_bytes()
    (d / "t_cut.parquet").write_bytes(data[: len(data) // 2])
    (d / "t_zero.parquet").write_bytes(b"")
    (d / "t_text.parquet").write_text(TRACE_HEAD + "0,0,0.5\n")
    pq.write_table(pa.table({"sequence_id": [0], "position": [0], "beta": [True]}), d / "t_boolbeta.parquet")
    pq.write_table(pa.table({"sequence_id": [0], "position": [0], "beta": ["0.5"]}), d / "t_strbeta.parquet")


def _executor_files(d: Path) -> None:
    (d / "p.txt").write_text("the cat sat\n")
    (d / "p_bin.txt").write_bytes(b"\xff\xfe\x00\x81")
    (d / "p_bad.jsonl").write_text('{"input_ids": [1, 2]}\n{oops\n')
    folders = {"x_broken": '{"model_type": "llama",', "x_list": "[1]", "x_notype": json.dumps({"hidden_size": 8}),
               "x_oddtype": json.dumps({"model_type": "not-a-model"}), "x_noweights": json.dumps(LLAMA_CFG),
               "x_damaged": json.dumps(LLAMA_CFG), "x_shard": json.dumps(LLAMA_CFG)}
    for name, cfg in folders.items():
        (d / name).mkdir()
        (d / name / "config.json").write_text(cfg)
    (d / "x_notype" / "model.safetensors").write_bytes(b"x")
    (d / "x_oddtype" / "model.safetensors").write_bytes(b"x")
    (d / "x_damaged" / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{bad json")
    (d / "x_shard" / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "s1.safetensors"}}))
    (d / "x_fake.gguf").write_bytes(b"PK\x03\x04not a gguf")


def _sweep_files(d: Path, exe: str) -> None:
    """A finished tiny sweep, then damaged copies of its folder; a spec whose profile is edited after its run."""
    (d / "tiny.toml").write_text(TINY_SPEC)
    subprocess.run([exe, "sweep", str(d / "tiny.toml"), "--out", str(d / "sw"), "--workers", "1", "--no-plots",
                    "--json"], capture_output=True, timeout=300, cwd=d / "work")
    damage = {"sw_zero_part": lambda o: _cut(sorted((o / "parts").glob("*.parquet"))[0], 0.0),
              "sw_cut_part": lambda o: _cut(sorted((o / "parts").glob("*.parquet"))[0], 0.5),
              "sw_cut_manifest": lambda o: _cut(o / "manifest.json", 0.5),
              "sw_bin_manifest": lambda o: (o / "manifest.json").write_bytes(b"\xff\x00\xfe"),
              "sw_cut_results": lambda o: _cut(o / "results.parquet", 0.5),
              "sw_cut_results2": lambda o: _cut(o / "results.parquet", 0.5),
              "sw_zero_results": lambda o: _cut(o / "results.parquet", 0.0),
              "sw_no_results": lambda o: (o / "results.parquet").unlink()}
    for name, fn in damage.items():
        if (d / "sw" / "results.parquet").is_file():  # the tiny sweep ran (else the rerun cases say so)
            shutil.copytree(d / "sw", d / name)
            fn(d / name)
    shutil.copy(REPO / "hardware_profiles" / "a100-80gb.toml", d / "hw_edit.toml")
    (d / "edit.toml").write_text(TINY_SPEC.replace('"a100-80gb"', '"hw_edit.toml"'))
    subprocess.run([exe, "sweep", str(d / "edit.toml"), "--out", str(d / "sw_edit"), "--workers", "1", "--no-plots",
                    "--json"], capture_output=True, timeout=300, cwd=d / "work")
    hw = (d / "hw_edit.toml").read_text()
    (d / "hw_edit.toml").write_text(hw.replace("memory_bandwidth_gb_s = 2039.0", "memory_bandwidth_gb_s = 1000.0"))
    specs = {"s_bool_gamma": TINY_SPEC.replace("gamma = [1, 2, 3]", "gamma = [true, 2]"),
             "s_str_requests": TINY_SPEC.replace("requests = 2", 'requests = "2"'),
             "s_nan_alpha": TINY_SPEC.replace('draft = ["llama-3.2-1b:0.7"]', 'draft = ["llama-3.2-1b"]')
             + "alpha = [nan]\n", "s_empty_axis": TINY_SPEC.replace("gamma = [1, 2, 3]", "gamma = []"),
             "s_unknown_key": TINY_SPEC + "colour = [1]\n",
             "s_alpha_range": TINY_SPEC.replace("llama-3.2-1b:0.7", "llama-3.2-1b:1.5"),
             "s_missing_trace": TINY_SPEC.replace("llama-3.2-1b:0.7", "llama-3.2-1b:absent.parquet"),
             "s_huge": TINY_SPEC.replace("gamma = [1, 2, 3]", "gamma = [1, 2, 3, 4]\nseed = "
                                         + json.dumps(list(range(1_300_000)))),
             "s_point_fn": TINY_SPEC + '[run]\npoint_fn = "os:system"\n',
             "s_chunk": TINY_SPEC + "[run]\nchunk_size = -1\n",
             "s_broken": TINY_SPEC.replace("[grid]", "[grid"), "s_empty": "",
             "s_all_fail": TINY_SPEC.replace('"a100-80gb"', '"l4"').replace('"llama-3.1-8b"', '"llama-3.1-70b"'),
             "s_hw_bool": TINY_SPEC.replace('hardware = "a100-80gb"', "hardware = true")}
    for name, text in specs.items():
        (d / f"{name}.toml").write_text(text)
    (d / "s_latin1.toml").write_bytes(TINY_SPEC.replace("tiny", "t\xefny").encode("latin-1"))
    (d / "s_dir.toml").mkdir()


def _cut(p: Path, frac: float) -> None:
    data = p.read_bytes()
    p.write_bytes(data[: int(len(data) * frac)])


def prepare(d: Path, exe: str) -> None:
    (d / "work").mkdir()
    _profile_variants(d)
    _table_files(d)
    _executor_files(d)
    _sweep_files(d, exe)
    _plan_moe_files(d)
    newer_files(d, exe)


def _cases_profiles() -> list[tuple]:
    c = [("profile", f"--hardware {n}", f"{SIM_A} --hardware {{d}}/{n}.toml", "error")
         for n in ("hw_inf", "hw_str", "hw_bool", "hw_neg", "hw_nan_peak", "hw_inf_peak", "hw_no_bw", "hw_extra_key",
                   "hw_chips_float", "hw_latin1", "hw_broken", "hw_empty", "hw_dir")]
    c += [("profile", f"--target {n}", f"{SIM_A} --target {{d}}/{n}.toml", "error")
          for n in ("m_layers_true", "m_layers_zero", "m_layers_float", "m_dmodel_str", "m_head_dim", "m_published",
                    "m_vocab_neg", "m_ffn", "m_dtype", "m_kv_heads")]
    c += [("profile", "--hardware a folder", f"{SIM_A} --hardware {{d}}/hw_dir", "error"),
          ("profile", "--hardware unknown name", f"{SIM_A} --hardware no-such-gpu", "error"),
          ("profile", "--target missing .toml", f"{SIM_A} --target {{d}}/absent.toml", "error"),
          ("profile", "--target Mixtral config.json folder", f"{SIM_A} --target {{d}}/mixtral_cfg", "error"),
          ("profile", "--target broken config.json folder", f"{SIM_A} --target {{d}}/hf_broken_cfg", "error"),
          ("profile", "--target HF config folder (import or refuse)", f"{SIM_A} --target {{d}}/hf_cfg", "either"),
          ("profile", "--stack fraction 1.5", f"{SIM_A} --stack {{d}}/stack_frac.toml", "error"),
          ("profile", "--stack overhead as a string", f"{SIM_A} --stack {{d}}/stack_str.toml", "error"),
          ("profile", "--stack unknown", f"{SIM_A} --stack no-such-stack", "error"),
          ("profile", "roofline --model folder without config", "roofline --hardware a100-80gb --model {d}/hw_dir "
           "--json", "error")]
    return c


def _cases_tp_cli() -> list[tuple]:
    c = [("tp", f"--tp {v}", f"{SIM_A} --tp {v}", "error") for v in ("3", "16", "0", "-2", "5", "1000000")]
    c += [("tp", "--tp 5 on the 70B", SIM_A.replace("llama-3.1-8b", "llama-3.1-70b") + " --tp 5", "error"),
          ("tp", "roofline --tp 3", "roofline --hardware a100-80gb --model llama-3.1-8b --tp 3 --json", "error")]
    bad = {"--alpha": ("nan", "inf", "1.0", "-0.1", "abc"), "--gamma": ("0", "65", "-1"), "--requests": ("0",),
           "--batch": ("0", "5000"), "--prompt-len": ("0",), "--output-len": ("0",), "--seed": ("-1",),
           "--lenience": ("0", "1.5", "nan"), "--policy": ("bogus",), "--engine": ("bogus",),
           "--length-dist": ("zipf",), "--replicas": ("0",), "--slo-ttft-s": ("0", "nan"), "--fixed-c": ("nan", "-1")}
    for opt, vals in bad.items():
        base = SIM if opt == "--alpha" else SIM_A
        c += [("cli", f"{opt} {v}", f"{base} {opt} {v}", "error") for v in vals]
    c += [("cli", "--rate 0", f"{SIM_A} --rate 0", "error"), ("cli", "--rate inf", f"{SIM_A} --rate inf", "error"),
          ("cli", "--rate nan", f"{SIM_A} --rate nan", "error"),
          ("cli", "--batch with --rate", f"{SIM_A} --batch 2 --rate 1", "error"),
          ("cli", "no --alpha and no --trace", SIM, "error"),
          ("cli", "--alpha and --trace", f"{SIM_A} --trace {{d}}/t_good.csv", "error"),
          ("cli", "--engine fast with a batch", f"{SIM_A} --engine fast --batch 4", "error"),
          ("cli", "theory --alpha nan", "theory --alpha nan --json", "error"),
          ("cli", "theory --gamma 0", "theory --alpha 0.5 --gamma 0 --json", "error"),
          ("cli", "roofline --batch 0", "roofline --hardware a100-80gb --model llama-3.1-8b --batch 0 --json", "error"),
          ("cli", "roofline --positions 1,x", "roofline --hardware a100-80gb --model llama-3.1-8b --positions 1,x "
           "--json", "error"),
          ("cli", "trace synth --alpha 2", "trace synth --kind iid --alpha 2 --out {d}/work/s.csv --json", "error"),
          ("cli", "trace synth --sequences 0", "trace synth --kind iid --alpha 0.5 --sequences 0 --out "
           "{d}/work/s.csv --json", "error"),
          ("cli", "sweep --workers 10000", "sweep {d}/tiny.toml --out {d}/work/w1 --workers 10000 --json", "error"),
          ("cli", "sweep --workers 0", "sweep {d}/tiny.toml --out {d}/work/w2 --workers 0 --json", "error"),
          ("cli", "sweep --chunk-size -1", "sweep {d}/tiny.toml --out {d}/work/w3 --chunk-size -1 --json", "error")]
    return c


def _cases_paths_specs() -> list[tuple]:
    c = [("compare", "compare --out an existing file", "compare --no-simulate --out {d}/a_file --json", "error"),
         ("compare", "compare --out under a file", "compare --no-simulate --out {d}/a_file/sub --json", "error"),
         ("path", "sweep --out under a file", "sweep {d}/tiny.toml --out {d}/a_file/sub --json", "error"),
         ("path", "sweep --out an existing file", "sweep {d}/tiny.toml --out {d}/a_file --json", "error"),
         ("path", "trace convert OUT under a file", "trace convert {d}/t_good.csv {d}/a_file/x.parquet --json",
          "error"),
         ("path", "trace synth --out a folder", "trace synth --kind iid --alpha 0.5 --out {d}/dir.csv --json",
          "error")]
    c += [("spec", f"sweep {n}", f"sweep {{d}}/{n}.toml --out {{d}}/work/o_{n} --workers 1 --no-plots --json",
           "error") for n in ("s_bool_gamma", "s_str_requests", "s_nan_alpha", "s_empty_axis", "s_unknown_key",
                              "s_alpha_range", "s_missing_trace", "s_huge", "s_point_fn", "s_chunk", "s_broken",
                              "s_empty", "s_all_fail", "s_hw_bool", "s_latin1", "s_dir")]
    c += [("spec", "sweep spec missing", "sweep {d}/absent.toml --out {d}/work/o_absent --json", "error")]
    for n in ("sw_zero_part", "sw_cut_part", "sw_cut_manifest", "sw_bin_manifest", "sw_cut_results2"):
        c.append(("sweep-files", f"rerun over {n}", f"sweep {{d}}/tiny.toml --out {{d}}/{n} --workers 1 --no-plots "
                  "--json", "recover"))
    c += [("sweep-files", "rerun after editing a profile", "sweep {d}/edit.toml --out {d}/sw_edit --workers 1 "
           "--no-plots --json", "recover")]
    c += [("sweep-files", f"plot {n}", f"plot {{d}}/{n} --json", "error")
          for n in ("sw_cut_results", "sw_zero_results", "sw_no_results", "a_file", "absent_dir")]
    c += [("scheduler", "--scheduler an HTTP server", "sweep {d}/tiny.toml --out {d}/work/o_http --scheduler "
           "tcp://127.0.0.1:{port} --json", "error"),
          ("scheduler", "--scheduler http:// URL", "sweep {d}/tiny.toml --out {d}/work/o_http2 --scheduler "
           "http://127.0.0.1:{port} --json", "error"),
          ("scheduler", "--scheduler closed port", "sweep {d}/tiny.toml --out {d}/work/o_closed --scheduler "
           "tcp://127.0.0.1:9 --json", "error"),
          ("scheduler", "--scheduler not an address", "sweep {d}/tiny.toml --out {d}/work/o_addr --scheduler "
           "nonsense --json", "error")]
    return c


def _cases_tables() -> list[tuple]:
    c = []
    for n in ("t_bool.csv", "t_nan.csv", "t_blank.csv", "t_above.csv", "t_gap.csv", "t_floatpos.csv", "t_bigid.csv",
              "t_extra.csv", "t_dup.csv", "t_missing.csv", "t_header.csv", "t_empty.csv", "t_slot.csv",
              "t_cut.parquet", "t_zero.parquet", "t_text.parquet", "t_boolbeta.parquet", "t_strbeta.parquet",
              "binary.csv", "dir.csv", "absent.csv"):
        c.append(("trace", f"simulate --trace {n}", f"{SIM} --trace {{d}}/{n}", "error"))
    c += [("trace", f"trace stats {n}", f"trace stats {{d}}/{n} --json", "error")
          for n in ("t_bool.csv", "t_cut.parquet", "t_strbeta.parquet", "binary.csv", "t_dup.csv")]
    for n in ("a_bool", "a_neg", "a_nan", "a_inf", "a_floatlen", "a_zero", "a_long", "a_text", "a_missing",
              "a_header", "a_empty", "binary", "dir"):
        c.append(("arrivals", f"--arrivals {n}.csv", f"{SIM_A} --arrivals {{d}}/{n}.csv", "error"))
    for n in ("m_bool", "m_nan", "m_zero", "m_batch0", "m_floatpos", "m_kind", "m_prefill", "m_grid", "m_missing",
              "m_empty", "m_hour", "binary", "dir"):
        c.append(("measured", f"--measured-target {n}.csv", f"{SIM_A} --measured-target {{d}}/{n}.csv", "error"))
    return c


def _cases_executor() -> list[tuple]:
    c = [("executor", f"record --target {n}", f"{REC} --target {{d}}/{n} --out {{d}}/work/r.parquet", "error")
         for n in ("x_broken", "x_list", "x_notype", "x_oddtype", "x_noweights", "x_damaged", "x_shard", "x_fake.gguf")]
    c += [("executor", "record --out under a file", f"{REC} --out {{d}}/a_file/t.parquet", "error"),
          ("executor", "record --out a folder", f"{REC} --out {{d}}/dir.csv", "error"),
          ("executor", "record --out bad suffix", f"{REC} --out {{d}}/work/t.json", "error"),
          ("executor", "record binary prompts", REC.replace("p.txt", "p_bin.txt") + " --out {d}/work/t.csv", "error"),
          ("executor", "record bad .jsonl prompts", REC.replace("p.txt", "p_bad.jsonl") + " --out {d}/work/t.csv",
           "error"),
          ("executor", "measure --draft without weights", "measure --target profile:llama-68m:layers=1 --draft "
           "{d}/x_noweights --json", "error"),
          ("executor", "validate --draft broken config", "validate --target profile:llama-68m:layers=1 --draft "
           "{d}/x_broken --prompts {d}/p.txt --json", "error"),
          ("executor", "validate --trace-out under a file", "validate --target profile:llama-68m:layers=1 --draft "
           "bigram --prompts {d}/p.txt --trace-out {d}/a_file/t.csv --json", "error"),
          ("executor", "calibrate --model without weights", "calibrate --hardware cpu-2core --model {d}/x_noweights "
           "--out {d}/work/c.toml --json", "error"),
          ("executor", "calibrate --out under a file", "calibrate --hardware cpu-2core --model "
           "profile:llama-68m:layers=1 --out {d}/a_file/c.toml --json", "error"),
          ("executor", "calibrate --model bigram", "calibrate --hardware cpu-2core --model bigram --out "
           "{d}/work/c.toml --json", "error"),
          ("executor", "models list --cache a file", "models list --cache {d}/a_file --json", "error"),
          ("executor", "models fetch --cache under a file", "models fetch smollm2-135m-instruct --cache "
           "{d}/a_file/c --json", "error"),
          ("executor", "models fetch unknown", "models fetch no-such-model --json", "error")]
    return c


def _cases_good() -> list[tuple]:
    return [("good", "simulate α", SIM_A, "good"),
            ("good", "simulate --trace CSV", f"{SIM} --trace {{d}}/t_good.csv", "good"),
            ("good", "simulate --trace parquet", f"{SIM} --trace {{d}}/t_good.parquet", "good"),
            ("good", "simulate --arrivals", f"{SIM_A} --arrivals {{d}}/a_good.csv", "good"),
            ("good", "simulate --measured-target", f"{SIM_A} --measured-target {{d}}/m_good.csv", "good"),
            ("good", "simulate --tp 2", f"{SIM_A} --tp 2", "good"),
            ("good", "a folder named like a profile in the cwd", f"@hijack {SIM_A}", "good"),
            ("good", "trace stats", "trace stats {d}/t_good.parquet --json", "good"),
            ("good", "trace synth", "trace synth --kind markov --alpha 0.7 --out {d}/work/m.parquet --json", "good"),
            ("good", "theory", "theory --alpha 0.8 --gamma 4 --c 0.05 --json", "good"),
            ("good", "roofline", "roofline --hardware a100-80gb --model llama-3.1-8b --json", "good"),
            ("good", "sweep", "sweep {d}/tiny.toml --out {d}/work/good_sweep --workers 1 --no-plots --json", "good"),
            ("good", "record (random-weight 68M, bigram)", f"{REC} --out {{d}}/work/good.parquet", "good")]


def cases() -> list[tuple]:
    return (_cases_profiles() + _cases_tp_cli() + _cases_paths_specs() + _cases_tables() + _cases_executor()
            + _cases_plan_methods() + newer_cases() + _cases_good())
