"""The chaos suite (``tests/chaos.py``) at a reduced size: 300 pages, 3 worker processes.

Run it at full size by hand: ``.venv/bin/python -m tests.chaos`` (see docs/reliability.md).
"""

from __future__ import annotations

import pytest

from tests.chaos import PG_BIN, scenario, table

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    "name", ["kill", "term", "redis", "postgres", "pause", "redis-cli", "postgres-cli"]
)
def test_crawl_survives(name, worker_env):
    if name.startswith("postgres") and not (PG_BIN / "initdb").exists():
        pytest.skip(f"no PostgreSQL server binaries in {PG_BIN}")
    result = scenario(name, pages=300, site_delay=0.5, env=worker_env)
    print("\n" + table([result]))
    assert result.passed, table([result])
