"""The `gpumix` command."""

import argparse
import sys
from pathlib import Path

from gpumix.api import RESOURCES
from gpumix.api.crdgen import write_crds


def _crds(args: argparse.Namespace) -> int:
    for path in write_crds(Path(args.dir), RESOURCES):
        print(path)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpumix", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    crds = sub.add_parser("crds", help="write the CustomResourceDefinitions generated from the API")
    crds.add_argument("--dir", default="crds", help="output directory (default: crds)")
    crds.set_defaults(func=_crds)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
