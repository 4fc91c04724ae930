"""The seeds' formula as a calculator: kvconform.checks.formula and the tools/kv_bytes.py CLI."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from kvconform.checks.formula import KvBytes, flags_geometry, format_bytes, to_json

REPO = Path(__file__).resolve().parents[1]
TOOL = REPO / "tools" / "kv_bytes.py"
SEED_FLAGS = ["--layers", "32", "--kv-heads", "8", "--head-dim", "128", "--tokens", "1024", "--batch", "1",
              "--dtype", "float16"]

_spec = importlib.util.spec_from_file_location("kv_bytes_tool", TOOL)
kv_bytes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kv_bytes)


def seed(layers: int = 32, kv_heads: int = 8, tokens: int = 1024, batch: int = 1, dtype: str = "float16",
         query_heads: int = 0) -> KvBytes:
    return KvBytes(flags_geometry(layers, kv_heads, 128, query_heads), tokens, batch, dtype)


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert kv_bytes.main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_seed_worked_example_32_layers_fp16():
    kv = seed()
    assert kv.per_token_layer == 4_096
    assert kv.per_token == 131_072
    assert kv.per_sequence == kv.per_batch == 134_217_728 == 128 * 2**20


def test_batch_of_eight_is_one_gib():
    kv = seed(batch=8)
    assert kv.per_sequence == 134_217_728
    assert kv.per_batch == 1_073_741_824 == 2**30
    assert format_bytes(kv.per_batch) == "1,073,741,824 B (1.00 GiB)"


def test_llama3_70b_at_32k_bfloat16():
    kv = seed(layers=80, tokens=32_768, dtype="bfloat16")
    assert kv.per_token == 327_680
    assert kv.per_sequence == 10_737_418_240


def test_mha_comparison_uses_query_heads_as_kv_heads():
    doc = to_json(seed(query_heads=32))
    assert doc["mha"] == {"query_heads": 32, "bytes_per_batch": 536_870_912, "factor": 4, "bytes_saved": 402_653_184}
    assert seed(kv_heads=32).per_batch == 536_870_912
    assert to_json(seed())["mha"] is None  # no query-head count, no comparison


def test_int4_is_exactly_half_of_int8():
    int8, int4 = seed(dtype="int8"), seed(dtype="int4")
    assert int4.per_batch * 2 == int8.per_batch == 67_108_864
    assert to_json(int4)["bytes_per_sequence"] == 33_554_432
    assert KvBytes(flags_geometry(1, 1, 1), 3, 1, "int4").per_batch == Fraction(3)  # 2 × 3 × ½, not rounded


def test_format_bytes_thousands_and_binary_units():
    assert format_bytes(134_217_728) == "134,217,728 B (128.00 MiB)"
    assert format_bytes(4_096) == "4,096 B (4.00 KiB)"
    assert format_bytes(Fraction(3, 2)) == "1.5 B (0.00 KiB)"


def test_cli_prints_the_seed_example():
    proc = subprocess.run([sys.executable, str(TOOL), *SEED_FLAGS], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = {line.split("  ")[0]: line for line in proc.stdout.splitlines()}
    assert "134,217,728 B (128.00 MiB)" in lines["per sequence (N=1,024)"]
    assert "131,072 B (128.00 KiB)" in lines["per token (all layers)"]
    assert "4,096 B (4.00 KiB)" in lines["per token per layer"]


def test_cli_json(capsys):
    doc = run_json(capsys, *SEED_FLAGS[:-6], "--tokens", "1024", "--batch", "8", "--query-heads", "32")
    assert (doc["bytes_per_batch"], doc["bytes_per_sequence"]) == (1_073_741_824, 134_217_728)
    assert doc["mha"]["factor"] == 4


def test_config_folder_takes_kv_heads_not_query_heads(tmp_path, capsys):
    from transformers import LlamaConfig

    config = LlamaConfig(num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, hidden_size=4096)
    config.save_pretrained(tmp_path)
    doc = run_json(capsys, str(tmp_path))  # tokens default to 1024 with a config
    assert doc["tokens"] == 1024
    assert doc["layer_groups"][0]["kv_heads"] == 8
    assert doc["bytes_per_sequence"] == 134_217_728
    assert doc["mha"]["query_heads"] == 32 and doc["mha"]["bytes_per_batch"] == 536_870_912


def test_sliding_window_layers_keep_window_minus_one(tmp_path, capsys):
    from transformers import MistralConfig

    MistralConfig(num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2, head_dim=64,
                  sliding_window=512).save_pretrained(tmp_path)
    doc = run_json(capsys, str(tmp_path), "--tokens", "2048")
    per_token_layer = 2 * 2 * 64 * 2
    assert doc["layer_groups"][0]["tokens_kept"] == 511
    assert doc["bytes_per_batch"] == 4 * per_token_layer * 511
    assert doc["sliding_window"]["bytes_if_full"] == 4 * per_token_layer * 2048
    assert doc["sliding_window"]["bytes_saved"] == 4 * per_token_layer * (2048 - 511)
    assert kv_bytes.main([str(tmp_path), "--tokens", "2048"]) == 0
    assert "Sliding window: 4 layers (window 512) keep min(N, window - 1) = 511 tokens" in capsys.readouterr().out


def test_layers_without_kv_count_zero_bytes(capsys):
    doc = run_json(capsys, "--model-type", "qwen3_next")
    no_kv = [g for g in doc["layer_groups"] if g["kind"] == "no_kv"]
    assert no_kv and all(g["bytes_per_batch"] == 0 for g in no_kv)
    assert doc["layers"]["no_kv"] == sum(g["count"] for g in no_kv) > 0
    assert doc["bytes_per_batch"] == sum(g["bytes_per_batch"] for g in doc["layer_groups"] if g["kind"] != "no_kv")


def test_mla_latent_against_expanded_heads(capsys):
    mla = run_json(capsys, "--model-type", "deepseek_v3")["mla"]  # rank 512, rope 64, nope 128, v 128, 128 heads
    assert mla["latent_values_per_token_per_layer"] == 512 + 64
    assert mla["latent_bytes_per_token_per_layer"] == 1_152
    assert mla["expanded_bytes_per_token_per_layer"] == 128 * (128 + 64 + 128) * 2 == 81_920
    assert mla["latent_bytes_per_batch"] == 61 * 576 * 1024 * 2
    assert kv_bytes.main(["--model-type", "deepseek_v3"]) == 0
    out = capsys.readouterr().out
    assert "MLA latent: kv_lora_rank + qk_rope_head_dim = 576 values per token per layer = 1,152 B" in out
    assert "GQA vs MHA" not in out


def test_auto_map_config_is_refused(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "llama", "auto_map": {"AutoConfig": "configuration_x.XConfig"}, "num_hidden_layers": 2}))
    assert kv_bytes.main([str(tmp_path)]) == 2
    assert "auto_map" in capsys.readouterr().err


def test_missing_hub_id_names_it_and_how_to_fetch(capsys):
    assert kv_bytes.main(["kvconform-test/no-such-model"]) == 2
    err = capsys.readouterr().err
    assert "kvconform-test/no-such-model" in err and "hf download kvconform-test/no-such-model" in err


@pytest.mark.parametrize(("argv", "message"), [
    ([], "give MODEL, --model-type"),
    (SEED_FLAGS[:4], "--head-dim"),
    (SEED_FLAGS[:6], "--tokens is required"),
    ([*SEED_FLAGS[:6], "--tokens", "0"], "positive integer"),
    ([*SEED_FLAGS[:8], "--dtype", "fp7"], "invalid choice"),
    (["--model-type", "llama", "--layers", "2"], "drop --layers"),
    (["--model-type", "llama", "--query-heads", "2"], "--query-heads"),
])
def test_bad_flags_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        kv_bytes.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_flags_exit_2_from_the_command_line():
    proc = subprocess.run([sys.executable, str(TOOL), "--layers", "32"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert "the flags need --kv-heads --head-dim too" in proc.stderr


def test_folder_without_config_json_says_so(tmp_path, capsys):
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert kv_bytes.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"kv_bytes: error: {tmp_path}: no config.json found in this folder (a transformers checkpoint folder holds one)"


def test_config_json_that_is_not_json_is_named(tmp_path, capsys):
    (tmp_path / "config.json").write_text("{model_type: llama}")
    assert kv_bytes.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"kv_bytes: error: {tmp_path / 'config.json'}: not valid JSON (Expecting property name"), err
    assert "line 1, column 2" in err and "\n" not in err
