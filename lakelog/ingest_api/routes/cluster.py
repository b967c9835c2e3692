"""The cluster: its nodes, replica sites and who leads what (`GET /v1/cluster`), the maintenance jobs' last runs
(`GET /v1/jobs`), the node-to-node produce calls (the calls' bytes, or a reference to their object), and the
reads a node relays to a topic's leader with the journal on (a fetch past its table's end, the log ends)."""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response

from lakelog.ingest_api.auth import Principal, Svc
from lakelog.ingest_api.cluster_routing import from_a_node
from lakelog.ingest_api.dependencies import Services, blocking, read_body, services_of
from lakelog.ingest_api.errors import BodyTooLarge, MalformedRequest
from lakelog.ingest_api.models import ClusterDescription, JobRuns
from lakelog.ingest_api.routes.records import json_response
from lakelog.platform import Broker
from lakelog.platform.acl import CLUSTER
from lakelog.platform.cluster.errors import ClusterAuthFailed, RemoteError
from lakelog.platform.cluster.forwarding import ARROW_STREAM
from lakelog.platform.cluster.ownership import group_key, topic_key
from lakelog.platform.cluster.reference import ProduceReference
from lakelog.platform.cluster.wire import FetchAsk, decode_calls, encode_fetched, encode_results
from lakelog.platform.errors import LakelogError
from lakelog.platform.ops.job_runs import recent_runs
from lakelog.platform.records import ProduceResult

router = APIRouter(tags=["cluster"])


@router.get("/v1/cluster", response_model=ClusterDescription,
            summary="The live nodes, this node, the replica sites, and the leader of each topic and the coordinator "
                    "of each group this node knows")
async def describe_cluster(services: Svc, principal: Principal) -> Response:
    broker = services.broker
    sites = await blocking(replica_sites, broker)
    if broker.cluster is None:
        return json_response({"node": None, "nodes": [], "topics": {}, "groups": {}, "sites": sites})
    view = await blocking(broker.cluster.view)
    topics = await blocking(broker.list_topics)
    groups = services.coordinator.group_ids()
    return json_response({
        "node": view.local.node_id,
        "nodes": [{"node_id": n.node_id, "address": n.address, "kafka": n.kafka} for n in view.nodes],
        "topics": {t.name: view.owner(topic_key(t.name)).node_id for t in topics},
        "groups": {g: view.owner(group_key(g)).node_id for g in groups},
        "sites": sites,
    })


def replica_sites(broker: Broker) -> list[dict[str, Any]]:
    """Each configured site (none without LAKELOG_SITES): whether it holds the control tables, the topics it
    leads, and the topics it holds a replica of but has fallen out of the in-sync set of (known state)."""
    if broker.replicas is None:
        return []
    states = [s for s in (broker.replicas.state(t.name) for t in broker.list_topics()) if s is not None]
    return [{"name": site, "control": site == broker.control_site,
             "leads": sorted(s.topic for s in states if s.leader == site),
             "out_of_sync": sorted(s.topic for s in states if site in s.replicas and site not in s.isr)}
            for site in broker.replicas.sites]


@router.get("/v1/jobs", response_model=JobRuns,
            summary="The last runs of the maintenance jobs (retention, roll, compact, vacuum; scheduled or started "
                    "by hand), newest first (needs describe on the cluster when authentication is on)")
async def job_runs(services: Svc, principal: Principal,
                   limit: Annotated[int, Query(ge=1, le=500)] = 50) -> Response:
    services.authorizer.check(principal, "describe", "cluster", CLUSTER)
    runs = await blocking(recent_runs, services.broker.storage, limit)
    return json_response({"runs": [asdict(r) for r in runs]})


@router.post("/internal/v1/topics/{topic}/produce", include_in_schema=False)
async def forwarded_produce(topic: str, request: Request, services: Services = Depends(services_of)) -> Response:
    _check_node(request, services)
    body = await read_body(request, services)
    try:
        try:
            calls = decode_calls(body)
        except ValueError as exc:
            raise MalformedRequest(str(exc)) from None
        return await _answered(await blocking(services.broker.produce_forwarded, topic, calls))
    finally:
        services.release(len(body))


@router.post("/internal/v1/topics/{topic}/produce-ref", include_in_schema=False)
async def forwarded_produce_by_reference(topic: str, request: Request,
                                         services: Services = Depends(services_of)) -> Response:
    """The calls in an object the sender wrote (its journal on): the object's bytes count against the
    in-flight budget and the body limit as the same calls sent as bytes would."""
    _check_node(request, services)
    body = await read_body(request, services)
    try:
        try:
            reference = ProduceReference.decode(body)
        except ValueError as exc:
            raise MalformedRequest(str(exc)) from None
    finally:
        services.release(len(body))
    if reference.bytes > services.settings.max_request_bytes:
        raise BodyTooLarge(f"the referenced calls are {reference.bytes} bytes, over the limit (max_request_bytes) "
                           f"of {services.settings.max_request_bytes} bytes")
    services.reserve(reference.bytes)
    try:
        return await _answered(await blocking(services.broker.produce_by_reference, topic, reference))
    finally:
        services.release(reference.bytes)


@router.post("/internal/v1/topics/{topic}/fetch", include_in_schema=False)
async def relayed_fetch(topic: str, request: Request, services: Services = Depends(services_of)) -> Response:
    """A fetch another node relays (relay.py): answered here, never relayed again, as an Arrow IPC stream."""
    _check_node(request, services)
    try:
        ask = FetchAsk.decode(await request.body())
    except ValueError as exc:
        raise MalformedRequest(str(exc)) from None
    wait = min(max(ask.timeout_ms, 0), services.settings.max_poll_timeout_ms)
    result = await blocking(services.broker.fetch, topic, ask.partition, ask.offset, ask.max_records, ask.max_bytes,
                            wait, None, ask.min_bytes, relay=False)
    return Response(encode_fetched(result), media_type=ARROW_STREAM)


@router.post("/internal/v1/topics/{topic}/log-ends", include_in_schema=False)
async def relayed_log_ends(topic: str, request: Request, services: Services = Depends(services_of)) -> Response:
    """This node's log end offset of each of the topic's partitions (past its journal's records), once it
    holds the topic's epoch: another node judges offsets by them (broker/ends.py)."""
    _check_node(request, services)
    return json_response(await blocking(services.broker.log_end_offsets, topic, relay=False, taken=True))


def _check_node(request: Request, services: Services) -> None:
    client = request.client.host if request.client else None
    if not from_a_node(request.headers, client, services.settings.cluster_secret):
        raise ClusterAuthFailed("node-to-node calls need the cluster secret (LAKELOG_CLUSTER_SECRET)")


async def _answered(futures: list) -> Response:
    results = await asyncio.gather(*(asyncio.shield(asyncio.wrap_future(f)) for f in futures),
                                   return_exceptions=True)
    return Response(encode_results([_as_answer(result) for result in results]), media_type="application/json")


def _as_answer(result: ProduceResult | BaseException) -> ProduceResult | LakelogError:
    if isinstance(result, (ProduceResult, LakelogError)):
        return result
    if not isinstance(result, Exception):
        raise result
    return RemoteError(f"unexpected error: {type(result).__name__}", "UNKNOWN_SERVER_ERROR", False)
