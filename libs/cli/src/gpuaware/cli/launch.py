"""Run a service module after importing plug-in modules: ``python -m gpuaware.cli.launch
[--preload MODULE ...] gpuaware.services.<name> [args]``.

Why: a policy registered by a library module (``gpuaware.placement.stock`` registers KubeDefault)
exists in a process only once that module is imported, and the services import only what they
need. The demo starts its baseline's placement service through this launcher so the service runs
unchanged (``runpy`` executes its ``__main__`` exactly as ``python -m`` does) with the extra
registrations in place. The CLI never imports a service itself: the module name is data here.
"""

from __future__ import annotations

import importlib
import runpy
import sys


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    preload: list[str] = []
    while len(args) >= 2 and args[0] == "--preload":
        preload.append(args[1])
        args = args[2:]
    if not args or args[0].startswith("-"):
        print("usage: python -m gpuaware.cli.launch [--preload MODULE ...] MODULE [ARGS ...]", file=sys.stderr)
        return 2
    for module in preload:
        importlib.import_module(module)
    target, rest = args[0], args[1:]
    sys.argv = [target, *rest]
    runpy.run_module(target, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
