"""The cluster chaos scenarios of issue 19: a 3-broker KRaft cluster and a 3-node Cassandra ring.

Run on the cluster of `deploy/local/stack up --kafka-brokers 3 --cassandra-nodes 3` (tests/run-cluster.sh,
called by `make chaos`), never in `make test` (marker ``cluster``). The module overrides the session's
``kafka_bootstrap`` and ``cassandra_settings`` with the cluster's (every broker; contact points
127.0.0.1..3, keyspace replication 3, QUORUM) and ``chaos_env`` with topic replication 3 and
``min.insync.replicas`` 2 (what `deploy/local/stack env` prints), so the shared pipeline of
tests/chaos/conftest.py runs replicated; the chunks topic's replicas and min ISR are checked.
Each scenario breaks one node (or rolls all three), and asserts what the single-node suite asserts:
every document terminal with the right status, exactly the expected chunk rows (read at QUORUM), no
duplicate DocumentCompleted under exactly-once, no service exit but the one killed. After each one every
node runs again. ``DOCSTREAM_CHAOS_FULL=1`` gives the full sizes (``ChaosScale.cluster_*``).
"""

from __future__ import annotations

import functools
import json
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from cassandra import ConsistencyLevel
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
from cassandra.policies import WhiteListRoundRobinPolicy
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from docstream.errors import DocstreamError, StoreError
from docstream.settings import CassandraSettings
from docstream.store.base import ResultStore
from tests.chaos.harness import (
    CHAOS_ENV,
    MODEL_ID,
    SCALE,
    ChaosReport,
    JobExpectations,
    KafkaProbe,
    LocalStack,
    StackNode,
    completed_per_document,
    good_documents,
    new_job_id,
    rechunked_documents,
)
from tests.fixtures.cassandra import drop_keyspace, wait_until_up
from tests.fixtures.kafka import kafka_settings
from tests.fixtures.services import Pipeline, ServiceProcess

pytestmark = [pytest.mark.cluster, pytest.mark.chaos, pytest.mark.integration,
              pytest.mark.timeout(SCALE.test_timeout_s)]

NODES = 3
_START = ("start it with `DOCSTREAM_STACK_HOME=<home> deploy/local/stack up --kafka-brokers 3 --cassandra-nodes 3` "
          "(the DOCSTREAM_STACK_* ports of this run), or run `bash tests/run-cluster.sh .venv/bin`")
_REPLICATION = "{'class': 'SimpleStrategy', 'replication_factor': 3}"
_PROBE_TIMEOUT_S = 3.0
"""Short, so a probe stuck on a restarted coordinator (KafkaProbe.committed) costs little of a recovery time."""
_QUIET: dict[str, Any] = {"logger": logging.getLogger("docstream.librdkafka")}


# -- the cluster and the pipeline's settings on it --------------------------------------------------


def _cluster_nodes(stack: LocalStack) -> tuple[list[StackNode], list[StackNode]]:
    """The running cluster's nodes (Kafka, Cassandra); fails with the command to start it otherwise."""
    kafka, cassandra = stack.nodes("kafka"), stack.nodes("cassandra")
    if len(kafka) != NODES or len(cassandra) != NODES:
        pytest.fail(f"the cluster scenarios need {NODES} brokers and {NODES} Cassandra nodes in {stack.home}, "
                    f"found {len(kafka)} and {len(cassandra)}: {_START}", pytrace=False)
    down = [n.name for n in (*kafka, *cassandra) if n.state != "running"]
    if down:
        pytest.fail(f"nodes of the cluster in {stack.home} are not running ({', '.join(down)}): {_START}",
                    pytrace=False)
    return kafka, cassandra


def _endpoint(node: StackNode) -> str:
    """host:port of a node's client listener (`stack nodes` adds the other ports after a space)."""
    return node.address.split()[0]


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    """Every broker of the running cluster (overrides tests/fixtures/kafka.py's single broker)."""
    kafka, _ = _cluster_nodes(LocalStack())
    return ",".join(_endpoint(n) for n in kafka)


@pytest.fixture(scope="session")
def cassandra_settings() -> Iterator[CassandraSettings]:
    """The ring's three contact points, a keyspace of this session with replication 3, QUORUM."""
    stack = LocalStack()
    _, cassandra = _cluster_nodes(stack)
    settings = CassandraSettings.model_validate({
        "contact_points": [_endpoint(n).rpartition(":")[0] for n in cassandra],
        "port": stack.cassandra_port,
        "keyspace": f"docstream_cluster_{uuid.uuid4().hex[:12]}",
        "replication": _REPLICATION,
        "consistency": "QUORUM",
        "request_timeout_s": 30.0,
    })
    wait_until_up(settings, 120)
    try:
        yield settings
    finally:
        drop_keyspace(settings)


@pytest.fixture(scope="module")
def chaos_env() -> dict[str, str]:
    """The chaos settings plus replication 3 and min.insync.replicas 2 for every topic the services create."""
    return {**CHAOS_ENV, "DOCSTREAM_KAFKA__REPLICATION_FACTOR": str(NODES), "DOCSTREAM_KAFKA__MIN_INSYNC_REPLICAS": "2"}


@pytest.fixture
def cluster(pipeline: Pipeline, local_stack: LocalStack, kafka_bootstrap: str) -> Iterator[LocalStack]:
    """The cluster, whole and replicated before a scenario; every node running again after it."""
    _cluster_nodes(local_stack)
    _check_replication(kafka_bootstrap, pipeline.topics.chunks)
    try:
        yield local_stack
    finally:
        _restore(local_stack)


def _restore(stack: LocalStack) -> None:
    for component in ("kafka", "cassandra"):
        for node in stack.nodes(component):
            if node.state != "running":
                stack.start(component, node.index)


@functools.cache
def _admin(bootstrap: str) -> AdminClient:
    """One admin client per cluster, renewed after a failed request (``_admin.cache_clear()``): an admin
    client can stay stuck on a broker that restarted (KafkaProbe.committed)."""
    return AdminClient({"bootstrap.servers": bootstrap, **_QUIET})


def _check_replication(bootstrap: str, topic: str) -> None:
    admin = _admin(bootstrap)
    partitions = admin.list_topics(topic, timeout=15).topics[topic].partitions
    assert partitions and all(len(p.replicas) == NODES for p in partitions.values()), (
        f"{topic} is not replicated {NODES} times: {[(p.id, p.replicas) for p in partitions.values()]}")
    resource = ConfigResource(ResourceType.TOPIC, topic)
    config = admin.describe_configs([resource])[resource].result(15)
    assert config["min.insync.replicas"].value == "2", f"{topic}: min.insync.replicas {config['min.insync.replicas']}"


# -- Kafka metadata -----------------------------------------------------------------------------------


def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """partition → leader broker id (-1: none) of ``topic``."""
    meta = _admin(bootstrap).list_topics(topic, timeout=10).topics[topic]
    return {p: int(m.leader) for p, m in meta.partitions.items()}


def _led_by_another(bootstrap: str, topic: str, partition: int, broker: int) -> bool:
    try:
        return _leaders(bootstrap, topic)[partition] not in (broker, -1)
    except KafkaException:
        _admin.cache_clear()
        return False  # the metadata request hit the dead broker: ask again


def _in_every_isr(bootstrap: str, broker: int) -> bool:
    """Whether ``broker`` is in the ISR of every partition (of every topic) it holds a replica of."""
    try:
        topics = _admin(bootstrap).list_topics(timeout=10).topics
    except KafkaException:
        _admin.cache_clear()
        return False
    return all(broker in m.isrs for t in topics.values() for m in t.partitions.values() if broker in m.replicas)


def _committed(probe: KafkaProbe, group: str, topic: str) -> dict[int, int] | None:
    try:
        return probe.committed(group, topic)
    except (KafkaException, DocstreamError):
        return None  # the group coordinator fails over (or restarts): ask again


def _moved(probe: KafkaProbe, group: str, topic: str, since: dict[int, int]) -> bool:
    """Whether ``group`` committed past ``since`` on one of its partitions, or has all of them caught up."""
    committed = _committed(probe, group, topic)
    if committed is None:
        return False
    try:
        ends = probe.ends(topic)
    except KafkaException:
        return False
    return any(committed[p] > at for p, at in since.items()) or all(committed[p] >= ends[p] for p in since)


# -- shared steps -------------------------------------------------------------------------------------


def _alive(pipeline: Pipeline, *but: str) -> tuple[str, ...]:
    """Every started service of the pipeline but ``but`` (the one a scenario kills)."""
    return tuple(n for n, s in pipeline.services.items() if s.proc is not None and n not in but)


def _job(tmp_path: Path, scenario: str, seed: int) -> JobExpectations:
    return JobExpectations(new_job_id(scenario), good_documents(tmp_path / "docs", SCALE.cluster_docs,
                                                                seed=SCALE.seed + seed, pages=SCALE.pages))


def _submit_and_wait(pipeline: Pipeline, probe: KafkaProbe, exp: JobExpectations, tmp_path: Path, fraction: float,
                     alive: Sequence[str]) -> tuple[float, float]:
    """Submit the job's documents; wait until ``fraction`` of its chunks are embedded: (started, fraction reached)."""
    base = probe.total(pipeline.topics.results)
    started = time.monotonic()
    pipeline.submit([tmp_path / "docs"], exp.job_id)
    return started, _under_way(pipeline, probe, exp, base, fraction, alive)


def _under_way(pipeline: Pipeline, probe: KafkaProbe, exp: JobExpectations, base: int, fraction: float,
               alive: Sequence[str]) -> float:
    """Wait until ``fraction`` of the job's chunks are embedded; the fraction there is."""
    topic = pipeline.topics.results
    target = max(1, round(exp.chunk_total * fraction))
    pipeline.until(lambda: probe.total(topic) - base >= target, f"{fraction:.0%} of the chunks to be embedded",
                   SCALE.job_timeout_s, alive=alive)
    return (probe.total(topic) - base) / exp.chunk_total


def _seconds_until(pipeline: Pipeline, predicate: Callable[[], Any], since: float, what: str,
                   alive: Sequence[str]) -> float:
    pipeline.until(predicate, what, SCALE.job_timeout_s, alive=alive, poll_s=0.2)
    return round(time.monotonic() - since, 2)


def _finished(exp: JobExpectations, store: ResultStore) -> bool:
    try:
        return exp.finished(store)
    except StoreError:
        return False  # a coordinator went away mid-read: poll again


def _finish(pipeline: Pipeline, store: ResultStore, bootstrap: str, exp: JobExpectations, started: float,
            alive: Sequence[str]) -> dict[str, Any]:
    """Wait for the job; check its documents and rows (QUORUM reads) and its DocumentCompleted; figures."""
    pipeline.until(lambda: _finished(exp, store), f"job {exp.job_id} to complete", SCALE.job_timeout_s,
                   alive=alive, poll_s=0.5)
    job_s = round(time.monotonic() - started, 1)
    figures = exp.check(store, rechunked=rechunked_documents(pipeline))
    completed = completed_per_document(bootstrap, pipeline.topics.completed, kafka_settings(bootstrap).kafka,
                                       exp.doc_ids())
    pipeline.check_alive(*alive)
    duplicates = sum(n - 1 for n in completed.values())
    assert sorted(completed) == sorted(exp.doc_ids()), "a document has no DocumentCompleted"
    assert duplicates == 0, f"duplicate DocumentCompleted under exactly-once: {completed.most_common(5)}"
    return {**figures, "job_s": job_s, "completed_records": sum(completed.values()),
            "completed_duplicates": duplicates, "exactly_once": True}


# -- 1. kill -9 the leader of a busy chunks partition ---------------------------------------------------


def test_kill_9_the_leader_of_a_busy_chunks_partition_and_restart_it_loses_and_doubles_nothing(
    pipeline: Pipeline, cluster: LocalStack, cassandra_store: ResultStore, kafka_bootstrap: str,
    chaos_report: ChaosReport, tmp_path: Path,
) -> None:
    exp = _job(tmp_path, "leader", 191)
    topics, group = pipeline.topics, pipeline.topics.group("inference")
    alive = _alive(pipeline)
    probe = KafkaProbe(kafka_bootstrap, timeout_s=_PROBE_TIMEOUT_S)
    try:
        started, progress = _submit_and_wait(pipeline, probe, exp, tmp_path, 0.2, alive)
        ends, committed = probe.ends(topics.chunks), probe.committed(group, topics.chunks)
        busy = max(ends, key=lambda p: (ends[p] - committed[p], ends[p]))  # most records waiting, then most records
        leader = _leaders(kafka_bootstrap, topics.chunks)[busy]
        cluster.kill("kafka", leader)
        killed_at = time.monotonic()
        try:
            failover_s = _seconds_until(
                pipeline, lambda: _led_by_another(kafka_bootstrap, topics.chunks, busy, leader), killed_at,
                f"a new leader of {topics.chunks}[{busy}]", alive)
            recovery_s = _seconds_until(pipeline, lambda: _moved(probe, group, topics.chunks, {busy: committed[busy]}),
                                        killed_at, f"inference to commit on {topics.chunks}[{busy}] again", alive)
            pipeline.until(lambda: time.monotonic() >= killed_at + SCALE.cluster_down_s, "the broker's down time",
                           SCALE.job_timeout_s, alive=alive, poll_s=0.2)
        finally:
            start_s = cluster.start("kafka", leader)
        restarted_at = time.monotonic()
        isr_s = _seconds_until(pipeline, lambda: _in_every_isr(kafka_bootstrap, leader), restarted_at,
                               f"broker {leader} back in every ISR", alive)
        figures = _finish(pipeline, cassandra_store, kafka_bootstrap, exp, started, alive)
    finally:
        probe.close()
    chaos_report.record("c1 partition leader kill -9", **figures, partition=busy, broker=leader,
                        progress_at_kill=round(progress, 3), down_s=round(restarted_at - killed_at, 1),
                        new_leader_s=failover_s, recovery_s=recovery_s, start_s=round(start_s, 1),
                        back_in_isr_s=isr_s)


# -- 2. kill -9 one Cassandra node -------------------------------------------------------------------------


def _rows_at_one_via(settings: CassandraSettings, host: str, exp: JobExpectations) -> int:
    """Chunk rows of the job read at ONE through ``host`` alone as coordinator (its own copy, usually)."""
    only = ExecutionProfile(load_balancing_policy=WhiteListRoundRobinPolicy([host]),
                            consistency_level=ConsistencyLevel.ONE)
    cluster = Cluster([host], port=settings.port, connect_timeout=30, execution_profiles={EXEC_PROFILE_DEFAULT: only})
    try:
        session = cluster.connect(settings.keyspace)
        query = "SELECT COUNT(*) FROM chunks WHERE doc_id = %s AND model_id = %s"
        return sum(int(session.execute(query, (d, MODEL_ID), timeout=30).one()[0]) for d in exp.doc_ids())
    finally:
        cluster.shutdown()


def test_kill_9_one_cassandra_node_writes_go_on_at_quorum_and_it_rejoins(
    pipeline: Pipeline, cluster: LocalStack, cassandra_store: ResultStore, cassandra_settings: CassandraSettings,
    kafka_bootstrap: str, chaos_report: ChaosReport, tmp_path: Path,
) -> None:
    exp = _job(tmp_path, "cassandra-node", 192)
    node = random.Random(SCALE.seed + 192).randint(1, NODES)
    host = next(_endpoint(n).rpartition(":")[0] for n in cluster.nodes("cassandra") if n.index == node)
    topics, group = pipeline.topics, pipeline.topics.group("inference")
    alive = _alive(pipeline)
    probe = KafkaProbe(kafka_bootstrap, timeout_s=_PROBE_TIMEOUT_S)
    try:
        started, progress = _submit_and_wait(pipeline, probe, exp, tmp_path, 0.2, alive)
        committed = probe.committed(group, topics.chunks)
        cluster.kill("cassandra", node)
        killed_at = time.monotonic()
        embedded_at_kill = probe.total(topics.results)
        try:
            # inference commits only after the rows are written (at QUORUM): a commit is a write done
            recovery_s = _seconds_until(pipeline, lambda: _moved(probe, group, topics.chunks, committed), killed_at,
                                        "inference to commit while a Cassandra node is down", alive)
            pipeline.until(lambda: time.monotonic() >= killed_at + SCALE.cluster_down_s, "the node's down time",
                           SCALE.job_timeout_s, alive=alive, poll_s=0.2)
            embedded_while_down = probe.total(topics.results) - embedded_at_kill
        finally:
            start_s = cluster.start("cassandra", node)
        restarted_at = time.monotonic()
        figures = _finish(pipeline, cassandra_store, kafka_bootstrap, exp, started, alive)
    finally:
        probe.close()
    # catching up (hints): the job's rows as the restarted node coordinates them at ONE; reported, not asserted
    found = _rows_at_one_via(cassandra_settings, host, exp)
    deadline = time.monotonic() + 120
    while found < exp.chunk_total and time.monotonic() < deadline:
        time.sleep(2)
        found = _rows_at_one_via(cassandra_settings, host, exp)
    chaos_report.record(
        "c2 Cassandra node kill -9", **figures, node=node, progress_at_kill=round(progress, 3),
        down_s=round(restarted_at - killed_at, 1), recovery_s=recovery_s,
        chunks_embedded_while_down=embedded_while_down, start_s=round(start_s, 1), rows_at_one_via_restarted_node=found,
        caught_up_s_after_restart=round(time.monotonic() - restarted_at, 1) if found == exp.chunk_total else None,
    )
    assert embedded_while_down > 0, "nothing was written while one node of three was down"


# -- 3. a rolling restart of the three brokers ----------------------------------------------------------------


def test_a_rolling_restart_of_every_broker_during_a_job_loses_and_doubles_nothing(
    pipeline: Pipeline, cluster: LocalStack, cassandra_store: ResultStore, kafka_bootstrap: str,
    chaos_report: ChaosReport, tmp_path: Path,
) -> None:
    exp = _job(tmp_path, "rolling", 193)
    topics, group = pipeline.topics, pipeline.topics.group("inference")
    alive = _alive(pipeline)
    steps = []
    probe = KafkaProbe(kafka_bootstrap, timeout_s=_PROBE_TIMEOUT_S)
    try:
        started, progress = _submit_and_wait(pipeline, probe, exp, tmp_path, 0.1, alive)
        for node in cluster.nodes("kafka"):
            committed = pipeline.until(lambda: _committed(probe, group, topics.chunks), "the group's offsets",
                                       SCALE.job_timeout_s, alive=alive, poll_s=0.2)
            stop_s = cluster.stop("kafka", node.index)
            start_s = cluster.start("kafka", node.index)
            restarted_at = time.monotonic()
            isr_s = _seconds_until(pipeline, lambda b=node.index: _in_every_isr(kafka_bootstrap, b), restarted_at,
                                   f"broker {node.index} back in every ISR", alive)
            recovery_s = _seconds_until(pipeline, lambda c=committed: _moved(probe, group, topics.chunks, c),
                                        restarted_at, "inference to commit again", alive)
            steps.append({"broker": node.index, "stop_s": round(stop_s, 1), "start_s": round(start_s, 1),
                          "back_in_isr_s": isr_s, "recovery_s": recovery_s})
        done_at_end_of_roll = _finished(exp, cassandra_store)
        figures = _finish(pipeline, cassandra_store, kafka_bootstrap, exp, started, alive)
    finally:
        probe.close()
    chaos_report.record("c3 rolling broker restart", **figures, progress_at_start=round(progress, 3), steps=steps,
                        job_done_when_the_roll_ended=done_at_end_of_roll)


# -- 4. two inference processes, one killed --------------------------------------------------------------------

_ASSIGNMENT_EVENTS = ("partitions_assigned", "partitions_revoked", "partitions_lost")


def _held(service: ServiceProcess) -> set[str]:
    """The partitions the service's current run holds, from its assignment events (cooperative: increments)."""
    held: set[str] = set()
    for line in service.log_text().splitlines():
        if not any(f'"event": "{e}"' in line for e in _ASSIGNMENT_EVENTS):
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line cut short by a kill
        partitions = set(event.get("partitions") or ())
        held = held | partitions if event["event"] == "partitions_assigned" else held - partitions
    return held


def test_two_inference_processes_share_the_chunks_and_one_killed_leaves_its_partitions_to_the_other(
    pipeline: Pipeline, cluster: LocalStack, cassandra_store: ResultStore, kafka_bootstrap: str,
    chaos_report: ChaosReport, tmp_path: Path,
) -> None:
    exp = _job(tmp_path, "rebalance", 194)
    topics, group = pipeline.topics, pipeline.topics.group("inference")
    every = {f"{topics.chunks}[{p}]" for p in _leaders(kafka_bootstrap, topics.chunks)}
    first, second = pipeline.service("inference"), pipeline.add("inference-2", "inference")
    second.start()
    probe = KafkaProbe(kafka_bootstrap, timeout_s=_PROBE_TIMEOUT_S)
    try:
        pipeline.until(lambda: _held(first) and _held(second) and _held(first) | _held(second) == every,
                       "the two inference processes to share the chunks partitions", 180, alive=_alive(pipeline))
        shared = {first.name: sorted(_held(first)), second.name: sorted(_held(second))}
        victim, survivor = random.Random(SCALE.seed + 194).sample([first, second], 2)
        started, progress = _submit_and_wait(pipeline, probe, exp, tmp_path, 0.25, _alive(pipeline))
        taken = {int(name.rpartition("[")[2].rstrip("]")) for name in _held(victim)}
        committed = probe.committed(group, topics.chunks)
        victim.kill9()
        killed_at = time.monotonic()
        alive = _alive(pipeline, victim.name)
        takeover_s = _seconds_until(pipeline, lambda: _held(survivor) == every, killed_at,
                                    f"{survivor.name} to take over every partition", alive)
        recovery_s = _seconds_until(
            pipeline, lambda: _moved(probe, group, topics.chunks, {p: committed[p] for p in taken}), killed_at,
            f"commits again on the partitions {victim.name} held", alive)
        figures = _finish(pipeline, cassandra_store, kafka_bootstrap, exp, started, alive)
    finally:
        probe.close()
        second.stop()
        del pipeline.services[second.name]  # the module's other scenarios run one inference
    chaos_report.record("c4 inference rebalance under load", **figures, shared=shared, killed=victim.name,
                        partitions_taken_over=sorted(taken), progress_at_kill=round(progress, 3),
                        takeover_s=takeover_s, recovery_s=recovery_s)


# -- c0: migrations from several processes at once ------------------------------------------------


def _migrate_into(store: ResultStore, errors: list[BaseException]) -> None:
    try:
        store.migrate()
    except BaseException as exc:  # handed to the test thread
        errors.append(exc)


def test_three_processes_migrating_one_new_keyspace_at_once_on_the_ring_all_succeed(
    cassandra_settings: CassandraSettings, chaos_report: ChaosReport,
) -> None:
    """Services starting together each run ``migrate()`` on a keyspace nobody created yet.

    Before the migration lease (docs/storage.md "Migrations") this failed in 4 of 6 rounds on the
    ring ("table schema_migrations does not exist"). Every round: a new RF 3 keyspace, three stores
    (each its own driver session, as three processes) migrating at once; all must succeed and all
    must see every migration applied.
    """
    import threading

    from docstream.store.cassandra import CassandraStore
    from docstream.store.schema import load_migrations

    rounds = 3 if SCALE.mode == "full" else 1
    expected = {m.version for m in load_migrations("cql") if not m.per_dimension}
    seconds: list[float] = []
    for _ in range(rounds):
        settings = cassandra_settings.model_copy(update={"keyspace": f"docstream_migrate_{uuid.uuid4().hex[:10]}"})
        stores = [CassandraStore(settings) for _ in range(3)]
        errors: list[BaseException] = []

        started = time.monotonic()
        threads = [threading.Thread(target=_migrate_into, args=(s, errors), name=f"migrate-{i}")
                   for i, s in enumerate(stores)]
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=600)
            seconds.append(round(time.monotonic() - started, 1))
            assert not any(thread.is_alive() for thread in threads), "a migrate never finished"
            assert errors == []
            for store in stores:
                assert expected <= set(store.applied_migrations())
        finally:
            for store in stores:
                store.close()
            drop_keyspace(settings)
    chaos_report.record("c0 concurrent migrate", rounds=rounds, processes=3, seconds=seconds)
