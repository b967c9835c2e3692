"""`GET /v1/cluster` (with its replica sites) and `GET /v1/jobs` are documented in /openapi.json by response
models whose fields are the ones the server sends, with examples of that shape."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Callable

from lakelog.ingest_api.models import ClusterDescription, JobRuns
from lakelog.platform.ops.job_runs import JobRun, record_runs
from lakelog.platform.storage import Storage
from tests.http.conftest import ThreadServer


def documented(document: dict, path: str) -> dict:
    """The schema of a GET's 200 answer, its $ref followed."""
    schema = document["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    return component(document, schema)


def component(document: dict, schema: dict) -> dict:
    name = schema["$ref"].rsplit("/", 1)[1]
    return document["components"]["schemas"][name]


def test_cluster_and_job_answers_have_documented_shapes(start_server: Callable[..., ThreadServer],
                                                        tmp_path: Path) -> None:
    sites = {"eu": str(tmp_path / "eu"), "us": str(tmp_path / "us")}
    server = start_server(tmp_path / "eu", sites=sites, control_site="eu", replication_interval_ms=0)
    record_runs(Storage.open(server.root), [JobRun("retention", "orders", 1_795_300_000_000, 0.5, True, commits=1),
                                            JobRun("vacuum", "", 1_795_300_001_000, 0.1, False, trigger="cli")])
    with server.client() as client:
        created = client.post("/v1/topics", json={"name": "orders", "partitions": 2,
                                                  "config": {"replication.factor": 2}})
        assert created.status_code == 201, created.text
        document = client.get("/openapi.json").json()
        cluster, jobs = client.get("/v1/cluster").json(), client.get("/v1/jobs").json()

    described = documented(document, "/v1/cluster")
    assert set(described["properties"]) == {"node", "nodes", "topics", "groups", "sites"}
    site = component(document, described["properties"]["sites"]["items"])
    assert set(site["properties"]) == {"name", "control", "leads", "out_of_sync"}
    node = component(document, described["properties"]["nodes"]["items"])
    assert set(node["properties"]) == {"node_id", "address", "kafka"}
    ClusterDescription.model_validate(described["examples"][0])

    answer = ClusterDescription.model_validate(cluster)  # a field the model lacks, or misses, fails here
    assert [(s.name, s.control) for s in answer.sites] == [("eu", True), ("us", False)]
    assert sorted(t for s in answer.sites for t in s.leads) == ["orders"]
    assert answer.node in {n.node_id for n in answer.nodes} and answer.topics == {"orders": answer.node}

    runs = documented(document, "/v1/jobs")
    run = component(document, runs["properties"]["runs"]["items"])
    assert set(run["properties"]) == {f.name for f in fields(JobRun)}  # the record's columns, all of them
    assert set(run["properties"]["trigger"]["enum"]) == {"schedule", "cli", "spark-submit"}
    JobRuns.model_validate(runs["examples"][0])
    answer_runs = JobRuns.model_validate(jobs).runs
    assert [(r.job, r.ok, r.trigger) for r in answer_runs] == [("vacuum", False, "cli"), ("retention", True, "schedule")]
