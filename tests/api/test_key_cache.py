"""apikeys/cache.py: a key is looked up once per version of the keys, and a change starts a new version."""

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext, override_settings

from apikeys import cache as key_cache
from apikeys.models import ApiKey
from apikeys.services import apikey_authenticate, apikey_revoke
from domains.services import sending_pause
from mailservice.ratelimit import shared_redis


def _queries(raw_key: str, version: bytes | None) -> tuple[ApiKey | None, int]:
    with CaptureQueriesContext(connection) as queries:
        api_key = apikey_authenticate(raw_key=raw_key, keys_version=version)
    return api_key, len(queries)


@pytest.mark.django_db
@override_settings(MAILSERVICE_API_KEY_CACHE_SECONDS=10.0)  # tests/settings.py turns the cache off
def test_a_key_is_looked_up_once_per_version(full_key):
    first, first_queries = _queries(full_key.secret, b"v1")
    again, again_queries = _queries(full_key.secret, b"v1")
    newer, newer_queries = _queries(full_key.secret, b"v2")

    assert first == again == newer == full_key
    assert (first_queries, again_queries, newer_queries) == (2, 0, 1)  # the first also records last_used_at


@pytest.mark.django_db
@pytest.mark.parametrize("version", [None, b""], ids=["not-read", "none-yet"])
@override_settings(MAILSERVICE_API_KEY_CACHE_SECONDS=10.0)
def test_without_a_version_every_request_looks_the_key_up(full_key, version):
    _queries(full_key.secret, version)
    _, queries = _queries(full_key.secret, version)
    assert queries == 1


@pytest.mark.django_db
@override_settings(MAILSERVICE_API_KEY_CACHE_SECONDS=10.0)
def test_a_cached_key_still_needs_its_secret(full_key):
    _queries(full_key.secret, b"v1")
    wrong = full_key.secret[:-4] + "abcd"
    assert apikey_authenticate(raw_key=wrong, keys_version=b"v1") is None


@pytest.mark.skipif(not settings.REDIS_URL, reason="the version lives in Redis")
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "change",
    [
        lambda key: apikey_revoke(api_key=key),
        lambda key: sending_pause(domain=key.domain, actor="ops"),
    ],
    ids=["revocation", "domain-pause"],
)
def test_a_committed_change_to_a_key_or_its_domain_sets_a_new_version(full_key, change):
    key_cache.version_start()
    before = shared_redis().get(key_cache.VERSION_KEY)
    change(full_key)
    after = shared_redis().get(key_cache.VERSION_KEY)
    assert before and after and before != after
