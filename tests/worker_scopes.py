"""Which test modules must run on one pytest-xdist worker: those sharing a fixture wider than a test.

`make test` spreads tests over workers one by one (the scheduler in tests/conftest.py); a module that
defines a module-, class- or package-scoped fixture, or sits below a conftest.py that does, keeps its
tests together so the fixture (a demo run, a server of the module's own) is built once.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
_SHARED_SCOPE = re.compile(r"""scope\s*=\s*["'](module|class|package)["']""")


@functools.cache
def shares_fixtures(test_file: str) -> bool:
    """Whether ``test_file`` (relative to the repository) or a conftest.py above it, up to tests/,
    defines a module-, class- or package-scoped fixture."""
    path = (TESTS.parent / test_file).resolve()
    sources = [path, *(folder / "conftest.py" for folder in path.parents if TESTS in folder.parents)]
    return any(_SHARED_SCOPE.search(f.read_text(errors="replace")) for f in sources if f.is_file())
