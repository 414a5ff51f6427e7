"""Reading and writing messages (RFC 5322 and MIME), below every channel that does either:

- `parsing.py` reads a message as it arrived on the wire (the inbound server, selectors, webhooks);
- `rendering.py` writes an outbound message from its stored fields (dispatch, the console's preview);
- `submitted.py` reads the header block of a message submitted over SMTP and writes it as dispatch
  sends it; `submitted_headers.py` reads its fields once at DATA (the submission server).

Nothing here imports a room of messaging (pyproject.toml's import contracts) and nothing opens a
connection: bytes or a stored message in, values or bytes out. Each module says in its docstring
what it does with malformed input.
"""
