"""The kernel: what every app may import (errors, addresses, ids, locks, encryption, TLS, metrics, the
dispatchers' doorbell, the console's base ModelAdmin). It imports no app.

The layer rule, from the top: config -> the HTTP API (mailservice.api, above every app) -> webhooks ->
messaging -> apikeys | templates_app -> domains -> this kernel. A module imports only from its own layer
or below; `make lint` enforces it with import-linter (pyproject.toml), and docs/architecture.md says why.
"""
