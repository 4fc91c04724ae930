"""KV-cache bytes from the seeds' formula: 2 × L × H_kv × d_head × N × B × bytes.

Usage:
  python tools/kv_bytes.py --layers L --kv-heads H --head-dim D --tokens N [--batch B] [--dtype T] [--query-heads Q]
  python tools/kv_bytes.py FOLDER_OR_HUB_ID [--tokens N] [--batch B] [--dtype T]
  python tools/kv_bytes.py --model-type llama [--tokens N] [--batch B] [--dtype T]
Add --json for machine-readable figures. --tokens is required with the flags and defaults to 1024 with a config;
--batch defaults to 1 and --dtype to float16. Configs are read from a local folder or the local Hugging Face cache
only (never downloaded), without remote code. Exit status: 0 ok, 2 bad input.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from kvconform.build.checkpoint_files import CheckpointFileError, read_config
from kvconform.build.geometry import cache_geometry
from kvconform.checks.formula import BYTES_PER_VALUE, KvBytes, flags_geometry, mla_dims, render_text, to_json

CONFIG_TOKENS = 1024
SHAPE_FLAGS = ("layers", "kv_heads", "head_dim")


class ConfigError(Exception):
    """A config that cannot be read safely."""


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="KV-cache bytes: 2 × L × H_kv × d_head × N × B × bytes, from flags or a model config.")
    parser.add_argument("model", nargs="?", help="local folder with config.json, or a hub id in the local HF cache")
    parser.add_argument("--model-type", help="a transformers model_type, using its default config (e.g. llama)")
    parser.add_argument("--layers", type=_positive, help="L: decoder layers")
    parser.add_argument("--kv-heads", type=_positive, help="H_kv: KV heads after GQA/MQA (not the query heads)")
    parser.add_argument("--head-dim", type=_positive, help="d_head: dimension per head")
    parser.add_argument("--query-heads", type=_positive, help="query heads, for the MHA comparison (flags only)")
    parser.add_argument("--tokens", type=_positive,
                        help=f"N: tokens per sequence (required with the flags; default {CONFIG_TOKENS} with a config)")
    parser.add_argument("--batch", type=_positive, default=1, help="B: sequences (default %(default)s)")
    parser.add_argument("--dtype", choices=list(BYTES_PER_VALUE), default="float16",
                        help="cache value type (default %(default)s)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    given = [f"--{name.replace('_', '-')}" for name in SHAPE_FLAGS if getattr(args, name) is not None]
    configs = [name for name, value in (("MODEL", args.model), ("--model-type", args.model_type)) if value]
    if len(configs) > 1:
        parser.error("give MODEL or --model-type, not both")
    if configs and given:
        parser.error(f"{configs[0]} gives the shape; drop {' '.join(given)}")
    if configs and args.query_heads is not None:
        parser.error("--query-heads is for the flags; a config gives its own query-head count")
    if not configs:
        missing = [f"--{name.replace('_', '-')}" for name in SHAPE_FLAGS if getattr(args, name) is None]
        if len(missing) == len(SHAPE_FLAGS):
            parser.error("give MODEL, --model-type, or --layers/--kv-heads/--head-dim with --tokens")
        if missing:
            parser.error(f"the flags need {' '.join(missing)} too")
        if args.tokens is None:
            parser.error("--tokens is required with --layers/--kv-heads/--head-dim")
    return args


def load_config(source: str) -> Any:
    """A config from a local folder or the local Hugging Face cache, refusing remote code (``auto_map``)."""
    from transformers import AutoConfig, PreTrainedConfig

    if Path(source).is_dir():
        try:
            read_config(source)
        except CheckpointFileError as exc:
            raise ConfigError(str(exc)) from None
    try:
        raw, _ = PreTrainedConfig.get_config_dict(source, local_files_only=True)
    except OSError as exc:
        if Path(source).exists():
            raise ConfigError(f"{source}: no readable config.json ({exc})") from exc
        raise ConfigError(
            f"{source!r} is neither a local folder nor a model in the local Hugging Face cache; fetch its config "
            f"with `hf download {source} config.json` (or pass a folder holding config.json)") from exc
    if "auto_map" in raw:
        raise ConfigError(
            f"{source}: config.json sets auto_map (custom modeling code); kv_bytes never runs remote code, so pass "
            f"the shape as --layers/--kv-heads/--head-dim instead")
    try:
        return AutoConfig.from_pretrained(source, local_files_only=True)
    except (ValueError, KeyError) as exc:
        raise ConfigError(f"{source}: transformers cannot build this config ({exc})") from exc


def config_for_type(model_type: str) -> Any:
    """transformers' default config for ``model_type``."""
    from transformers import CONFIG_MAPPING, AutoConfig

    if model_type not in CONFIG_MAPPING:
        close = difflib.get_close_matches(model_type, list(CONFIG_MAPPING.keys()), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ConfigError(f"--model-type {model_type}: not a transformers model_type{hint}")
    return AutoConfig.for_model(model_type)


def build(args: argparse.Namespace) -> KvBytes:
    """The figures the arguments ask for."""
    if args.layers is not None:
        geometry = flags_geometry(args.layers, args.kv_heads, args.head_dim, args.query_heads or 0)
        source = f"flags (--layers {args.layers} --kv-heads {args.kv_heads} --head-dim {args.head_dim})"
        return KvBytes(geometry, args.tokens, args.batch, args.dtype, source)
    if args.model_type:
        config, source = config_for_type(args.model_type), f"--model-type {args.model_type} (transformers defaults)"
    else:
        config = load_config(args.model)
        source = f"{args.model} (model_type {getattr(config, 'model_type', '?')})"
    try:
        geometry = cache_geometry(config)
    except (AttributeError, TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: no decoder KV-cache shape in this config ({exc})") from exc
    return KvBytes(geometry, args.tokens or CONFIG_TOKENS, args.batch, args.dtype, source, mla_dims(config))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        kv = build(args)
    except ConfigError as exc:
        print(f"kv_bytes: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(to_json(kv), indent=2, ensure_ascii=False))
    else:
        print(render_text(kv), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
