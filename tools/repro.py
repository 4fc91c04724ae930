"""Write a standalone script (torch + transformers only) that reproduces one matrix cell's failure.

Usage: python tools/repro.py CELL_ID [--check parity|prefix_reuse] [--matrix FILE] [-o FILE]

CELL_ID is a test id such as ``bamba[float32-cpu-dynamic]``. The script exits 1 when the divergence
(or crash) reproduces and 0 when it does not; paste it into an upstream issue.
Exit codes of this tool: 0 written, 2 unknown cell or a check it cannot reproduce.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

# torch and transformers load only after the arguments parse (--help answers at once); kvconform.repro imports neither.
from kvconform.repro import REPRO_CHECKS, ReproError, repro_script  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Write a standalone reproduction script for one matrix cell.")
    parser.add_argument("cell", help="cell id, e.g. 'bamba[float32-cpu-dynamic]'")
    parser.add_argument("--check", default="parity", choices=REPRO_CHECKS, help="the path to reproduce (default %(default)s)")
    parser.add_argument("--matrix", type=Path, default=ROOT / "model_matrix.yaml", help="matrix file (default %(default)s)")
    parser.add_argument("-o", "--output", type=Path, default=None, help="write the script here (default: standard output)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from kvconform.build.architecture_table import load_architecture_table
    from kvconform.build.model_types import causal_lm_model_types, model_attention
    from kvconform.cells import expand_cells
    from kvconform.matrix import MatrixError, load_matrix

    try:
        matrix = load_matrix(args.matrix, known_model_types=causal_lm_model_types, excluded_types=load_architecture_table()[1])
    except MatrixError as exc:
        print(f"repro: error: {exc}", file=sys.stderr)
        return 2
    cells = {cell.id: cell for cell in expand_cells(matrix, model_attention)}
    if args.cell not in cells:
        close = difflib.get_close_matches(args.cell, cells, n=3, cutoff=0.5)
        hint = f"; did you mean: {', '.join(close)}?" if close else "; list them with `pytest suites --collect-only -q`"
        print(f"repro: error: unknown cell id {args.cell!r}{hint}", file=sys.stderr)
        return 2
    try:
        script = repro_script(cells[args.cell], args.check)
    except ReproError as exc:
        print(f"repro: error: {exc}", file=sys.stderr)
        return 2
    if args.output is None:
        sys.stdout.write(script)
    else:
        args.output.write_text(script)
        print(f"wrote {args.output} (run it with: python {args.output})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
