"""Entry point only: ``python -m gpuaware.services.binder``."""

from __future__ import annotations

import asyncio

from gpuaware.runtime import run_service
from gpuaware.services.binder import __version__
from gpuaware.services.binder.handlers import mount
from gpuaware.services.binder.settings import BinderSettings


def main() -> None:
    asyncio.run(run_service(BinderSettings.from_env(), version=__version__, mount=mount))


if __name__ == "__main__":
    main()
