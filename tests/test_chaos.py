"""The chaos suite (``tests/chaos.py``) at a reduced size: 300 pages, 3 worker processes, on
Redis as the broker, and its worker-kill and broker-kill scenarios on RabbitMQ.

Run it at full size by hand: ``.venv/bin/python -m tests.chaos`` (see docs/reliability.md).
"""

from __future__ import annotations

import pytest

from tests.chaos import PG_BIN, RabbitServer, scenario, table

pytestmark = pytest.mark.django_db(transaction=True)

ON_REDIS = ["kill", "term", "redis", "postgres", "pause", "redis-cli", "postgres-cli"]
ON_RABBITMQ = ["kill", "rabbitmq"]


@pytest.mark.parametrize(
    ("name", "broker"),
    [(n, "redis") for n in ON_REDIS] + [(n, "rabbitmq") for n in ON_RABBITMQ],
)
def test_crawl_survives(name, broker, worker_env):
    if name.startswith("postgres") and not (PG_BIN / "initdb").exists():
        pytest.skip(f"no PostgreSQL server binaries in {PG_BIN}")
    if broker == "rabbitmq" and not RabbitServer.BIN.exists():
        pytest.skip(f"no RabbitMQ server at {RabbitServer.BIN}")
    result = scenario(name, pages=300, site_delay=0.5, env=worker_env, broker=broker)
    print("\n" + table([result]))
    assert result.passed, table([result])
