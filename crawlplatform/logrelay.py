"""What a process writes outside logging, as JSON lines: the relay of ``LOG_FORMAT=json``.

Under ``LOG_FORMAT=json`` a process's standard error (and a service's standard output) is a
pipe to a small relay process (``capture``), which passes every JSON object line through as
it is and wraps everything else into one: Celery's banners and shutdown messages, a C
library's or a browser's complaints, a traceback printed by a library. The raw lines that one
read brings at once (one ``print``, a banner, a traceback) become one object, with the text in
``message``, ``logger`` ``stdout`` or ``stderr`` and ``level`` ``INFO`` or ``WARNING``.

The relay is a separate process, not a thread: it needs no lock a fork could break, costs the
supervisor's forked workers nothing, and outlives a crash of the process it serves, so what a
dying process writes last (a fault handler's dump, ``os._exit`` after a traceback) is still
written. It ends when the last writer of its pipes has closed them: the process, and its
children that inherited them. A descriptor on a terminal or on ``/dev/null`` is left alone.

This module imports the standard library only: the relay runs it by path (``python -I -S``),
without the platform's imports.
"""

from __future__ import annotations

import json
import os
import select
import selectors
import signal
import stat
import subprocess
import sys
import time

NAMES = {1: "stdout", 2: "stderr"}
LEVELS = {"stdout": "INFO", "stderr": "WARNING"}
# A line without its newline is passed on once it is this long (a writer that never ends one).
MAX_LINE = 1 << 20
# A pipe takes a write of up to PIPE_BUF bytes whole; a longer one, of a line several
# processes write (a prefork pool's children share the pipe), another's write may cut into.
# A writer sends such a line as pieces (``pieces``), each a line of its own written at once:
# PIECE, the writer's pid, 1 on the last piece (else 0), the bytes; the relay puts a writer's
# pieces together again (``Stream``).
PIECE = b"\x1e"
PIECE_BYTES = select.PIPE_BUF - 32
# The pipe each relayed descriptor points to, as "device:inode", per descriptor: a process
# that inherits them (a fork, a started program) sees that they are relayed already.
MARK = "CRAWL_LOG_RELAY_{fd}"


def timestamp(created: float) -> str:
    """``2026-05-04T13:20:58.447Z``: ISO 8601 in UTC, to the millisecond (log lines' time)."""
    millis = int(created * 1000) % 1000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{millis:03d}Z"


def pieces(line: bytes) -> list[bytes]:
    """``line`` (no newline) as the pieces a writer sends of it, each under PIPE_BUF bytes."""
    head = PIECE + str(os.getpid()).encode()
    cut = range(0, len(line), PIECE_BYTES)
    return [head + (b":1:" if start + PIECE_BYTES >= len(line) else b":0:")
            + line[start : start + PIECE_BYTES] + b"\n" for start in cut]  # fmt: skip


def is_json_object(line: bytes) -> bool:
    if not line.startswith(b"{"):
        return False
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def wrap(raw: list[bytes], stream: str, process: str) -> bytes:
    """Raw lines as one JSON object line; nothing for blank ones."""
    text = b"\n".join(raw).decode("utf-8", "replace").strip("\r\n")
    if not text.strip():
        return b""
    line = {"timestamp": timestamp(time.time()), "level": LEVELS.get(stream, "INFO"),
            "logger": stream, "message": text, "process": process}  # fmt: skip
    return json.dumps(line).encode() + b"\n"


# How a log line of ours starts (``crawlplatform/logs.py``): found after text a writer left
# without its newline (a progress bar's ``\r``), the line is passed on as its own.
LOG_LINE_START = b'{"timestamp": "'


def lines(data: bytes, stream: str, process: str) -> bytes:
    """``data`` (whole lines) with every line a JSON object: JSON object lines as they are,
    each run of other lines wrapped into one."""
    out: list[bytes] = []
    raw: list[bytes] = []
    for line in data.split(b"\n"):
        line = line.rstrip(b"\r")
        start = 0 if line.startswith(b"{") else line.find(LOG_LINE_START)
        if start > 0 and is_json_object(line[start:]):
            raw.append(line[:start])
            line = line[start:]
        if is_json_object(line):
            if raw:
                out.append(wrap(raw, stream, process))
                raw = []
            out.append(line + b"\n")
        else:
            raw.append(line)
    if raw:
        out.append(wrap(raw, stream, process))
    return b"".join(out)


class Stream:
    """One relayed descriptor: reads end at any byte, lines are passed on whole."""

    def __init__(self, out: int, name: str, process: str) -> None:
        self.out, self.name, self.process = out, name, process
        self.pending = b""
        self.pieces: dict[bytes, list[bytes]] = {}  # by writer: the pieces of its line so far

    def feed(self, chunk: bytes) -> None:
        data = self.pending + chunk
        cut = data.rfind(b"\n") + 1
        if not cut and len(data) < MAX_LINE:
            self.pending = data
            return
        cut = cut or len(data)
        self.pending = data[cut:]
        self.write(data[:cut].removesuffix(b"\n"))

    def close(self) -> None:
        if self.pending:
            self.write(self.pending)
            self.pending = b""
        for parts in self.pieces.values():  # a writer that died midway: what it sent
            self.write(b"".join(parts))
        self.pieces.clear()

    def joined(self, data: bytes) -> bytes:
        """``data`` (whole lines) with each writer's pieces put together into its line, in
        the place of its last piece; a line not yet whole waits for its next pieces."""
        kept = []
        for line in data.split(b"\n"):
            cut = line.find(PIECE)
            if cut > 0:  # after text a writer left without its newline (a progress bar's)
                kept.append(line[:cut])
                line = line[cut:]
            writer, _, rest = line[1:].partition(b":")
            last, _, rest = rest.partition(b":")
            if not (line.startswith(PIECE) and writer.isdigit() and last in (b"0", b"1")):
                kept.append(line)
                continue
            self.pieces.setdefault(writer, []).append(rest)
            if last == b"1":
                kept.append(b"".join(self.pieces.pop(writer)))
        return b"\n".join(kept)

    def write(self, data: bytes) -> None:
        if PIECE in data:
            data = self.joined(data)
        out = memoryview(lines(data, self.name, self.process))
        while out:
            try:
                out = out[os.write(self.out, out) :]
            except BrokenPipeError:  # nobody reads any more: what comes is dropped
                return
            except InterruptedError:
                continue


def relay(streams: dict[int, Stream]) -> None:
    """Pass on what arrives on each descriptor of ``streams`` until all of them are closed."""
    chosen = selectors.DefaultSelector()
    for fd, stream in streams.items():
        chosen.register(fd, selectors.EVENT_READ, stream)
    while chosen.get_map():
        for key, _ in chosen.select():
            chunk = os.read(key.fd, 1 << 16)
            if chunk:
                key.data.feed(chunk)
            else:
                key.data.close()
                chosen.unregister(key.fd)
                os.close(key.fd)


def _mark(fd: int) -> str:
    found = os.fstat(fd)
    return f"{found.st_dev}:{found.st_ino}"


def to_relay(fd: int) -> bool:
    """Whether ``fd`` goes to a relay (which puts pieces together)."""
    try:
        return os.environ.get(MARK.format(fd=fd)) == _mark(fd)
    except OSError:
        return False


def relayed(fd: int) -> bool:
    """Whether ``fd`` goes to a relay already, or is a terminal or ``/dev/null`` (no relay:
    a person reads a terminal, nobody reads ``/dev/null``), or is closed."""
    try:
        found = os.fstat(fd)
    except OSError:
        return True
    if os.isatty(fd) or os.environ.get(MARK.format(fd=fd)) == _mark(fd):
        return True
    null = os.stat(os.devnull)
    return stat.S_ISCHR(found.st_mode) and found.st_rdev == null.st_rdev


def program() -> str:
    """This program's name: ``manage.py``, ``gunicorn``, ``celery`` (of ``python -m celery``)."""
    path = sys.argv[0] if sys.argv and sys.argv[0] else "python"
    name = os.path.basename(path)
    return os.path.basename(os.path.dirname(path)) if name == "__main__.py" else name


def capture(*fds: int, process: str = "") -> None:
    """Send descriptors ``fds`` (1, 2) through a relay process that writes where they wrote.

    Done once for a descriptor however often it is asked (``relayed``); ``process`` names the
    writer in wrapped lines (default: the program's name)."""
    fds = tuple(fd for fd in fds if not relayed(fd))
    if not fds:
        return
    process = process or program()
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    pipes = {fd: os.pipe() for fd in fds}
    outs = {fd: os.dup(fd) for fd in fds}
    spec = [f"{pipes[fd][0]}:{outs[fd]}:{NAMES.get(fd, f'fd{fd}')}" for fd in fds]
    keep = [n for fd in fds for n in (pipes[fd][0], outs[fd])]
    try:
        subprocess.Popen(  # noqa: S603 (this interpreter, this file, fixed arguments)
            [sys.executable, "-I", "-S", os.path.abspath(__file__), process, *spec],
            pass_fds=keep, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True,  # a terminal's Ctrl-C is not for it
        )  # fmt: skip
    finally:
        for n in keep:
            os.close(n)
    for fd, (_, write) in pipes.items():
        os.dup2(write, fd)
        os.close(write)
        os.environ[MARK.format(fd=fd)] = _mark(fd)


def main(argv: list[str]) -> None:
    """``logrelay.py PROCESS IN:OUT:STREAM ...``."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # it ends when its writers are gone, not before
    process, specs = argv[0], argv[1:]
    streams = {}
    for spec in specs:
        source, out, name = spec.split(":", 2)
        streams[int(source)] = Stream(int(out), name, process)
    relay(streams)


if __name__ == "__main__":
    main(sys.argv[1:])
