"""Access control: principals from API keys, and ACLs in the control table `<root>/_control/acls`.

An ACL is (principal, resource type topic|group|cluster|subject, pattern type literal|prefixed,
resource name, operation, allow|deny). Deny wins over allow. `*` as principal
matches everyone, a literal `*` resource name matches every resource. As in
Kafka, read, write, delete and alter imply describe. Super users (the admin
principals) are allowed everything and manage the ACLs.

The table is append-only: one row per change, the latest row per ACL wins
(`deleted` marks a removal), ordered by a strictly increasing `updated` time.
"""

from __future__ import annotations

import builtins
import hashlib
import threading
from dataclasses import asdict, dataclass
from typing import Iterable, Mapping

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import write_deltalake

from lakelog.platform.clock import column_ms, now_ms
from lakelog.platform.delta.control_table import latest_rows, open_control_table, reread_if_changed
from lakelog.platform.errors import InvalidRequest, LakelogError
from lakelog.platform.layout import ACLS_TABLE
from lakelog.platform.storage import Storage

RESOURCE_TYPES = ("topic", "group", "cluster", "subject")  # subject: a schema registry subject
CLUSTER = "kafka-cluster"  # the one cluster resource's name, as in Kafka
PATTERN_TYPES = ("literal", "prefixed")
OPERATIONS = ("read", "write", "describe", "create", "delete", "alter", "all")
PERMISSIONS = ("allow", "deny")
IMPLIES_DESCRIBE = ("read", "write", "delete", "alter", "describe")
ANONYMOUS = "anonymous"

ACL_SCHEMA = pa.schema(
    [
        pa.field("principal", pa.string(), nullable=False),
        pa.field("resource_type", pa.string(), nullable=False),
        pa.field("pattern_type", pa.string(), nullable=False),
        pa.field("resource_name", pa.string(), nullable=False),
        pa.field("operation", pa.string(), nullable=False),
        pa.field("permission", pa.string(), nullable=False),
        pa.field("deleted", pa.bool_(), nullable=False),
        pa.field("updated", pa.timestamp("ms", tz="UTC"), nullable=False),
    ]
)


class AuthenticationFailed(LakelogError):
    code = "SASL_AUTHENTICATION_FAILED"


class TopicAuthorizationFailed(LakelogError):
    code = "TOPIC_AUTHORIZATION_FAILED"


class GroupAuthorizationFailed(LakelogError):
    code = "GROUP_AUTHORIZATION_FAILED"


class ClusterAuthorizationFailed(LakelogError):
    code = "CLUSTER_AUTHORIZATION_FAILED"


class SubjectAuthorizationFailed(LakelogError):
    code = "SUBJECT_AUTHORIZATION_FAILED"


@dataclass(frozen=True)
class Acl:
    principal: str
    resource_type: str
    pattern_type: str
    resource_name: str
    operation: str
    permission: str

    def validate(self) -> Acl:
        for name, value, allowed in (("resource_type", self.resource_type, RESOURCE_TYPES),
                                     ("pattern_type", self.pattern_type, PATTERN_TYPES),
                                     ("operation", self.operation, OPERATIONS),
                                     ("permission", self.permission, PERMISSIONS)):
            if value not in allowed:
                raise InvalidRequest(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
        if not self.principal or not self.resource_name:
            raise InvalidRequest("principal and resource_name must be non-empty")
        if self.resource_type == "cluster" and (self.resource_name, self.pattern_type) != (CLUSTER, "literal"):
            raise InvalidRequest(f"the cluster resource is the literal name {CLUSTER!r}")
        return self

    def matches_resource(self, resource_type: str, name: str) -> bool:
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == "prefixed":
            return name.startswith(self.resource_name)
        return self.resource_name in ("*", name)

    def grants(self, operation: str) -> bool:
        if self.operation in ("all", operation):
            return True
        # read, write, delete and alter imply describe (only for allow; a deny of read denies only read)
        return operation == "describe" and self.permission == "allow" and self.operation in IMPLIES_DESCRIBE


@dataclass(frozen=True)
class AclFilter:
    principal: str | None = None
    resource_type: str | None = None
    pattern_type: str | None = None
    resource_name: str | None = None
    operation: str | None = None
    permission: str | None = None

    def matches(self, acl: Acl) -> bool:
        return all(want is None or getattr(acl, name) == want for name, want in asdict(self).items())


class AclStore:
    """The ACLs of a root, cached in memory; changes go to the control table first."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self._dt = open_control_table(storage, ACLS_TABLE, ACL_SCHEMA)
        self._lock = threading.Lock()
        self._acls: set[Acl] = set()
        self._version = -1
        self._last_ms = 0
        self.generation = 0  # advances whenever the set of ACLs changes: decisions cached by it
        self.refresh()

    def refresh(self) -> None:
        with self._lock:
            self._version, table = reread_if_changed(self._storage, self._dt, self._version)
            if table is None or table.num_rows == 0:
                return
            fields = ["principal", "resource_type", "pattern_type", "resource_name", "operation", "permission"]
            self._acls = {Acl(*(row[f] for f in fields)) for row in latest_rows(table, fields, ["updated"]).to_pylist()
                          if not row["deleted"]}
            self.generation += 1
            self._last_ms = int(pc.max(column_ms(table.column("updated"))).as_py())

    def list(self, acl_filter: AclFilter | None = None) -> builtins.list[Acl]:
        with self._lock:
            acls = list(self._acls)
        return sorted((a for a in acls if acl_filter is None or acl_filter.matches(a)),
                      key=lambda a: tuple(asdict(a).values()))

    def add(self, acls: Iterable[Acl]) -> builtins.list[Acl]:
        added = [acl.validate() for acl in acls]
        self._write(added, deleted=False)
        return added

    def delete(self, acl_filter: AclFilter) -> builtins.list[Acl]:
        removed = self.list(acl_filter)
        self._write(removed, deleted=True)
        return removed

    def remove(self, acls: Iterable[Acl]) -> builtins.list[Acl]:
        """Delete these ACLs (those that exist), in one write: for a selection no AclFilter expresses."""
        with self._lock:
            present = [a for a in acls if a in self._acls]
        self._write(present, deleted=True)
        return present

    def _write(self, acls: builtins.list[Acl], deleted: bool) -> None:
        if not acls:
            return
        with self._lock:
            stamp = max(now_ms(), self._last_ms + 1)
            rows = [{**asdict(a), "deleted": deleted, "updated": stamp} for a in acls]
            table = pa.Table.from_pylist(rows, schema=pa.schema(
                [f if f.name != "updated" else pa.field("updated", pa.int64()) for f in ACL_SCHEMA]))
            table = table.set_column(7, ACL_SCHEMA.field("updated"), table.column("updated").cast(ACL_SCHEMA.field(
                "updated").type))
            write_deltalake(self._dt, table, mode="append")
            self._last_ms = stamp
            self._acls = (self._acls - set(acls)) if deleted else (self._acls | set(acls))
            self.generation += 1
            self._dt.update_incremental()
            self._version = self._dt.version()

    def allowed(self, principal: str, operation: str, resource_type: str, name: str) -> bool:
        """Deny wins; then any allow that grants the operation."""
        with self._lock:
            acls = [a for a in self._acls
                    if a.principal in ("*", principal) and a.matches_resource(resource_type, name)]
        if any(a.permission == "deny" and a.grants(operation) for a in acls):
            return False
        return any(a.permission == "allow" and a.grants(operation) for a in acls)


class Authorizer:
    """Authentication (API key -> principal) and authorization (ACLs, super users).

    Decisions are cached per ACL generation, so checking a right on every poll costs a dict lookup,
    and a changed ACL applies to the next request."""

    CACHE_ENTRIES = 100_000

    def __init__(self, store: AclStore | None, api_keys: Mapping[str, str] | None,
                 super_users: Iterable[str] = ("admin",)) -> None:
        self.store = store
        self.enabled = bool(api_keys)
        self._keys = {_digest(key): principal for key, principal in (api_keys or {}).items()}
        self.super_users = frozenset(super_users)
        self._decisions: dict[tuple[str, str, str, str], bool] = {}
        self._generation = -1

    def authenticate(self, token: str | None) -> str:
        if not self.enabled:
            return ANONYMOUS
        principal = self._keys.get(_digest(token)) if token else None
        if principal is None:
            raise AuthenticationFailed("missing or invalid API key: send 'Authorization: Bearer <key>'")
        return principal

    def is_super(self, principal: str) -> bool:
        return not self.enabled or principal in self.super_users

    def allowed(self, principal: str, operation: str, resource_type: str, name: str) -> bool:
        if self.is_super(principal):
            return True
        if self.store is None:
            return False
        if self._generation != self.store.generation or len(self._decisions) > self.CACHE_ENTRIES:
            self._decisions = {}
            self._generation = self.store.generation
        key = (principal, operation, resource_type, name)
        decision = self._decisions.get(key)
        if decision is None:
            decision = self._decisions[key] = self.store.allowed(principal, operation, resource_type, name)
        return decision

    def check(self, principal: str, operation: str, resource_type: str, name: str) -> None:
        if self.allowed(principal, operation, resource_type, name):
            return
        error = {"topic": TopicAuthorizationFailed, "group": GroupAuthorizationFailed,
                 "subject": SubjectAuthorizationFailed}.get(
            resource_type, ClusterAuthorizationFailed)
        raise error(f"principal {principal!r} may not {operation} {resource_type} {name!r}")

    def check_admin(self, principal: str) -> None:
        if not self.is_super(principal):
            raise ClusterAuthorizationFailed(f"principal {principal!r} is not an admin")


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()

