"""A threads-pool worker gives the free heap its threads leave back to the system."""

from __future__ import annotations

import threading

import psutil
import pytest

from tasks.worker import heap

MB = 1 << 20


@pytest.mark.skipif(not heap.trim(), reason="the C library has no malloc_trim (not glibc)")
def test_trim_gives_back_what_a_threads_freed_allocations_left_in_its_arena():
    process = psutil.Process()
    kept: list[bytes] = []

    def work() -> None:
        # 60 MB in 64 KB blocks from this thread's arena; all freed but the last, which keeps
        # the arena's top in use, so glibc keeps what lies below it
        blocks = [b"\1" * (64 << 10) for _ in range(960)]  # written: resident
        kept.append(blocks[-1])
        del blocks

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    before = process.memory_info().rss
    assert heap.trim()
    after = process.memory_info().rss
    assert before - after >= 40 * MB, (before / MB, after / MB)


def test_a_threads_pool_worker_trims_on_its_loop_at_the_configured_pace():
    class Timer:
        def __init__(self) -> None:
            self.calls: list[tuple[float, object]] = []

        def call_repeatedly(self, every: float, fn) -> None:
            self.calls.append((every, fn))

    consumer = type("Consumer", (), {"timer": Timer()})()
    heap.install(consumer, 0)  # 0: never
    assert consumer.timer.calls == []
    heap.install(consumer, 30.0)
    expected = [(30.0, heap.trim)] if heap.trim() else []
    assert consumer.timer.calls == expected
