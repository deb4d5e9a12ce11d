"""Where safebeat's HTTP servers listen: beat's probes and metrics, the worker hook's
metrics and `safebeat exporter`.

By default every address of the host, IPv6 and IPv4 alike: one socket on `::` that also
takes IPv4 (IPV6_V6ONLY off). A Kubernetes pod on an IPv6-only or IPv6-first dual-stack
cluster is probed and scraped on its IPv6 address, which a server on `0.0.0.0` (IPv4
only) never answers: every probe would fail and the kubelet would restart beat. A host
without IPv6 gets `0.0.0.0`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import socket
import socketserver
import threading
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

logger = logging.getLogger("safebeat.listening")

IPV4_ANY = "0.0.0.0"  # noqa: S104 - a pod's port, reached from outside the pod
IPV6_ANY = "::"


@functools.cache
def any_address() -> str:
    """`::` where this host can open a socket taking IPv6 and IPv4 at once, else `0.0.0.0`."""
    if not socket.has_ipv6:
        return IPV4_ANY
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            probe.bind((IPV6_ANY, 0))
    except OSError:
        return IPV4_ANY
    return IPV6_ANY


def family_of(address: str) -> socket.AddressFamily:
    """The address family a server on `address` needs (a name is looked up)."""
    info = socket.getaddrinfo(address, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    return info[0][0]


def shown(address: str, port: int) -> str:
    """`address:port` as a URL writes it (`[::]:9809`)."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


class DualStack(socketserver.TCPServer):
    """A TCP server whose IPv6 wildcard socket also takes IPv4 (whatever the host's
    `net.ipv6.bindv6only`). Set `address_family` before binding (`family_of`)."""

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6:
            with contextlib.suppress(OSError):  # a host that cannot: IPv6 only, as asked
                self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Say nothing: Prometheus scrapes every few seconds."""


class _MetricsServer(socketserver.ThreadingMixIn, DualStack, WSGIServer):
    daemon_threads = True


def serve_registry(registry: CollectorRegistry, port: int, address: str) -> int:
    """Serve `registry` at http://address:port/metrics from a daemon thread; return the
    port (the one chosen, for port 0). Raise OSError if it cannot be opened."""
    server_class = type("MetricsServer", (_MetricsServer,), {"address_family": family_of(address)})
    server: WSGIServer = make_server(
        address, port, make_wsgi_app(registry), server_class, handler_class=_QuietHandler
    )
    thread = threading.Thread(target=server.serve_forever, name="safebeat-metrics", daemon=True)
    thread.start()
    return int(server.server_address[1])
