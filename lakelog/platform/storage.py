"""The storage root: one URI (local folder or s3://bucket/prefix) and its options.

The same options reach delta-rs (snapshots, maintenance commits), obstore (the
object requests of the produce and fetch paths: data files, commit files,
small reads, deletes) and fsspec/s3fs (listings, ranged reads through
pyarrow), so one setting configures all three.
"""

from __future__ import annotations

import itertools
import os
import re
import uuid
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cached_property
from typing import Any, Callable, Iterator, Mapping

import fsspec
import obstore
import pyarrow as pa
import pyarrow.fs as pafs
from botocore.exceptions import BotoCoreError
from deltalake.exceptions import DeltaError, DeltaProtocolError, SchemaMismatchError, TableNotFoundError
from obstore.exceptions import (
    AlreadyExistsError,
    BaseError,
    NotFoundError,
    PermissionDeniedError,
    PreconditionError,
    UnauthenticatedError,
)
from obstore.store import S3Store

# delta-rs option names (lower case), and the environment variables they also come from.
_ENV_OPTIONS = {
    "aws_endpoint_url": "AWS_ENDPOINT_URL",
    "aws_region": "AWS_REGION",
    "aws_access_key_id": "AWS_ACCESS_KEY_ID",
    "aws_secret_access_key": "AWS_SECRET_ACCESS_KEY",
    "aws_session_token": "AWS_SESSION_TOKEN",
    "aws_allow_http": "AWS_ALLOW_HTTP",
}
_ALIASES = {"endpoint_url": "aws_endpoint_url", "aws_endpoint": "aws_endpoint_url", "region": "aws_region",
            "allow_http": "aws_allow_http", "aws_conditional_put": "conditional_put"}


# How long a writer waits before trying storage again after an error it may pass (then it refreshes
# and retries, until its deadline), and how often delta-rs may rebase a commit onto others' commits.
STORAGE_RETRY_PAUSE_S = 0.05
UPLOAD_CONNECTIONS = 64  # parallel object-store requests of one node (a flush's files go at once)
DELTA_COMMIT_RETRIES = 20
FOLDER_REMOVED_ATTEMPTS = 3  # a local write whose folder another node's delete removed under it (_placed)


def _new_temporary_names() -> None:
    """Temporary file names: unique to this process (a random part, drawn again in a forked child), then
    numbered; no random draw per write."""
    global _TEMPORARY_PREFIX, _TEMPORARY_NUMBERS
    _TEMPORARY_PREFIX, _TEMPORARY_NUMBERS = uuid.uuid4().hex, itertools.count()


_TEMPORARY_PREFIX, _TEMPORARY_NUMBERS = "", itertools.count()
_new_temporary_names()
os.register_at_fork(after_in_child=_new_temporary_names)

# What reading or writing the store can raise: the network, the object store (s3fs lets botocore's
# connection errors through), delta-rs. Callers that survive a failing store catch these, not
# Exception, so that a plain bug still surfaces.
STORAGE_ERRORS: tuple[type[OSError], type[BotoCoreError], type[DeltaError]] = (OSError, BotoCoreError, DeltaError)

# delta-rs reports data it cannot write (a cast, a schema) as a generic DeltaError; its message says which.
_DATA_ERRORS = ("Arrow error", "Cast error", "Schema error", "Invalid data", "Parquet error", "Json error")


def is_retriable(error: BaseException) -> bool:
    """Whether a storage error may pass by itself (network, throttling, an endpoint down), or never will
    (data that cannot be written, a bad path, no permission): retrying those only blocks the topic."""
    if isinstance(error, (SchemaMismatchError, DeltaProtocolError, TableNotFoundError)):
        return False
    if isinstance(error, (PermissionError, NotADirectoryError, IsADirectoryError)):
        return False
    if isinstance(error, DeltaError):
        return not any(marker in str(error) for marker in _DATA_ERRORS)
    return isinstance(error, (OSError, BotoCoreError))


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_BUCKET = re.compile(r"<BucketName>([^<]+)</BucketName>")


def describe_storage_error(storage: Storage, error: BaseException) -> str:
    """One line naming the root and the cause (no credentials, endpoint unreachable, no bucket, permission
    denied), instead of the nested report delta-rs and botocore give."""
    return f"cannot use root {storage.root}: {_storage_cause(storage, error)}"


def _storage_cause(storage: Storage, error: BaseException) -> str:
    text = _ANSI.sub("", str(error))
    endpoint = storage.options.get("aws_endpoint_url", "the S3 endpoint")
    if "NoSuchBucket" in text:
        bucket = _BUCKET.search(text)
        name = bucket.group(1) if bucket else storage.root.removeprefix("s3://").split("/", 1)[0]
        return f"bucket {name!r} does not exist"
    # Without keys, S3 clients fall back to the instance metadata service (169.254.169.254).
    if "169.254.169.254" in text or "NoCredentials" in text or "Unable to locate credentials" in text:
        return ("no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                "(or aws_access_key_id/aws_secret_access_key in LAKELOG_STORAGE)")
    if "InvalidAccessKeyId" in text or "SignatureDoesNotMatch" in text:
        return "the credentials were refused (InvalidAccessKeyId or SignatureDoesNotMatch)"
    if isinstance(error, PermissionError) or "AccessDenied" in text or "403 Forbidden" in text:
        return "permission denied"
    if any(marker in text for marker in ("Connection refused", "tcp connect error", "dns error",
                                          "Could not connect", "EndpointConnectionError", "timed out",
                                          "error sending request")):
        reason = "connection refused" if "refused" in text else "no connection"
        return f"endpoint {endpoint} is unreachable ({reason})"
    first = next((line.strip(" ↳") for line in text.splitlines() if line.strip(" ↳")), type(error).__name__)
    return f"{type(error).__name__}: {first}"


def normalize_options(options: Mapping[str, str] | None) -> dict[str, str]:
    normal: dict[str, str] = {}
    for key, value in (options or {}).items():
        name = key.lower().replace("-", "_").replace(".", "_")
        normal[_ALIASES.get(name, name)] = str(value)
    return normal


@dataclass(frozen=True)
class Storage:
    root: str
    options: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def open(cls, root: str, options: Mapping[str, str] | None = None) -> Storage:
        options = normalize_options(options)
        if root.startswith("s3://") or root.startswith("s3a://"):
            root = "s3://" + root.split("://", 1)[1].rstrip("/")
            for name, env in _ENV_OPTIONS.items():
                if name not in options and os.environ.get(env):
                    options[name] = os.environ[env]
            options.setdefault("conditional_put", "etag")
            if options.get("aws_endpoint_url", "").startswith("http://"):
                options.setdefault("aws_allow_http", "true")
        elif "://" in root and not root.startswith("file://"):
            raise ValueError(f"unsupported root URI {root!r}: use a local folder or s3://bucket/prefix")
        else:
            root = os.path.abspath(root.removeprefix("file://"))
        return cls(root=root, options=options)

    @property
    def is_local(self) -> bool:
        return not self.root.startswith("s3://")

    def uri(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def delta_options(self) -> dict[str, str] | None:
        return dict(self.options) if self.options else None

    @cached_property
    def fsspec(self) -> fsspec.AbstractFileSystem:
        if self.is_local:
            return fsspec.filesystem("file")
        return fsspec.filesystem("s3", **_s3fs_kwargs(self.options))

    @cached_property
    def arrow_fs(self) -> pafs.FileSystem:
        """A pyarrow filesystem for parquet reads and writes (paths from `fs_path`)."""
        if self.is_local:
            return pafs.LocalFileSystem()
        return pafs.PyFileSystem(pafs.FSSpecHandler(self.fsspec))

    def fs_path(self, uri: str) -> str:
        return uri.removeprefix("s3://")

    def delete_tree(self, uri: str) -> None:
        path = self.fs_path(uri)
        if self.fsspec.exists(path):
            self.fsspec.rm(path, recursive=True)

    def list_tree(self, uri: str) -> list[str]:
        """Every file under `uri`, at any depth (on S3 one LIST per 1,000 keys)."""
        if self.is_local:
            return [os.path.join(folder, n) for folder, _, names in os.walk(uri) for n in names]
        bucket = self.root.removeprefix("s3://").split("/", 1)[0]
        with _object_errors():
            return [f"s3://{bucket}/{entry['path']}" for page in obstore.list(self.objects, prefix=self._key(uri) + "/")
                    for entry in page]

    def list_names_after(self, uri: str, after: str) -> list[str]:
        """Names of the files directly under `uri` that sort after `after`, up to 1,000 (on S3 one LIST with
        start-after, through obstore)."""
        if self.is_local:
            return [n for n in self.list_names(uri) if n > after]
        folder = self._key(uri) + "/"
        with _object_errors():
            for page in obstore.list(self.objects, prefix=folder, offset=folder + after, chunk_size=1000):
                return [entry["path"].removeprefix(folder) for entry in page if "/" not in entry["path"][len(folder):]]
        return []

    def delete_files(self, uris: list[str]) -> None:
        """Delete these files (those already gone too): on S3 in DeleteObjects requests of up to 1,000 keys,
        not one request each (a log cleanup deletes 26 files)."""
        if not self.is_local:
            if uris:
                with _object_errors():
                    obstore.delete(self.objects, [self._key(uri) for uri in uris])
            return
        for uri in uris:
            try:
                os.remove(uri)
            except FileNotFoundError:
                pass

    def makedirs(self, uri: str) -> None:
        if self.is_local:
            os.makedirs(uri, exist_ok=True)

    def open_input(self, uri: str) -> Any:
        return self.arrow_fs.open_input_file(self.fs_path(uri))

    @cached_property
    def objects(self) -> S3Store:
        """The object requests of the produce and fetch paths go through obstore (Rust's object_store, as
        delta-rs's do): measured against the loopback endpoint, a PUT or GET costs 3.5 ms of client and
        endpoint time through it, 6.5 ms through s3fs, whose botocore stack is most of the difference."""
        return S3Store(self.root.removeprefix("s3://").split("/", 1)[0], **_obstore_kwargs(self.options))

    def _key(self, uri: str) -> str:
        return uri.removeprefix("s3://").split("/", 1)[1]

    def read_bytes(self, uri: str) -> bytes:
        if self.is_local:
            with open(uri, "rb") as f:
                return f.read()
        with _object_errors():
            return obstore.get(self.objects, self._key(uri)).bytes().to_bytes()

    def read_tail(self, uri: str, nbytes: int) -> bytes:
        """The last `nbytes` of a file (all of a shorter one): one suffix-range GET on S3, no HEAD."""
        if self.is_local:
            with open(self.fs_path(uri), "rb") as f:
                f.seek(max(os.fstat(f.fileno()).st_size - nbytes, 0))
                return f.read()
        with _object_errors():
            return obstore.get(self.objects, self._key(uri), options={"range": {"suffix": nbytes}}).bytes().to_bytes()

    def write_bytes(self, uri: str, data: bytes | pa.Buffer) -> None:
        """One write, atomic (one PUT on S3; locally a temporary file renamed over the name)."""
        path = self.fs_path(uri)
        if self.is_local:
            _placed(path, data, os.replace)  # readers see the old content or the new
            return
        with _object_errors():
            obstore.put(self.objects, self._key(uri), data.to_pybytes() if isinstance(data, pa.Buffer) else data)

    def put_if_absent(self, uri: str, data: bytes) -> bool:
        """Write `data` only if nothing is at `uri`, atomically: readers see all of it or nothing (locally
        a hard link of a written temporary file, which refuses an existing name; If-None-Match on S3)."""
        if not self.is_local:
            try:
                with _object_errors():
                    obstore.put(self.objects, self._key(uri), data, mode="create")
                return True
            except FileExistsError:  # S3 answers 412 Precondition Failed when the key exists
                return False
        try:
            _placed(uri, data, os.link)
            return True
        except FileExistsError:
            return False

    def list_names(self, uri: str) -> list[str]:
        """Names of the files directly under `uri` (empty when it does not exist)."""
        try:
            return sorted(p.rsplit("/", 1)[-1] for p in self.fsspec.ls(self.fs_path(uri), detail=False))
        except FileNotFoundError:
            return []

    def list_modified(self, uri: str) -> dict[str, float]:
        """Name -> last-modified time (seconds, the store's clock) of the files directly under `uri`: one
        LIST on S3."""
        try:
            entries = self.fsspec.ls(self.fs_path(uri), detail=True)
        except FileNotFoundError:
            return {}
        found = {}
        for entry in entries:
            if entry.get("type") == "directory":
                continue
            modified = entry.get("mtime", entry.get("LastModified"))
            found[entry["name"].rsplit("/", 1)[-1]] = modified.timestamp() if hasattr(modified, "timestamp") \
                else float(modified)
        return found

    def size(self, uri: str) -> int | None:
        try:
            return int(self.fsspec.size(self.fs_path(uri)))
        except FileNotFoundError:
            return None


def _placed(path: str, data: bytes | pa.Buffer, place: Callable[[str, str], None]) -> None:
    """`data` written to a temporary file beside `path`, then `place`d there (renamed or linked). A folder
    removed meanwhile (another node deleting a topic's table as this one creates it again) is made again:
    nothing of ours is in place until `place` returns."""
    for attempt in range(FOLDER_REMOVED_ATTEMPTS):
        temporary = None
        try:
            temporary = _written_beside(path, data)
            place(temporary, path)
            return
        except FileNotFoundError:
            if attempt == FOLDER_REMOVED_ATTEMPTS - 1:
                raise
        finally:
            if temporary is not None:
                with suppress(FileNotFoundError):  # renamed; or removed with its folder
                    os.unlink(temporary)


def _written_beside(path: str, data: bytes | pa.Buffer) -> str:
    """`data` in a new temporary file in `path`'s folder (made if missing), to be renamed or linked. Plain
    descriptor calls, the folder made only when the first try finds it missing: the node journal writes one
    object per flush, and each system call here is a turn of the interpreter lock for the flush thread."""
    folder = os.path.dirname(path)
    temporary = os.path.join(folder, f"_tmp_{_TEMPORARY_PREFIX}_{next(_TEMPORARY_NUMBERS)}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    try:
        descriptor = os.open(temporary, flags, 0o644)
    except FileNotFoundError:
        os.makedirs(folder, exist_ok=True)
        descriptor = os.open(temporary, flags, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(descriptor, view):]
    finally:
        os.close(descriptor)
    return temporary


def _s3fs_kwargs(options: Mapping[str, str]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"client_kwargs": {}}
    if "aws_endpoint_url" in options:
        kwargs["endpoint_url"] = options["aws_endpoint_url"]
    if "aws_region" in options:
        kwargs["client_kwargs"]["region_name"] = options["aws_region"]
    if "aws_access_key_id" in options:
        kwargs["key"] = options["aws_access_key_id"]
        kwargs["secret"] = options.get("aws_secret_access_key")
    if "aws_session_token" in options:
        kwargs["token"] = options["aws_session_token"]
    # A flush writes one file per partition at once: as many connections as a topic has partitions, commonly.
    config: dict[str, Any] = {"max_pool_connections": UPLOAD_CONNECTIONS}
    if "connect_timeout" in options:
        config["connect_timeout"] = _seconds(options["connect_timeout"])
    if "timeout" in options:
        config["read_timeout"] = _seconds(options["timeout"])
    if "max_retries" in options:
        config["retries"] = {"max_attempts": int(options["max_retries"]) + 1, "mode": "standard"}
    kwargs["config_kwargs"] = config
    # Fresh listings matter more than a directory cache: other writers add files.
    kwargs["use_listings_cache"] = False
    kwargs["skip_instance_cache"] = True
    kwargs["session"] = _session_without_expect()
    # A whole-object read is one GET: concurrent ranged reads would first HEAD the object for its size.
    kwargs["max_concurrency"] = 1
    return kwargs


def _obstore_kwargs(options: Mapping[str, str]) -> dict[str, Any]:
    """The delta-rs options (object_store's own names) as obstore takes them. Retries are few (2, within
    10 s; object_store's default is 10 within 3 minutes): a writer retries on its own, within its deadline."""
    config = {name: options[name] for name in ("aws_region", "aws_access_key_id", "aws_secret_access_key",
                                               "aws_session_token") if name in options}
    if "aws_endpoint_url" in options:
        config["aws_endpoint"] = options["aws_endpoint_url"]
    client: dict[str, Any] = {"allow_http": options.get("aws_allow_http", "false").lower() == "true"}
    for name in ("timeout", "connect_timeout"):
        if name in options:
            client[name] = timedelta(seconds=_seconds(options[name]))
    retries = int(options["max_retries"]) if "max_retries" in options else 2
    return {"config": config, "client_options": client,
            "retry_config": {"max_retries": retries, "retry_timeout": timedelta(seconds=10)}}


@contextmanager
def _object_errors() -> Iterator[None]:
    """obstore's errors as the OSErrors the rest of lakelog handles (STORAGE_ERRORS, `is_retriable`)."""
    try:
        yield
    except (AlreadyExistsError, PreconditionError) as exc:
        raise FileExistsError(str(exc)) from exc
    except NotFoundError as exc:
        raise FileNotFoundError(str(exc)) from exc
    except (PermissionDeniedError, UnauthenticatedError) as exc:
        raise PermissionError(str(exc)) from exc
    except BaseError as exc:
        raise OSError(str(exc)) from exc


def _session_without_expect() -> Any:
    """botocore sends every PUT with `Expect: 100-continue` and waits for the store's `100 Continue`
    before the body: a round trip more per PUT (measured through the latency proxy: 2 round trips for a
    PUT, 1 for a HEAD). lakelog's bodies are small (a flush, a commit file), so the header goes."""
    import aiobotocore.session  # s3fs's own dependency; imported only for S3 (a local CLI starts faster)

    session = aiobotocore.session.AioSession()
    session.get_component("event_emitter").register_last("before-call.s3", _drop_expect)
    return session


def _drop_expect(params: dict[str, Any], **_: Any) -> None:
    params.get("headers", {}).pop("Expect", None)




def _seconds(value: str) -> float:
    """delta-rs durations ("5s", "500ms", "2") as seconds for botocore."""
    text = str(value).strip()
    if text.endswith("ms"):
        return float(text[:-2]) / 1000
    return float(text.rstrip("s"))
