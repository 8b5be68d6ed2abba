"""`make bench`: benchmarks/compare.py at a size that finishes in minutes on a small shared box.

Runs every variant of compare.py (plain fp32, bf16 autocast, Ray Data if installed, `docstream
run`, the real stack if deploy/local runs) on ``--pages`` pages (default 60)
and prints the table. For the full-size comparison run compare.py itself (300 pages by default).

    .venv/bin/python benchmarks/run_all.py [--pages 60]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=60)
    args = parser.parse_args()
    compare = Path(__file__).with_name("compare.py")
    raise SystemExit(subprocess.call([sys.executable, str(compare), "--pages", str(args.pages)]))


if __name__ == "__main__":
    main()
