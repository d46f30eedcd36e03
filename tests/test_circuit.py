"""The per-host circuit breaker in real Redis: opens on host-level failures in a row, lets one
probe through after its cooldown, closes when the host answers."""

from __future__ import annotations

import time

from tasks.fetch import circuit


def fail(n: int = 1, reason: str = "connection refused") -> bool:
    opened = False
    for _ in range(n):
        opened = circuit.record(1, "h", failed=True, reason=reason) or opened
    return opened


def test_a_burst_of_failures_shorter_than_the_span_does_not_open(redis, monkeypatch):
    monkeypatch.setenv("CRAWL_CIRCUIT_MIN_SPAN_S", "0.5")
    assert not fail(10)  # a server restarting for a moment
    assert circuit.check(1, "h").state == circuit.CLOSED
    time.sleep(0.5)
    assert fail()  # still failing half a second later: dead
    state = circuit.check(1, "h")
    assert (state.state, state.reason) == (circuit.OPEN, "connection refused")
    assert 25 < state.retry_in <= 30
    assert circuit.open_hosts(1, ["h", "other"]) == {"h": "connection refused"}


def test_any_answer_resets_the_count(redis, monkeypatch):
    monkeypatch.setenv("CRAWL_CIRCUIT_MIN_SPAN_S", "0")
    fail(2)
    circuit.record(1, "h", failed=False)
    assert not fail(2)
    assert fail()


def test_after_the_cooldown_one_probe_goes_through_and_its_answer_closes(redis, monkeypatch):
    monkeypatch.setenv("CRAWL_CIRCUIT_MIN_SPAN_S", "0")
    monkeypatch.setenv("CRAWL_CIRCUIT_COOLDOWN_S", "0.3")
    assert fail(3)
    assert circuit.check(1, "h").state == circuit.OPEN
    time.sleep(0.35)
    assert circuit.check(1, "h").state == circuit.PROBE
    assert circuit.check(1, "h").state == circuit.WAIT  # one probe at a time
    assert circuit.check(1, "h", probe=False).state == circuit.WAIT
    circuit.record(1, "h", failed=False)
    assert circuit.check(1, "h").state == circuit.CLOSED


def test_a_failed_probe_opens_the_circuit_again(redis, monkeypatch):
    monkeypatch.setenv("CRAWL_CIRCUIT_MIN_SPAN_S", "0")
    monkeypatch.setenv("CRAWL_CIRCUIT_COOLDOWN_S", "0.3")
    fail(3)
    time.sleep(0.35)
    assert circuit.check(1, "h").state == circuit.PROBE
    assert fail(1, "name does not resolve")
    state = circuit.check(1, "h")
    assert (state.state, state.reason) == (circuit.OPEN, "name does not resolve")


def test_jobs_and_hosts_have_their_own_circuits(redis, monkeypatch):
    monkeypatch.setenv("CRAWL_CIRCUIT_MIN_SPAN_S", "0")
    fail(3)
    assert circuit.check(2, "h").state == circuit.CLOSED
    assert circuit.check(1, "other").state == circuit.CLOSED


def test_a_definitive_failure_opens_a_never_answered_hosts_circuit_at_once(redis):
    assert circuit.record(1, "h", failed=True, reason="connection refused", definitive=True)
    state = circuit.check(1, "h")
    assert (state.state, state.reason) == (circuit.OPEN, "connection refused")
    assert circuit.open_hosts(1, ["h"]) == {"h": "connection refused"}


def test_open_hosts_names_the_open_ones_of_many_with_their_reasons(redis):
    hosts = [f"h{n}" for n in range(500)]
    for host, reason in (("h3", "connection refused"), ("h499", "dns"), ("h250", "")):
        assert circuit.record(1, host, failed=True, reason=reason, definitive=True)
    circuit.record(1, "h7", failed=True, reason="connect timeout")  # failing, not open
    expected = {"h3": "connection refused", "h250": "", "h499": "dns"}
    assert circuit.open_hosts(1, hosts) == expected
    assert circuit.open_hosts(2, hosts) == {}  # another job's circuits are its own
    assert circuit.open_hosts(1, []) == {}


def test_a_host_that_answered_keeps_its_patience(redis):
    circuit.answered(1, "h")
    circuit.record(1, "g", failed=False, http_answer=True)  # the same mark, with a success
    for host in ("h", "g"):
        for _ in range(5):  # a restart: refused again and again, within CIRCUIT_MIN_SPAN_S
            assert not circuit.record(1, host, failed=True, reason="connection refused",
                                      definitive=True)  # fmt: skip
        assert circuit.check(1, host).state == circuit.CLOSED
    circuit.record(1, "f", failed=False)  # a success that was no answer marks nothing
    assert circuit.record(1, "f", failed=True, reason="connection refused", definitive=True)
    assert circuit.check(2, "h").state == circuit.CLOSED  # another job: never answered there
    assert circuit.record(2, "h", failed=True, reason="connection refused", definitive=True)


def test_a_failure_that_is_not_definitive_keeps_the_span_rule(redis):
    assert not fail(5, "connect timeout")  # no definitive flag: a timeout may be a slow host
    assert circuit.check(1, "h").state == circuit.CLOSED
