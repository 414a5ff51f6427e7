"""Outbound delivery, one room: accepted messages handed to a transport exactly once. From the top:

- the workers' `loop.py` wakes on each committed send; `dispatch.py` claims a batch (fair turns
  between domains: `fairness.py`) and records what each message came to; `lanes.py` sends direct
  delivery's batch in a lane per destination; `attempt.py` is one message's attempt, `outcomes.py` what
  it came to and its fenced record, `leases.py` the batch's lease;
- `transports.py` builds the transport EMAIL_URL names, above the three ways mail leaves: an SMTP relay
  (`relay.py`), the recipients' own MX hosts (`direct/`), or a file outbox (`outbox.py`); both SMTP
  paths open sessions of `smtp_client.py`;
- the limits both paths share: `fleet_limits.py` (rate and connection cap per destination, the relay
  being one, shared by the fleet through Redis), `domain_holds.py` (recipient domains held after
  deferrals), `provider_rules.py` (which replies mean "slow down"); `overview.py` reads them for the
  console;
- what goes on the wire: what messaging/rfc5322/ renders, signed by `dkim.py`; the sandbox's simulated
  outcomes (`sandbox.py`); the values every transport takes and answers, and the envelope of a
  message (`envelope.py`).

Nothing here imports messaging.inbound or messaging.submission (pyproject.toml's import contracts):
SMTP submission hands its stored message to this room, never the other way round.
"""
