"""`/livez` and `/readyz` over HTTP, on `safebeat_probe_port`, from a daemon thread.

A server of its own rather than a path on the metrics port: the probes answer with metrics
off, and never wait behind a large scrape. Each answer reads a few numbers (`ProbeState`),
so a kubelet probing every few seconds costs nothing, unlike a process that imports the app.
"""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from safebeat.beat.probes import ProbeAnswer, ProbeState
from safebeat.listening import DualStack, any_address, family_of, shown

logger = logging.getLogger("safebeat.probes")


class _ProbeHandler(BaseHTTPRequestHandler):
    server: _ProbeHTTPServer

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def _answer(self, *, body: bool) -> None:
        path = self.path.split("?", 1)[0]
        state = self.server.state
        answer: ProbeAnswer | None = {
            "/livez": state.liveness,
            "/readyz": state.readiness,
        }.get(path, lambda: None)()
        if answer is None:
            status, text = 404, "not found: /livez or /readyz\n"
        else:
            status, text = (200 if answer.ok else 503), answer.reason + "\n"
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        """Say nothing: a kubelet probes every few seconds."""


class _ProbeHTTPServer(DualStack, ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], state: ProbeState) -> None:
        self.state = state
        self.address_family = family_of(address[0])
        super().__init__(address, _ProbeHandler)


class ProbeServer:
    """Serves a `ProbeState` at http://address:port/livez and /readyz until `close` (by
    default on every address, IPv6 and IPv4: `safebeat.listening`)."""

    def __init__(self, state: ProbeState, port: int, address: str | None = None) -> None:
        address = any_address() if address is None else address
        self._server = _ProbeHTTPServer((address, port), state)
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.5},
            name="safebeat-probes",
            daemon=True,
        )
        self._thread.start()
        logger.info("safebeat: probes on http://%s/livez and /readyz", shown(address, self.port))

    def close(self) -> None:
        """Stop answering and free the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def serve_probes(state: ProbeState, port: int) -> ProbeServer | None:
    """Serve the probes on `port`. A port that is taken is said at ERROR, naming the port,
    the setting and what follows, and beat runs on: it still dispatches (the claim, not the
    probes, keeps windows single), and a kubelet's failing probes restart it, which says
    so once more in the pod's events."""
    try:
        return ProbeServer(state, port)
    except OSError as exc:
        logger.error(
            "safebeat: cannot serve /livez and /readyz on port %d (%s): another process "
            "holds it (in sidecar mode, maybe your app). Set safebeat_probe_port "
            "(SAFEBEAT_PROBE_PORT; the Helm chart's probes.port) to a free port. Beat runs "
            "on and dispatches, but every HTTP probe of it fails: Kubernetes will restart it",
            port,
            exc,
        )
        return None
