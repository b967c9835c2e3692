"""Where everything lives under a root URI: every storage path of lakelog, in one place.

```
<root>/_catalog/topics              the catalog of topics
<root>/_control/consumer_offsets    committed offsets of consumer groups
<root>/_control/acls                access-control lists
<root>/_control/replicas            replica sets, leaders and epochs
<root>/_control/job_runs            what each scheduled maintenance job run did
<root>/_staging/sink                the Spark sink's staged files (deleted at commit)
<root>/_cluster/nodes/<node id>     one heartbeat object per live `lakelog serve` node
<root>/topics/<topic>               a topic's table
<root>/topics/<topic>/_lakelog/slices.parquet  a cache of the slices of the table's shared files (layout 2)
```
"""

from __future__ import annotations

CATALOG_TABLE = "_catalog/topics"
OFFSETS_TABLE = "_control/consumer_offsets"
CONSUMER_GROUPS_TABLE = "_control/consumer_groups"  # KIP-848 groups' members, latest row per group
ACLS_TABLE = "_control/acls"
REPLICAS_TABLE = "_control/replicas"
JOB_RUNS_TABLE = "_control/job_runs"
SCHEMAS_TABLE = "_control/schemas"  # the schema registry: schemas, subjects' versions, config, mode
SINK_STAGING = "_staging/sink"
SHARE_STATE_TABLE = "_control/share_state"  # share groups' share-partitions (KIP-932), latest row per key
TRANSACTIONS_TABLE = "_control/transactions"  # the transaction coordinator's state, latest row per id
TRANSACTION_STAGING = "_transactions/staged"  # transactional batches until their transaction ends
TRANSACTION_OFFSETS_STAGING = "_transactions/offsets"  # TxnOffsetCommit's, taken by another node than the id's
CLUSTER_NODES = "_cluster/nodes"
TOPICS = "topics"

# The control tables copied to every site, commit for commit, by replication.
REPLICATED_CONTROL_TABLES = (CATALOG_TABLE, OFFSETS_TABLE, ACLS_TABLE)


# Relative to a topic's table: what a reopening node would otherwise read from each shared file's footer.
TOPIC_SLICES_CACHE = "_lakelog/slices.parquet"


def topic_path(topic: str) -> str:
    """A topic's table, relative to the root."""
    return f"{TOPICS}/{topic}"
