"""``python -m corral.images build-base [--images-dir DIR]``: build the default image."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from corral.images.store import ImageBuildError, ImageStore


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m corral.images")
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build-base", help="debootstrap the default 'base' image")
    build.add_argument("--images-dir", type=Path, default=Path("/var/lib/corral/images"))
    args = parser.parse_args(argv)
    try:
        ImageStore(args.images_dir).build_base("base", progress=lambda m: print(m, flush=True))
    except ImageBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
