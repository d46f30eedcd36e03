"""Where a feed's bytes go, as Scrapy 2.19's feed storages put them
(``scrapy/extensions/feedexport.py``), and the compression its ``postprocessing`` plugins apply
(``scrapy/extensions/postprocessing.py``).

* A filesystem path, or a ``file://`` URI: directories are made as needed; with ``overwrite``
  the file is replaced (written beside its name and renamed when whole, so a reader never
  sees half of one), without it the feed is appended to what the file holds (Scrapy's default
  for files: a second JSON or XML document after the first).
* ``s3://BUCKET/KEY``: written to a temporary file, then uploaded (one object, replaced: S3
  appends nothing, as Scrapy warns). boto3 reads the credentials: the URI's
  (``s3://KEY_ID:SECRET@BUCKET/KEY``), else the spider's ``AWS_ACCESS_KEY_ID``,
  ``AWS_SECRET_ACCESS_KEY`` and ``AWS_SESSION_TOKEN``, else its own chain (the environment of
  the process that writes, an instance role); the endpoint is the spider's
  ``AWS_ENDPOINT_URL`` or boto3's own (``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL``), the
  region ``AWS_REGION_NAME``; ``FEED_STORAGE_S3_ACL`` sets the object's ACL.

Postprocessing plugins are named by Scrapy's paths: ``GzipPlugin`` (``gzip_compresslevel``,
``gzip_mtime``, ``gzip_filename``), ``Bz2Plugin`` (``bz2_compresslevel``) and ``LZMAPlugin``
(``lzma_format``, ``lzma_check``, ``lzma_preset``, ``lzma_filters``).
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from w3lib.url import file_uri_to_path

SCRAPY_PLUGINS = "scrapy.extensions.postprocessing."
PLUGINS = ("GzipPlugin", "Bz2Plugin", "LZMAPlugin")


def kind(uri: str) -> str:
    """The storage a URI names: ``file``, ``s3``, or its scheme (which the platform does not
    write to)."""
    scheme = urlsplit(uri).scheme
    return "file" if scheme in ("", "file") else scheme


def plugin_name(plugin: Any) -> str | None:
    """The plugin a ``postprocessing`` entry names by Scrapy's path, as its docs write them
    (``"scrapy.extensions.postprocessing.GzipPlugin"``); None if it names none of these."""
    if isinstance(plugin, str) and plugin.startswith(SCRAPY_PLUGINS):
        name = plugin.removeprefix(SCRAPY_PLUGINS)
        return name if name in PLUGINS else None
    return None


def _plugin(name: str, file: IO[bytes], options: dict, filename: str) -> IO[bytes]:
    if name == "GzipPlugin":
        return gzip.GzipFile(fileobj=file, mode="wb",
                             compresslevel=options.get("gzip_compresslevel", 9),
                             mtime=options.get("gzip_mtime"),
                             filename=options.get("gzip_filename") or filename)  # fmt: skip
    if name == "Bz2Plugin":
        return bz2.BZ2File(file, mode="wb", compresslevel=options.get("bz2_compresslevel", 9))
    return lzma.LZMAFile(file, mode="wb", format=options.get("lzma_format"),
                         check=options.get("lzma_check", -1), preset=options.get("lzma_preset"),
                         filters=options.get("lzma_filters"))  # fmt: skip


class _PostProcessing(io.RawIOBase):
    """Scrapy's ``PostProcessingManager``: the feed's bytes through its plugins, the first
    listed first, into ``file``."""

    def __init__(self, plugins: list[Any], file: IO[bytes], options: dict, filename: str) -> None:
        self.file = file
        self.chain: list[IO[bytes]] = []
        target = file
        for plugin in reversed(plugins):
            target = _plugin(plugin_name(plugin) or "", target, options, filename)
            self.chain.append(target)
        self.head = target

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        return self.head.write(data)

    def close(self) -> None:
        for plugin in reversed(self.chain):  # the first listed first: its output goes on
            plugin.close()
        super().close()


@contextmanager
def _processed(file: IO[bytes], options: dict, filename: str) -> Iterator[IO[bytes]]:
    plugins = options.get("postprocessing") or []
    if not plugins:
        yield file
        return
    chain = _PostProcessing(plugins, file, options, filename)
    yield chain
    chain.close()


@contextmanager
def opened(uri: str, options: dict, settings: dict) -> Iterator[IO[bytes]]:
    """A binary file the feed at ``uri`` is written to; what was written is stored when the
    block ends without an exception (an exception stores nothing: a replaced file or an S3
    object stays as it was)."""
    if kind(uri) == "s3":
        with _s3(uri, options, settings) as out:
            yield out
        return
    path = Path(file_uri_to_path(uri) if uri.startswith("file:") else uri)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not options.get("overwrite", False):  # Scrapy's default for files: appended to
        with path.open("ab") as raw, _processed(raw, options, str(path)) as out:
            yield out
        return
    partial = path.with_name(f".{path.name}.part")
    try:
        with partial.open("wb") as raw, _processed(raw, options, str(path)) as out:
            yield out
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


@contextmanager
def _s3(uri: str, options: dict, settings: dict) -> Iterator[IO[bytes]]:
    import boto3.session

    parts = urlsplit(uri)
    if not parts.hostname:
        raise ValueError("an s3:// feed URI names its bucket: s3://BUCKET/KEY")
    client = boto3.session.Session().client(
        "s3",
        aws_access_key_id=parts.username or settings.get("AWS_ACCESS_KEY_ID"),
        aws_secret_access_key=parts.password or settings.get("AWS_SECRET_ACCESS_KEY"),
        aws_session_token=settings.get("AWS_SESSION_TOKEN"),
        endpoint_url=settings.get("AWS_ENDPOINT_URL") or None,
        region_name=settings.get("AWS_REGION_NAME") or None,
    )  # fmt: skip
    acl = settings.get("FEED_STORAGE_S3_ACL") or None
    with tempfile.NamedTemporaryFile(prefix="feed-") as raw:
        with _processed(raw, options, raw.name) as out:
            yield out
        raw.flush()
        raw.seek(0)
        client.upload_fileobj(Bucket=parts.hostname, Key=parts.path[1:], Fileobj=raw,
                              ExtraArgs={"ACL": acl} if acl else None)  # fmt: skip


def shown(uri: str) -> str:
    """``uri`` without credentials, for logs and the job's stats."""
    parts = urlsplit(uri)
    if parts.password is None and parts.username is None:
        return uri
    return parts._replace(netloc=parts.hostname + (f":{parts.port}" if parts.port else "")).geturl()
