"""The command line the GPU capacity benchmarks share (``gpu_cascade.py``, ``gpu_native.py``)."""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path

DATASET_HELP = "where the synthetic dataset is (made there when incomplete; default DIR/dataset)"


def sweep_args(
    doc: str | None,
    levels: str,
    prefix: str,
    tiny_help: str,
    extra: Callable[[argparse.ArgumentParser], None] | None = None,
    device_help: str | None = None,
    dataset_help: str = DATASET_HELP,
    ready_help: str | None = None,
) -> argparse.Namespace:
    """The parsed command line: --out (default: a new temporary directory ``prefix...``,
    resolved), --levels (default ``levels``; --tiny: 1,2), --sessions, --device, --dataset,
    --tiny, the options ``extra`` adds, and --ready-timeout-s."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="output directory (default: a new temporary one)"
    )
    parser.add_argument(
        "--levels", default=None, help=f"rising concurrency levels (default {levels}; --tiny: 1,2)"
    )
    parser.add_argument(
        "--sessions", type=int, default=None, help="samples in the cohort (default: the top level)"
    )
    parser.add_argument("--device", default="cuda", help=device_help)
    parser.add_argument("--dataset", type=Path, default=None, help=dataset_help)
    parser.add_argument("--tiny", action="store_true", help=tiny_help)
    if extra is not None:
        extra(parser)
    parser.add_argument("--ready-timeout-s", type=float, default=900.0, help=ready_help)
    args = parser.parse_args()
    args.levels = args.levels or ("1,2" if args.tiny else levels)
    args.out = (args.out or Path(tempfile.mkdtemp(prefix=prefix))).resolve()
    return args
