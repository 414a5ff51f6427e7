"""The network under an outgoing HTTP request (a webhook, a TLS report): one deadline for all of it.

httpx and httpcore time each read and write separately, so a receiver that sends a byte now and
then keeps a request open as long as it likes. Here every socket operation (connect, TLS
handshake, each send, each receive) waits at most until the request's deadline, so the request
ends, and its socket is closed, by then however the peer paces its bytes.
"""

import socket
import ssl
import time
from typing import Any

import httpcore

# What a failed request raises: the request is retried later.
REQUEST_ERRORS = (
    httpcore.TimeoutException,
    httpcore.NetworkError,
    httpcore.ProtocolError,
    httpcore.UnsupportedProtocol,
)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def _wait_at_most(self, timeout_error: type[Exception]) -> None:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise timeout_error("deadline passed")
        self._sock.settimeout(left)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            self._wait_at_most(httpcore.ReadTimeout)
            return self._sock.recv(max_bytes)
        except TimeoutError:
            raise httpcore.ReadTimeout("deadline passed") from None
        except OSError as exc:
            raise httpcore.ReadError(str(exc)) from None

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        view = memoryview(buffer)
        try:
            while view:
                self._wait_at_most(httpcore.WriteTimeout)
                view = view[self._sock.send(view) :]
        except TimeoutError:
            raise httpcore.WriteTimeout("deadline passed") from None
        except OSError as exc:
            raise httpcore.WriteError(str(exc)) from None

    def close(self) -> None:
        self._sock.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        # CPython bounds the whole handshake by the socket's timeout, not each of its reads.
        try:
            self._wait_at_most(httpcore.ConnectTimeout)
            return _DeadlineStream(ssl_context.wrap_socket(self._sock, server_hostname=server_hostname), self._deadline)
        except TimeoutError:
            self._sock.close()
            raise httpcore.ConnectTimeout("deadline passed") from None
        except OSError as exc:
            self._sock.close()
            raise httpcore.ConnectError(str(exc)) from None

    def get_extra_info(self, info: str) -> Any:
        return self._sock if info == "socket" else None


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self, deadline: float) -> None:
        self._deadline = deadline

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.NetworkStream:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise httpcore.ConnectTimeout("deadline passed")
        try:
            sock = socket.create_connection((host, port), timeout=left)
        except TimeoutError:
            raise httpcore.ConnectTimeout("deadline passed") from None
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _DeadlineStream(sock, self._deadline)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def post_status(
    *,
    url: str,
    headers: dict[str, str],
    body: bytes,
    sni_hostname: str,
    ssl_context: ssl.SSLContext,
    timeout: float,
) -> int:
    """POST `body` and return the status code, all within `timeout` seconds; raises REQUEST_ERRORS.

    Only the status line and headers are read: the body does not matter, and the connection is
    closed on return."""
    backend = _DeadlineBackend(time.monotonic() + timeout)
    with (
        httpcore.ConnectionPool(ssl_context=ssl_context, network_backend=backend, retries=0) as pool,
        pool.stream(
            "POST", url, headers=list(headers.items()), content=body, extensions={"sni_hostname": sni_hostname}
        ) as response,
    ):
        return response.status
