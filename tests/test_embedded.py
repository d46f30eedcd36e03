"""The embedded default's private redis-server: started, answering, and stopped at once."""

from __future__ import annotations

import redis

from crawlplatform.embedded import EmbeddedRedis


def test_the_private_redis_server_stops_at_once_not_at_its_next_timer_tick(tmp_path):
    server = EmbeddedRedis(tmp_path)
    server.start()
    process = server.process
    assert redis.Redis(unix_socket_path=str(server.socket)).ping()
    server.stop()
    assert process.returncode == 0 and server.process is None
    assert not server.socket.exists()
    assert "Received SIGTERM" not in (tmp_path / "redis.log").read_text()  # it waits for cron


def test_a_private_redis_server_that_does_not_answer_is_terminated(tmp_path):
    server = EmbeddedRedis(tmp_path)
    server.start()
    process = server.process
    server.socket.unlink()  # SHUTDOWN cannot reach it: the signal ends it
    server.stop()
    assert process.returncode == 0
    assert "Received SIGTERM" in (tmp_path / "redis.log").read_text()
