"""Run a command that ends when the process that started it ends, however that one dies.

    python crawlplatform/orphans.py PARENT_PID COMMAND [ARG ...]

Asks the kernel (Linux ``prctl(PR_SET_PDEATHSIG)``) to send the command SIGTERM when its
parent exits, even by SIGKILL, then replaces itself with the command (same process id, same
parent). If the parent is already gone by then, it exits at once. ``manage.py crawl`` starts
its workers and its private redis-server this way, so that nothing it started outlives it:
the workers stop warm, the redis-server stops. Where ``prctl`` does not exist the command
runs unguarded.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def guarded(command: list[str]) -> list[str]:
    """``command`` wrapped so that it ends with this process."""
    return [sys.executable, os.path.abspath(__file__), str(os.getpid()), *command]


def end_with(parent: int) -> bool:
    """Ask for SIGTERM when process ``parent`` (this one's parent) exits; False if it has
    already exited."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # not Linux: nothing to ask for
    return os.getppid() == parent  # else it died before the request was in place


def main(argv: list[str]) -> None:
    parent, command = int(argv[0]), argv[1:]
    if not end_with(parent):
        sys.exit(0)
    os.execvp(command[0], command)  # noqa: S606 (the supervisor's own command)


if __name__ == "__main__":
    main(sys.argv[1:])
