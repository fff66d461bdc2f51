# Run by the chart's provision-streams Job (python -c): the streams of the contract, as admin.
import asyncio
import os

from gpuaware.runtime import provision_streams

names = asyncio.run(provision_streams(os.environ["NATS_URL"], user=os.environ.get("NATS_USER", ""),
                                      password=os.environ.get("NATS_PASSWORD", ""), timeout=30.0))
print("provisioned streams:", ", ".join(names))
