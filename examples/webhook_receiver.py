"""A webhook receiver for a developer's machine: verifies each request's signature, prints one line per event.

    .venv/bin/python examples/webhook_receiver.py --port 9000 --secret whsec_…

The secret is the one `manage.py create_webhook` printed. A request whose signature does not verify (another
secret, a body changed on the way, a timestamp more than 5 minutes off) gets 400 and is not printed. This is
what an application's own endpoint does, with the `standardwebhooks` library the service signs with
(docs/webhooks.md); answer 2xx quickly, and treat `webhook-id` as the key that makes a retried event a repeat.
"""

import argparse
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

MAX_BODY = 1024 * 1024  # the service's events are a few KB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--secret", required=True, help="the endpoint's whsec_… signing secret")
    args = parser.parse_args()
    verifier = Webhook(args.secret)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's hook
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 < length <= MAX_BODY:
                self._answer(400)
                return
            body = self.rfile.read(length)
            try:
                verifier.verify(body, {name.lower(): value for name, value in self.headers.items()})
            except WebhookVerificationError:
                self._answer(400)
                return
            event = json.loads(body)
            data = event["data"]
            recipient = data.get("recipient") or ",".join(data.get("to", []))
            print(event["type"], self.headers["webhook-id"], data["id"], recipient, data.get("status", ""), flush=True)
            self._answer(204)

        def _answer(self, status: int) -> None:
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's signature
            pass  # one line per event above, not one per request

    print(f"listening on http://127.0.0.1:{args.port}/", flush=True)
    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
