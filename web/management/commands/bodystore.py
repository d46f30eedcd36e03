"""``python manage.py bodystore [--create]``: check that the body store can be written and
read back; ``--create`` first creates its S3 bucket if it does not exist (compose and the k8s
migrate Job run it once per release)."""

from __future__ import annotations

import secrets

from django.core.files.storage import FileSystemStorage
from django.core.management.base import CommandError, CommandParser

from tasks.content import bodies
from web.management.base import PlatformCommand


class Command(PlatformCommand):
    help = "Check the body store (and create its S3 bucket with --create)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--create", action="store_true", help="create the S3 bucket if missing")

    def handle(self, *args, **opts) -> None:
        store = bodies.storage()
        where = store.location if isinstance(store, FileSystemStorage) else _bucket_name(store)
        try:
            if opts["create"] and not isinstance(store, FileSystemStorage):
                _create_bucket(store)
            probe = f"probe/{secrets.token_hex(8)}"
            name = bodies.put(0, probe.encode())
            ok = bodies.get(name) == probe.encode()
            if isinstance(store, bodies.BodyFileStorage):
                store.forget(0)
            store.delete(bodies.file_of(name))
        except Exception as exc:  # noqa: BLE001 (any backend's error, reported to the operator)
            raise CommandError(f"body store {where}: {type(exc).__name__}: {exc}") from None
        if not ok:
            raise CommandError(f"body store {where}: a body read back differs from the one written")
        self.stdout.write(f"body store {where}: writable")


def _bucket_name(store) -> str:
    return f"s3://{store.bucket_name}/{store.location}"


def _create_bucket(store) -> None:
    from botocore.exceptions import ClientError

    try:
        store.connection.meta.client.head_bucket(Bucket=store.bucket_name)
    except ClientError:
        store.connection.create_bucket(Bucket=store.bucket_name)
