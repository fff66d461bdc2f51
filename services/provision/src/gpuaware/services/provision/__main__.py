"""Entry point only: ``python -m gpuaware.services.provision`` (exit 0 once everything exists)."""

from __future__ import annotations

import asyncio
import os
import sys

from gpuaware.runtime import setup_logging
from gpuaware.services.provision.job import provision
from gpuaware.services.provision.settings import ProvisionSettings, login_passwords


def main() -> int:
    settings = ProvisionSettings.from_env()
    setup_logging(settings.service_name, settings.log_level, settings.log_format)
    try:
        done = asyncio.run(provision(settings, login_passwords(os.environ)))
    except Exception as exc:  # a Job's failure is its message and exit code; it is retried by Kubernetes
        print(f"provisioning failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(f"provisioned: {done.summary()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
