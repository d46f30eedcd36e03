"""The body store: raw response bodies (as received, before content decoding), zstd-compressed,
through Django's storage API (``STORAGES["bodies"]``).

Reads ``BODY_MAX_BYTES`` and ``BODY_ZSTD_LEVEL``. A job's bodies share one prefix (``<job>/``),
so deleting a job deletes them whatever other jobs hold. The worker writes the body before the
page's transaction, so a committed page always has its body; a worker killed between the two
leaves a body no page names, which the job's deletion removes with the rest.

On the filesystem (the default, ``CRAWL_DATA_DIR/bodies``) each worker thread appends the
bodies it stores for a job to a pack of its own, ``<job>/packs/<random>.zpk``: a file that is
a sequence of zstd frames, and a body's name is its pack and place in it
(``<job>/packs/<random>.zpk@<offset>+<length>``). A page costs one write, not a new file: on
a filesystem without a journal (ext4's ``nojournal``, common on virtual machines), creating a
file searches past every recently deleted inode and cost more kernel time than the rest of
the page's storage. A pack is never appended to by two threads, nor by a process that did not
open it, so an offset named by a committed page always holds its whole frame; a worker killed
mid-write leaves a torn frame at its pack's end, which no page names; a name whose bytes are
not one whole frame is an error, never another body. A pack is closed at ``PACK_MAX_BYTES``,
or once its file is deleted (``delete_job``), and a new one begun. An identical body that a
worker process kept among its last ``RECENT_BODIES`` (all jobs) is not stored again (two
threads storing it at once may each store it).

When ``BODY_STORE=s3://bucket/prefix`` (``crawlplatform/settings.py``), each distinct body is
an object of its own, ``<job>/<sha[:2]>/<sha256 of the raw bytes>.zst`` (a PUT is atomic by
itself): identical bodies of a job are stored once. Bodies stored under such names on the
filesystem by earlier versions are read as they are.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import uuid
from pathlib import Path

import zstandard
from django.core.files.base import ContentFile
from django.core.files.storage import FileSystemStorage, Storage, storages

from tasks.defaults import setting

_local = threading.local()  # zstd contexts are not thread-safe: one pair per thread
PACK_MAX_BYTES = 64 << 20  # a pack this large is closed and a new one begun
PACKS_OPEN = 4  # packs a thread keeps open (of the jobs it stored bodies for last)
RECENT_BODIES = 10_000  # per process: an identical body kept among these is not stored again


def _compressor() -> zstandard.ZstdCompressor:
    level = setting("BODY_ZSTD_LEVEL")
    found = getattr(_local, "compressor", None)
    if found is None or _local.level != level:
        found = _local.compressor = zstandard.ZstdCompressor(level=level)
        _local.level = level
    return found


def _decompressor() -> zstandard.ZstdDecompressor:
    found = getattr(_local, "decompressor", None)
    if found is None:
        found = _local.decompressor = zstandard.ZstdDecompressor()
    return found


def storage() -> Storage:
    return storages["bodies"]


def name_for(job_id: int, raw: bytes) -> str:
    digest = hashlib.sha256(raw).hexdigest()
    return f"{job_id}/{digest[:2]}/{digest}.zst"


def put(job_id: int, raw: bytes) -> str:
    """Store ``raw`` for the job (once per identical body, see above); returns its name."""
    name = name_for(job_id, raw)
    store = storage()
    if isinstance(store, BodyFileStorage):
        return store.keep(job_id, name, raw)
    if not store.exists(name):
        store.save(name, ContentFile(_compressor().compress(raw)))
    return name


def get(name: str) -> bytes:
    """The raw body stored under ``name``, byte for byte; ValueError if the place a pack's
    name gives does not hold one whole frame."""
    pack, at, place = name.rpartition("@")
    with storage().open(pack if at else name, "rb") as blob:
        if not at:
            return _decompressor().decompress(blob.read())
        offset, length = map(int, place.split("+"))
        blob.seek(offset)
        frame = blob.read(length)
    reader = _decompressor().decompressobj()
    try:
        raw = reader.decompress(frame)
    except zstandard.ZstdError:
        raw = None
    if raw is None or len(frame) != length or not reader.eof or reader.unused_data:
        raise ValueError(f"body {name}: not one whole zstd frame there")
    return raw


def file_of(name: str) -> str:
    """The name of the file in the store that holds body ``name`` (a pack holds many)."""
    return name.rpartition("@")[0] or name


def text(name: str, http: dict, limit: int) -> tuple[str, bytes]:
    """A stored HTML body as the parser saw it: (decoded text, decoded bytes)."""
    from w3lib.encoding import html_to_unicode

    from tasks.fetch.fetching import decode

    headers = {k.lower(): v for k, v in (http or {}).get("response", [])}
    body = decode(get(name), headers.get("content-encoding", ""), limit)
    return html_to_unicode(headers.get("content-type", ""), body)[1], body


def delete_job(job_id: int) -> int:
    """Delete every body the job stored; returns how many files (on the filesystem, a pack
    holds many bodies) or objects. Lists one directory at a time."""
    store = storage()
    if isinstance(store, BodyFileStorage):
        store.forget(job_id)
    count = 0
    prefix = f"{job_id}"
    try:
        shards, loose = store.listdir(prefix)
    except FileNotFoundError:
        return 0
    for shard in shards:
        for name in store.listdir(f"{prefix}/{shard}")[1]:
            store.delete(f"{prefix}/{shard}/{name}")
            count += 1
    for name in loose:
        store.delete(f"{prefix}/{name}")
    if isinstance(store, FileSystemStorage):  # empty directories are left on a filesystem
        for shard in shards:
            _rmdir(Path(store.path(f"{prefix}/{shard}")))
        _rmdir(Path(store.path(prefix)))
    return count


def _rmdir(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass  # not empty: a body written meanwhile stays


class BodyFileStorage(FileSystemStorage):
    """The filesystem store: worker bodies appended to packs (see above); a file saved through
    the storage API (a feed) appears whole or not at all (temporary file, rename)."""

    def __init__(self, **options) -> None:
        options.setdefault("allow_overwrite", True)  # a feed written again replaces its file
        super().__init__(**options)
        self._recent: dict[tuple[int, str], str] = {}  # (job, content name) -> body name
        self._recent_lock = threading.Lock()

    def keep(self, job_id: int, key: str, raw: bytes) -> str:
        """``raw`` compressed, appended to this thread's pack of the job, unless this process
        stored the same bytes (content name ``key``) lately and their pack is still there; its
        name. The worker's path: no ``Storage.save`` validation and renaming, which cost as
        much as the compression."""
        found = self._recent.get((job_id, key))
        if found and os.path.exists(self.path(file_of(found))):
            return found
        name = self._pack(job_id).append(_compressor().compress(raw))
        with self._recent_lock:
            self._recent[(job_id, key)] = name
            while len(self._recent) > RECENT_BODIES:
                del self._recent[next(iter(self._recent))]
        return name

    def forget(self, job_id: int) -> None:
        """Before the job's bodies are deleted: this thread's pack of it is closed, and what
        this process remembers of its bodies is dropped (another thread's pack of it is closed
        at its next body, its file being gone)."""
        packs = getattr(_local, "packs", {})
        if (found := packs.pop((self.location, job_id), None)) is not None:
            found.close()
        with self._recent_lock:
            self._recent = {k: v for k, v in self._recent.items() if k[0] != job_id}

    def _pack(self, job_id: int) -> _Pack:
        """This thread's open pack of the job, or a new one. The thread's other packs are
        looked at too: one whose file was deleted (its job's) is closed, so that its space is
        freed at this thread's next body of any job."""
        packs = _local.__dict__.setdefault("packs", {})
        for other in [k for k, pack in packs.items() if not pack.usable()]:
            packs.pop(other).close()
        key = (self.location, job_id)
        found = packs.pop(key, None) or _Pack(self, job_id)
        packs[key] = found  # the most recent last
        while len(packs) > PACKS_OPEN:
            packs.pop(next(iter(packs))).close()
        return found

    def _save(self, name: str, content) -> str:
        self._write(self.path(name), content.chunks())
        return name

    @staticmethod
    def _write(full: str, chunks) -> None:
        # Unique per process and thread: two workers writing the same file each write their
        # own and rename it over the other's.
        head, tail = os.path.split(full)
        temporary = os.path.join(head, f".part-{os.getpid()}-{threading.get_ident()}-{tail}")
        try:
            fd = os.open(temporary, _CREATE, 0o644)
        except FileNotFoundError:  # the directory's first file
            os.makedirs(head, exist_ok=True)
            fd = os.open(temporary, _CREATE, 0o644)
        try:
            with os.fdopen(fd, "wb") as out:
                for chunk in chunks:
                    out.write(chunk)
            os.replace(temporary, full)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            raise


class _Pack:
    """One thread's open pack of one job: a new file, appended to by this thread alone."""

    def __init__(self, store: BodyFileStorage, job_id: int) -> None:
        self.name = f"{job_id}/packs/{uuid.uuid4().hex}.zpk"
        path = store.path(self.name)
        try:
            self.fd = os.open(path, _APPEND, 0o644)
        except FileNotFoundError:  # the job's first pack
            os.makedirs(os.path.dirname(path), exist_ok=True)
            self.fd = os.open(path, _APPEND, 0o644)
        self.pid, self.size = os.getpid(), 0

    def usable(self) -> bool:
        """Open in this process (not a forked parent's), below ``PACK_MAX_BYTES``, and its
        file not deleted."""
        return (
            self.fd >= 0
            and self.pid == os.getpid()
            and self.size < PACK_MAX_BYTES
            and os.fstat(self.fd).st_nlink > 0
        )

    def append(self, frame: bytes) -> str:
        """Write ``frame`` whole at the pack's end; its body name. A write that fails closes
        the pack (where its end is is no longer known): the next body begins another."""
        start, view = self.size, memoryview(frame)
        try:
            while view:
                view = view[os.write(self.fd, view):]
            self.size += len(frame)
        except BaseException:
            self.close()
            raise
        return f"{self.name}@{start}+{len(frame)}"

    def close(self) -> None:
        """Close the file (again: nothing)."""
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:  # a thread that ends drops its packs with its locals
        self.close()


_CREATE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
_APPEND = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
