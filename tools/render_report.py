"""Render Markdown, HTML and JUnit XML (and a merged JSON) from one or more conformance.json shards.

Usage: python tools/render_report.py A.json [B.json ...] [--out DIR]
Exit status: 0 written, 2 bad input (an unreadable report, shards that cannot be merged, an --out that cannot be written).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from kvconform.report import load_document, merge_documents, totals_line, write_reports
from kvconform.report_dir import describe_error, report_dir_problem


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Render conformance reports, merging shards.")
    parser.add_argument("reports", nargs="+", type=Path, help="conformance.json files (shards of one run)")
    parser.add_argument("--out", type=Path, default=Path("reports"), help="output directory (default %(default)s)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        docs = [load_document(path) for path in args.reports]
        doc = merge_documents(docs) if len(docs) > 1 else docs[0]
    except ValueError as exc:  # a ReportError, or shards that cannot be merged
        print(f"render_report: error: {exc}", file=sys.stderr)
        return 2
    problem = report_dir_problem(args.out)
    if problem:
        print(f"render_report: error: --out {args.out}: cannot write reports there ({problem})", file=sys.stderr)
        return 2
    try:
        written = write_reports(doc, args.out)
    except OSError as exc:
        print(f"render_report: error: could not write the reports to {args.out} ({describe_error(exc)})", file=sys.stderr)
        return 2
    for path in written:
        print(path)
    print(totals_line(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
