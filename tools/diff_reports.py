"""Compare two conformance reports and say whether the new run regressed.

Usage: python tools/diff_reports.py BASE.json NEW.json [--factor F] [--margin M] [--allow-missing] [--markdown OUT.md]
Exit status: 0 nothing regressed; 1 regressed: a result newly fails, a parity delta grew by more than F times
AND past M of its limit, a passing result the new run planned (or gives no reason for) is missing (not with
--allow-missing), or the new report is incomplete (a run cut short, also with --allow-missing); 2 bad input.
Results the new run did not plan (its release changed the model's default attention or support; the new
report's plan says why) are information, counted by reason.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from kvconform.diff import (
    DEFAULT_FACTOR,
    DEFAULT_MARGIN,
    diff_documents,
    regressions,
    render_diff_markdown,
    render_diff_text,
)
from kvconform.report import ReportError, load_document, write_text_atomic
from kvconform.report_dir import describe_error


def _factor(text: str) -> float:
    value = float(text)
    if not value >= 1.0:
        raise argparse.ArgumentTypeError(f"must be a number >= 1, got {text}")
    return value


def _margin(text: str) -> float:
    value = float(text)
    if not value >= 0.0:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text}")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Regression diff between two conformance.json reports.")
    parser.add_argument("base", type=Path, help="report of the reference run")
    parser.add_argument("new", type=Path, help="report of the run to check")
    parser.add_argument("--factor", type=_factor, default=DEFAULT_FACTOR,
                        help="parity delta change counted as a move (default %(default)s)")
    parser.add_argument("--margin", type=_margin, default=DEFAULT_MARGIN,
                        help="a grown parity delta regresses only above this fraction of its limit (default %(default)s)")
    parser.add_argument("--allow-missing", action="store_true",
                        help="passing results missing from NEW do not regress (e.g. NEW is one shard or a -k subset); "
                             "an incomplete NEW report still does")
    parser.add_argument("--markdown", type=Path, metavar="OUT.md", help="also write a Markdown report here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        base, new = load_document(args.base), load_document(args.new)
    except ReportError as exc:
        print(f"diff_reports: error: {exc}", file=sys.stderr)
        return 2
    diff = diff_documents(base, new, args.factor, args.margin, args.allow_missing)
    print(render_diff_text(diff), end="")
    if args.markdown:
        try:
            args.markdown.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(args.markdown, render_diff_markdown(diff))
        except OSError as exc:
            print(f"diff_reports: error: could not write --markdown {args.markdown} ({describe_error(exc)})", file=sys.stderr)
            return 2
    return 1 if regressions(diff) else 0


if __name__ == "__main__":
    sys.exit(main())
