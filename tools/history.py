"""Conformance history across transformers releases: run, merge, bisect.

Usage:
  python tools/history.py run --releases all-minor [--model ID ...] [-k EXPR] [--shard I/N] [--out DIR] [-- PYTEST_ARGS]
  python tools/history.py merge DIR [DIR ...] --out DIR
  python tools/history.py bisect CELL_ID CHECK --releases 5.0..5.24 [--out DIR]

``--releases`` takes releases (5.6.2), ``all``, ``all-minor`` (the last patch of each minor) and ranges (5.8..5.24:
the last patch of each minor; 5.8.0..5.10.4: every release between). Each release runs in its own environment,
created once under the kvconform cache (``$KVCONFORM_CACHE_DIR/releases``) with the interpreter's torch.
Exit status: 0 done (run, merge: no harness error; bisect: a change found or none), 1 harness errors, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from kvconform.history.bisect import Step, bisect, step_of  # noqa: E402
from kvconform.history.collect import read_history, release_dir, run_history, write_combined_reports, write_history  # noqa: E402
from kvconform.history.envs import EnvironmentError_, ensure_release  # noqa: E402
from kvconform.history.grid import merge_histories, overlay_models  # noqa: E402
from kvconform.history.releases import ReleaseError, available_releases, parse_releases, shard  # noqa: E402
from kvconform.history.render import summary_line  # noqa: E402
from kvconform.history.run import model_selection, run_release  # noqa: E402
from kvconform.report import ReportError, load_document  # noqa: E402
from kvconform.repro import REPRO_CHECKS  # noqa: E402

DEFAULT_OUT = ROOT / "reports" / "history"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Conformance history across transformers releases.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the suite under each release and write the history report")
    run.add_argument("--releases", nargs="+", required=True, help="releases, all, all-minor, or ranges such as 5.8..5.24")
    run.add_argument("--model", action="append", default=[], help="a matrix entry id (repeatable), e.g. llama")
    run.add_argument("-k", dest="keyword", help="a pytest -k expression, combined with --model")
    run.add_argument("--shard", help="run shard I/N of the releases (every N-th from the I-th); merge the shards after")
    run.add_argument("--out", type=Path, default=DEFAULT_OUT, help="history folder (default %(default)s)")
    run.add_argument("--timeout", type=float, default=3600, help="seconds one release's run may take (default %(default)s)")
    run.add_argument("pytest_args", nargs="*", help="after --: more pytest arguments (e.g. --dtype float32 -n 2)")
    merge = sub.add_parser("merge", help="merge the history folders of shards into one report")
    merge.add_argument("folders", nargs="+", type=Path)
    merge.add_argument("--out", type=Path, required=True)
    merge.add_argument("--replace", action="store_true",
                       help="a release in several folders: the later folder's run counts (a release run again after a fix)")
    merge.add_argument("--overlay", nargs="+", type=Path, default=[], metavar="FOLDER",
                       help="histories of a few models run again (--model): their cells replace those models' cells")
    bis = sub.add_parser("bisect", help="the first release in a range where one cell's check changes verdict")
    bis.add_argument("cell", help="cell id, e.g. 'llama[float32-cpu-dynamic]'")
    bis.add_argument("check", help="check name, e.g. parity or crop")
    bis.add_argument("--releases", nargs="+", required=True)
    bis.add_argument("--out", type=Path, default=ROOT / "reports" / "bisect")
    bis.add_argument("--timeout", type=float, default=1800)
    return parser.parse_args(argv)


def _releases(entries: list[str]) -> list[str]:
    return parse_releases(entries, available_releases())


def command_run(args: argparse.Namespace) -> int:
    releases = _releases(args.releases)
    if args.shard:
        releases = shard(releases, args.shard)
    pytest_args = [*model_selection(args.model, args.keyword), *args.pytest_args]
    print(f"history: {len(releases)} releases ({', '.join(releases)}); pytest suites {' '.join(pytest_args)}", file=sys.stderr)
    doc = run_history(releases, ROOT, args.out, pytest_args, args.timeout, say=lambda line: print(line, file=sys.stderr))
    print(summary_line(doc))
    print(f"history: {args.out / 'history.md'}")
    return 1 if doc["totals"]["harness_errors"] else 0


def command_merge(args: argparse.Namespace) -> int:
    runs, docs, selection = merge_histories([(read_history(folder), folder) for folder in args.folders], replace=args.replace)
    if args.overlay:
        runs, docs = overlay_models(runs, docs, [(read_history(folder), folder) for folder in args.overlay])
        runs = write_combined_reports(runs, docs, args.out)
    doc = write_history(runs, docs, selection, args.out)
    print(summary_line(doc))
    print(f"history: {args.out / 'history.md'}")
    return 1 if doc["totals"]["harness_errors"] else 0


def command_bisect(args: argparse.Namespace) -> int:
    releases = _releases(args.releases)
    model, bracket, rest = args.cell.partition("[")
    if not bracket or not rest.endswith("]"):
        raise ReleaseError(f"bisect: {args.cell!r} is not a cell id such as 'llama[float32-cpu-dynamic]'")
    selection = ["-k", f"[{args.cell}]"]

    def verdict(release: str) -> Step:
        env = ensure_release(release)
        record = run_release(env, ROOT, release_dir(args.out, release), selection, args.timeout)
        if record["status"] != "ok":
            raise ValueError(f"{release}: harness error: {record['error']}")
        return step_of(load_document(release_dir(args.out, release) / "conformance.json"), release, args.cell, args.check)

    print(f"bisect {args.cell} {args.check} over {len(releases)} releases ({releases[0]} … {releases[-1]})")
    steps, found = bisect(releases, verdict, on_step=lambda step: print(step.line(), flush=True))
    if found is None:
        print(f"no change: {steps[0].release} and {steps[-1].release} agree ({steps[0].outcome}, {steps[-1].outcome})")
        return 0
    before = releases[releases.index(found.release) - 1]
    print(f"first {'good' if found.good else 'bad'} release: {found.release} (previous {before}: "
          f"{'bad' if found.good else 'good'}); {len(steps)} runs")
    bad = found.release if not found.good else before
    env = ensure_release(bad)
    if args.check not in REPRO_CHECKS:
        print(f"repro: tools/repro.py writes scripts for {', '.join(REPRO_CHECKS)}, not {args.check}; rerun the cell: "
              f"{env.shell_prefix(ROOT)} python -m pytest suites -k '[{args.cell}]'")
        return 0
    script = args.out / f"repro-{model}-{args.check}-{bad}.py"
    print(f"repro for the bad release {bad}:\n  {env.shell_prefix(ROOT)} python tools/repro.py '{args.cell}' "
          f"--check {args.check} -o {script}\n  {env.shell_prefix()} python {script}   # exits 1 while the bug is there")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    commands = {"run": command_run, "merge": command_merge, "bisect": command_bisect}
    try:
        return commands[args.command](args)
    except (ReleaseError, EnvironmentError_, ReportError, ValueError) as exc:
        print(f"history: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
