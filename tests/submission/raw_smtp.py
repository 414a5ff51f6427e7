"""An SMTP client that sends exactly the bytes it is given (smtplib rewrites line endings), from
any loopback source address (Linux routes all of 127.0.0.0/8 to lo: one host, many clients)."""

import base64
import socket


class RawSession:
    def __init__(self, port: int, *, source: str = "127.0.0.1") -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0))
        self.replies = self.sock.makefile("rb")
        self.greeting = self.reply()

    def reply(self) -> bytes:
        lines = [self.replies.readline()]
        while lines[-1][3:4] == b"-":
            lines.append(self.replies.readline())
        return b"".join(lines)

    def send(self, data: bytes) -> bytes:
        self.sock.sendall(data)
        return self.reply()

    def auth_plain(self, secret: str, *, user: str = "apikey") -> bytes:
        assert self.send(b"EHLO client.example\r\n").startswith(b"250")
        return self.send(b"AUTH PLAIN " + base64.b64encode(f"\0{user}\0{secret}".encode()) + b"\r\n")

    def close(self) -> None:
        self.replies.close()
        self.sock.close()
