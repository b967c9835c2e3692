"""app.py: a `lakelog serve` node's journal folder defaults to its cluster node id (processes sharing a root
need distinct ones); an explicit `journal_node` stays; an embedded broker's settings leave it unset."""

from __future__ import annotations

import pytest

from lakelog.ingest_api.app import cluster_node_id, with_journal_node
from lakelog.settings import CoreSettings, Settings


def test_unset_it_is_the_node_id_configured_or_from_the_address() -> None:
    assert with_journal_node(Settings(node_id="n7")).core.journal_node == "n7"
    assert with_journal_node(Settings(port=8081)).core.journal_node == "127.0.0.1_8081"
    advertised = Settings(port=8081, advertise="http://node-3.internal:8080")
    assert with_journal_node(advertised).core.journal_node == cluster_node_id(advertised) == "node-3.internal_8080"


def test_two_nodes_on_one_machine_get_distinct_folders() -> None:
    folders = {with_journal_node(Settings(port=port)).core.journal_node for port in (8081, 8082)}
    assert len(folders) == 2


def test_an_explicit_setting_is_kept() -> None:
    given = Settings(node_id="n7", journal_node="j1")
    assert with_journal_node(given) is given


def test_a_bad_node_id_is_refused_before_anything_is_built() -> None:
    with pytest.raises(ValueError, match="node id must be"):
        with_journal_node(Settings(node_id="a/b"))


def test_an_embedded_broker_leaves_it_unset() -> None:
    assert CoreSettings().journal_node is None
    assert Settings().core.journal_node is None
