"""The readiness check: will mailbox providers' sender rules (Gmail, Yahoo and Microsoft since 2024)
accept a domain's mail? One family, in messaging because it needs what only messaging knows (the way
mail leaves, the complaint rate): `dns_checks.py` asks DNS (SPF, DKIM, DMARC, alignment, reports,
PTR), `check.py` puts the checks together with the complaint rate and stores the result as the
domain's last (`DomainReadiness`, which the domains console shows through `domains.selectors`).
"""
