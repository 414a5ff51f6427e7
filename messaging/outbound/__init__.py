"""Outbound delivery, one room: claiming accepted messages and handing them to a transport exactly once
(dispatch.py, the workers' loop.py, fair turns in fairness.py), the relay's shared limits and the held
destinations (relay_limits.py, destinations.py), rendering and signing what goes on the wire (mime.py,
submitted.py, dkim.py), the transports and their Envelope (transports.py), and the sandbox's simulated
outcomes (sandbox.py).

Nothing here imports messaging.inbound or messaging.submission (pyproject.toml's import contracts):
SMTP submission hands its stored message to this room, never the other way round.
"""
