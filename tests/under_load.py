"""Run a command (the test suite) beside a CPU hog on every core: `make test-under-load`.

A user's laptop runs other work while `make test` runs; the suite must pass there too. This starts
one busy-looping process per core at the same priority as the command, runs the command, stops the
hogs and exits with the command's status. The hogs watch their parent and exit when it is gone, so
an interrupted run leaves nothing spinning.

    python tests/under_load.py [--hogs N] -- python -m pytest tests
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import time


def _hog(parent: int) -> None:
    """Spin until the parent process is gone (checked a few times a second)."""
    while os.getppid() == parent:
        deadline = time.monotonic() + 0.25
        while time.monotonic() < deadline:
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     usage="%(prog)s [--hogs N] -- COMMAND ...")
    parser.add_argument("--hogs", type=int, default=os.cpu_count() or 1,
                        help="busy processes to run beside the command (default: one per core)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command to run under load")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (put it after --)")
    if not 1 <= args.hogs <= 256:
        parser.error(f"--hogs {args.hogs}: give 1 to 256")
    hogs = [multiprocessing.Process(target=_hog, args=(os.getpid(),), daemon=True) for _ in range(args.hogs)]
    for hog in hogs:
        hog.start()
    print(f"under load: {args.hogs} CPU hog(s) running beside: {' '.join(command)}", file=sys.stderr, flush=True)
    try:
        return subprocess.call(command)
    except KeyboardInterrupt:
        return 130
    finally:
        for hog in hogs:
            hog.terminate()
        for hog in hogs:
            hog.join(5)


if __name__ == "__main__":
    sys.exit(main())
