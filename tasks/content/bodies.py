"""The body store: raw response bodies (as received, before content decoding), zstd-compressed,
named by their hash, through Django's storage API (``STORAGES["bodies"]``).

Reads ``BODY_MAX_BYTES`` and ``BODY_ZSTD_LEVEL``. A body is stored under
``<job>/<sha[:2]>/<sha256 of the raw bytes>.zst``: identical bodies of one job are stored
once, and a job's bodies share one prefix, so deleting a job deletes them whatever other jobs
hold. The worker writes the body before the page's transaction, so a committed page always
has its body; a worker killed between the two leaves a body no page names, which the job's
deletion removes with the rest. On the filesystem a body is written to a temporary file and
renamed into place, so a reader (or a redelivered task asking whether it exists) never sees
half of one; on S3-compatible storage a PUT is atomic by itself.

The storage is the local filesystem under ``CRAWL_DATA_DIR/bodies`` by default and an
S3-compatible bucket when ``BODY_STORE=s3://bucket/prefix`` (``crawlplatform/settings.py``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from pathlib import Path

import zstandard
from django.core.files.base import ContentFile
from django.core.files.storage import FileSystemStorage, Storage, storages

from tasks.defaults import setting

_local = threading.local()  # zstd contexts are not thread-safe: one pair per thread


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
    """Store ``raw`` for the job (once per identical body); returns its name in the store."""
    name = name_for(job_id, raw)
    store = storage()
    if isinstance(store, BodyFileStorage):
        store.keep(name, raw)
    elif not store.exists(name):
        store.save(name, ContentFile(_compressor().compress(raw)))
    return name


def get(name: str) -> bytes:
    """The raw body stored under ``name``, byte for byte."""
    with storage().open(name, "rb") as blob:
        return _decompressor().decompress(blob.read())


def text(name: str, http: dict, limit: int) -> tuple[str, bytes]:
    """A stored HTML body as the parser saw it: (decoded text, decoded bytes)."""
    from w3lib.encoding import html_to_unicode

    from tasks.fetch.fetching import decode

    headers = {k.lower(): v for k, v in (http or {}).get("response", [])}
    body = decode(get(name), headers.get("content-encoding", ""), limit)
    return html_to_unicode(headers.get("content-type", ""), body)[1], body


def delete_job(job_id: int) -> int:
    """Delete every body the job stored; returns how many. Lists one directory at a time."""
    store = storage()
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
    """The filesystem store: a body appears whole or not at all (temporary file, rename)."""

    def __init__(self, **options) -> None:
        options.setdefault("allow_overwrite", True)  # same name, same bytes: no renaming
        super().__init__(**options)

    def keep(self, name: str, raw: bytes) -> None:
        """``raw`` compressed under ``name`` unless a body is there already: the worker's
        path, a name of ``name_for`` (no user's), so without ``Storage.save``'s validation and
        renaming, which cost as much as the compression."""
        full = os.path.join(self.location, name)
        if not os.path.lexists(full):
            self._write(full, [_compressor().compress(raw)])

    def _save(self, name: str, content) -> str:
        self._write(self.path(name), content.chunks())
        return name

    @staticmethod
    def _write(full: str, chunks) -> None:
        # Unique per process and thread: two workers writing the same body each write their
        # own file and rename it over the other's (same bytes).
        head, tail = os.path.split(full)
        temporary = os.path.join(head, f".part-{os.getpid()}-{threading.get_ident()}-{tail}")
        try:
            fd = os.open(temporary, _CREATE, 0o644)
        except FileNotFoundError:  # the shard's first body
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


_CREATE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
