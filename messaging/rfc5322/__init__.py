"""Reading and writing messages (RFC 5322 and MIME), below every channel: the inbound server, SMTP
submission, outbound delivery and webhooks all read a received message with `parsing.py`.

Nothing here imports a room of messaging (pyproject.toml's import contracts): it is plain text in,
values out, with no database and no network.
"""
