"""Where the bench finds PostgreSQL and Redis: the environment first, else .env, as every other command."""

import pytest

from bench.stack import BenchError, services_from_environment


def test_the_bench_reads_the_servers_from_env_file_when_the_environment_has_none(monkeypatch, tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text(
        "DEBUG=true\nDATABASE_URL=postgres://postgres@db.internal:5432/mail\nREDIS_URL=redis://r:6379/3\n"
    )
    monkeypatch.setenv("MAILSERVICE_ENV_FILE", str(env_file))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)

    services = services_from_environment(None)

    assert services.database_url == "postgres://postgres@db.internal:5432/mail_run"
    assert services.redis_url == "redis://r:6379/3"


def test_the_environment_wins_over_env_file(monkeypatch, tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text("DATABASE_URL=postgres://postgres@db.internal:5432/mail\n")
    monkeypatch.setenv("MAILSERVICE_ENV_FILE", str(env_file))
    monkeypatch.setenv("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/local")
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6379/0")

    assert services_from_environment("chosen").database_url == "postgres://postgres@127.0.0.1:5432/chosen"


def test_no_server_anywhere_is_a_one_line_error(monkeypatch, tmp_path):
    monkeypatch.setenv("MAILSERVICE_ENV_FILE", str(tmp_path / "none"))
    monkeypatch.delenv("DATABASE_URL", raising=False)

    with pytest.raises(BenchError, match=r"^set DATABASE_URL \(in the environment or \.env\)"):
        services_from_environment(None)
