"""The tables the references write, created in the bench's database before their servers start.

`reference_message` has the columns of a stored message (messaging.Message as of issue 32), written
here rather than derived from the product's model so the reference stays fixed when the model changes;
its primary key and unique public id are the indexes every stored message pays for.
"""

import psycopg

MESSAGE_TABLE = """
CREATE TABLE IF NOT EXISTS reference_message (
    id bigserial PRIMARY KEY,
    public_id varchar(40) NOT NULL UNIQUE,
    domain_id bigint NOT NULL,
    direction varchar(8) NOT NULL,
    status varchar(10) NOT NULL,
    from_address text NOT NULL,
    "to" jsonb NOT NULL,
    cc jsonb NOT NULL,
    bcc jsonb NOT NULL,
    reply_to jsonb NOT NULL,
    subject text NOT NULL,
    text text NULL,
    html text NULL,
    template_id bigint NULL,
    template_version integer NULL,
    is_test boolean NOT NULL,
    attempts integer NOT NULL,
    next_attempt_at timestamptz NULL,
    lease_expires_at timestamptz NULL,
    last_error text NOT NULL,
    message_id_header varchar(255) NOT NULL,
    envelope_from text NOT NULL,
    raw bytea NULL,
    envelope_recipients jsonb NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL
)
"""

INBOUND_TABLE = """
CREATE TABLE IF NOT EXISTS reference_inbound (
    id bigserial PRIMARY KEY,
    envelope_from text NOT NULL,
    recipients jsonb NOT NULL,
    raw bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
)
"""


def create_tables(database_url: str) -> None:
    """Both reference tables, empty, in the database at `database_url`."""
    with psycopg.connect(database_url, autocommit=True) as connection:
        for statement in (MESSAGE_TABLE, INBOUND_TABLE):
            connection.execute(statement)
        connection.execute("TRUNCATE reference_message, reference_inbound")
