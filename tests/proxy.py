"""A TCP proxy on loopback that a test can cut and restore, to break connections on purpose."""

from __future__ import annotations

import contextlib
import select
import socket
import threading


class Proxy:
    """Forwards 127.0.0.1:<port> to an upstream address (TCP, or a Unix socket path) until cut."""

    def __init__(self, upstream_host: str, upstream_port: int = 0) -> None:
        self.upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._open = threading.Event()
        self._open.set()
        self._stopped = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._mutex = threading.Lock()
        #: Connections refused while cut: how often the client tried to reconnect.
        self.refused = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        """Drop every connection and refuse new ones, like a network partition."""
        self._open.clear()
        with self._mutex:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def restore(self) -> None:
        self._open.set()

    def close(self) -> None:
        self._stopped.set()
        self.cut()
        self._listener.close()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._open.is_set():
                self.refused += 1
                client.close()
                continue
            try:
                server = self._connect_upstream()
            except OSError:
                client.close()
                continue
            with self._mutex:
                self._sockets.update((client, server))
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    def _connect_upstream(self) -> socket.socket:
        host, port = self.upstream
        if host.startswith("/"):
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.settimeout(5)
            server.connect(host)
            return server
        return socket.create_connection((host, port), timeout=5)

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        peers = {client: server, server: client}
        try:
            while self._open.is_set():
                readable, _, _ = select.select(list(peers), [], [], 0.2)
                for sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        return
                    peers[sock].sendall(data)
        except (OSError, ValueError):
            return
        finally:
            for sock in peers:
                with contextlib.suppress(OSError):
                    sock.close()
