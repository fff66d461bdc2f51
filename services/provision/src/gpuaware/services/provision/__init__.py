"""The provisioning job: what must exist before the services start, done by the two identities allowed to.

    python -m gpuaware.services.provision

As the ``admin`` NATS user it creates or updates the platform's streams (services may not); as the
database's owner (``DATABASE_URL``) it applies the migrations and creates or updates each service's
LOGIN role, a member of the service's group role, with the password handed to it in the service's
``GPUAWARE_DB_PASSWORD_<NAME>`` variable (``schemas.processes``). The chart runs it as a post-install /
post-upgrade Job; ``gpuaware up`` and the demo call the same functions (``gpuaware.tsdb``).
``settings.py`` holds the frozen settings, ``job.py`` the steps.
"""

__version__ = "0.1.0"
