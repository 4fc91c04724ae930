"""Measure every model type of a family sweep: build it shrunk, probe it once in float32, run its checks.

Usage: python tools/survey_families.py FAMILY [TYPE ...] [--all] [--timeout 120] [--json OUT]

FAMILY is image-text-to-text, seq2seq, speech-seq2seq, audio-text-to-text or text-to-audio. Without TYPEs it surveys the types the sweep
runs (``--all``: also the ones ``families.yaml`` excludes, to re-measure their reasons). Each type runs in
its own process under a time limit; one line per type: ``ok``, the failing checks with their first
message line, or the exception that kept it from running. These lines are the measured reasons of
``kvconform/families/families.yaml``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from kvconform.families import CAUSAL_LM, FAMILIES  # noqa: E402


def raised_at(exc: BaseException) -> str:
    """Where ``exc`` was raised: the innermost frame in transformers (``models/x/modeling_x.py:123``), else the innermost."""
    frames = traceback.extract_tb(exc.__traceback__)
    inside = [f for f in frames if "/transformers/" in f.filename]
    frame = (inside or frames)[-1]
    path = frame.filename.split("/transformers/", 1)[-1] if inside else frame.filename.rsplit("/", 1)[-1]
    return f"{path}:{frame.lineno}"


def survey_one(family: str, model_type: str) -> dict[str, Any]:
    """Build, probe and check one type in this process (plain-data result)."""
    from kvconform.families.build import build_family, shrink_family_config
    from kvconform.families.checks import run_all_family
    from kvconform.families.probe import probe_family
    from kvconform.matrix import Tolerance
    from kvconform.probe.decode import ProbePlan

    tolerance = Tolerance(atol=1e-5, rtol=3e-5)
    start = time.perf_counter()
    try:
        model = build_family(shrink_family_config(model_type, family), family, seed=0)
        plan = ProbePlan(batch_size=2, prompt_length=6, decode_steps=8, seed=0, generate=False, locate_tolerance=tolerance)
        probe = probe_family(model, plan, family)
    except Exception as exc:  # noqa: BLE001 - the survey reports it
        text = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        return {"type": model_type, "outcome": "error", "message": f"{text} ({raised_at(exc)})",
                "seconds": round(time.perf_counter() - start, 2)}
    results = run_all_family(probe, family, tolerance).values()
    failed = {r.name: r.message.splitlines()[0][:300] for r in results if not r.passed}
    return {"type": model_type, "outcome": "fail" if failed else "ok", "failed": failed, "inputs": probe.inputs,
            "max_delta": probe.record.max_abs_delta, "seconds": round(time.perf_counter() - start, 2)}


def exclusion_reason(result: dict[str, Any]) -> str:
    """The measured reason a type is left out, for families.yaml."""
    if result["outcome"] == "fail":
        first = next(iter(result["failed"].items()))
        return f"{first[0]} fails on the synthetic build, cause not established yet: {first[1]}"[:400]
    return f"synthetic build/inputs do not run: {result['message']}"[:400]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Survey a family sweep's model types.")
    parser.add_argument("family", choices=[f for f in FAMILIES if f != CAUSAL_LM])
    parser.add_argument("types", nargs="*")
    parser.add_argument("--all", action="store_true", help="also the types families.yaml excludes")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per type (default %(default)s)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    parser.add_argument("--yaml", action="store_true", help="end with families.yaml 'excluded' lines for the types that did not pass")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(survey_one(args.family, args.types[0])))
        return 0
    from kvconform.families.registry import family_table, sweep_types

    types, _ = sweep_types(args.family)
    if args.all:
        types += sorted((family_table().get("excluded") or {}).get(args.family) or {})
    results = []
    for model_type in args.types or types:
        command = [sys.executable, __file__, args.family, model_type, "--one"]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            result: dict[str, Any] = json.loads(lines[-1]) if lines else {
                "type": model_type, "outcome": "crashed", "message": " ".join(done.stderr.split()[-40:])}
        except subprocess.TimeoutExpired:
            result = {"type": model_type, "outcome": "timeout", "message": f"no result within {args.timeout:g} s"}
        results.append(result)
        failed: dict[str, str] = result.get("failed", {})
        detail = result.get("message") or "; ".join(f"{k}: {v}" for k, v in failed.items())
        print(f"{model_type}: {result['outcome']} {result.get('seconds', '')}s {detail}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    if args.yaml:
        print(f"  {args.family}:")
        for result in results:
            if result["outcome"] != "ok":
                print(f"    {result['type']}: {json.dumps(exclusion_reason(result))}")
    counts = {o: sum(r["outcome"] == o for r in results) for o in ("ok", "fail", "error", "crashed", "timeout")}
    print(" ".join(f"{k}={v}" for k, v in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
