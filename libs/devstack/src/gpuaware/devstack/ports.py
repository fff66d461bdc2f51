"""Port helpers: pick a free loopback port, check that a chosen one is free, wait for a listener."""

import socket
import time
from collections import deque

from gpuaware.devstack.errors import StackError

RECENT_PORTS = 256
"""how many ports `free_port` handed out lately are never handed out again (per process)"""

_handed_out: deque[int] = deque(maxlen=RECENT_PORTS)


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the kernel picks it), and none this process was handed
    lately: two calls before either port is bound (a server's client and monitoring ports) could
    otherwise get the same one back, and the server then fails to start."""
    port = 0
    for _ in range(64):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        if port not in _handed_out:
            break
    _handed_out.append(port)
    return port


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def wait_port_free(port: int, timeout: float = 10.0, host: str = "127.0.0.1") -> bool:
    """Wait until `port` can be bound (a killed server's port can take a moment to be released)."""
    deadline = time.monotonic() + timeout
    while not port_is_free(port, host):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def wait_for_listener(port: int, *, what: str, timeout: float = 20.0, host: str = "127.0.0.1",
                      alive=lambda: True) -> None:
    """Block until something accepts TCP connections on `port`, or raise StackError."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            raise StackError(f"{what} exited before it listened on {host}:{port}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise StackError(f"{what} did not listen on {host}:{port} within {timeout:.0f}s")
