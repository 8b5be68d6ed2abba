"""deploy/local/stack decides its configuration in pure functions: ports per node, the KRaft
voters, the Cassandra seeds and tokens, server.properties and cassandra.yaml per node, the
topology file, the `env` lines and its command line. These tests call them without starting a JVM.

The script is a stdlib-only executable without a .py suffix, so it is loaded from its path.
Every call passes its ports explicitly: the module reads DOCSTREAM_STACK_* when it loads.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import itertools
import shlex
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from docstream.settings import Settings
from tests.unit.project.test_deploy_compose import settings_env_names

ROOT = Path(__file__).resolve().parents[3]
KAFKA, CONTROLLER, CQL, STORAGE = 19092, 19093, 19042, 17000


def _load_stack() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("deploy_local_stack", str(ROOT / "deploy" / "local" / "stack"))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


stack = _load_stack()


def _properties(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))
    return {k: v for k, v in pairs}


def _kafka(index: int, count: int) -> dict[str, str]:
    return _properties(stack.kafka_properties(index, count, f"/d/{index}", KAFKA, CONTROLLER, "127.0.0.1"))


def _cassandra(index: int, count: int) -> dict[str, Any]:
    dirs = {k: f"/c/{index}/{k}" for k in ("data", "commitlog", "saved_caches", "hints", "cdc_raw")}
    loaded = yaml.safe_load(stack.cassandra_yaml(index, count, dirs, CQL, STORAGE))
    assert isinstance(loaded, dict)
    return loaded


# ---------------------------------------------------------------- Kafka


def test_kafka_nodes_are_100_ports_apart() -> None:
    assert [stack.kafka_node_ports(i, KAFKA, CONTROLLER) for i in (1, 2, 3)] == [
        (19092, 19093), (19192, 19193), (19292, 19293)]


def test_kafka_voters_and_bootstrap_name_every_node() -> None:
    assert stack.kafka_voters(3, KAFKA, CONTROLLER) == "1@127.0.0.1:19093,2@127.0.0.1:19193,3@127.0.0.1:19293"
    assert stack.kafka_voters(1, KAFKA, CONTROLLER) == "1@127.0.0.1:19093"
    assert stack.kafka_bootstrap(3, KAFKA) == "127.0.0.1:19092,127.0.0.1:19192,127.0.0.1:19292"


def test_single_broker_keeps_the_dev_settings() -> None:
    props = _kafka(1, 1)
    assert props["node.id"] == "1"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["log.dirs"] == "/d/1"
    for key in ("default.replication.factor", "offsets.topic.replication.factor", "min.insync.replicas",
                "transaction.state.log.replication.factor", "transaction.state.log.min.isr"):
        assert props[key] == "1", key
    assert "unclean.leader.election.enable" not in props


@pytest.mark.parametrize("index", [1, 2, 3])
def test_cluster_broker_is_a_combined_node_with_replicated_defaults(index: int) -> None:
    props = _kafka(index, 3)
    broker, controller = 19092 + 100 * (index - 1), 19093 + 100 * (index - 1)
    assert props["process.roles"] == "broker,controller"
    assert props["node.id"] == str(index)
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093,2@127.0.0.1:19193,3@127.0.0.1:19293"
    assert props["listeners"] == f"PLAINTEXT://127.0.0.1:{broker},CONTROLLER://127.0.0.1:{controller}"
    assert props["advertised.listeners"] == f"PLAINTEXT://127.0.0.1:{broker}"
    assert props["log.dirs"] == f"/d/{index}"
    assert {k: props[k] for k in (
        "default.replication.factor", "min.insync.replicas", "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor", "transaction.state.log.min.isr",
        "unclean.leader.election.enable")} == {
        "default.replication.factor": "3", "min.insync.replicas": "2", "offsets.topic.replication.factor": "3",
        "transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2",
        "unclean.leader.election.enable": "false"}


def test_cluster_nodes_get_smaller_heaps() -> None:
    assert stack.kafka_heap(1) == ["-Xms256m", "-Xmx512m"]
    assert stack.kafka_heap(3) == ["-Xms128m", "-Xmx384m"]


def test_quorum_status_is_read_from_metadata_quorum_command_output() -> None:
    out = """ClusterId:              0BvdNI9R1eWBWXT9b8sZNA
LeaderId:               2
LeaderEpoch:            1
HighWatermark:          75
MaxFollowerLag:         0
MaxFollowerLagTimeMs:   398
CurrentVoters:          [{"id": 1, "endpoints": ["CONTROLLER://127.0.0.1:19093"]}, \
{"id": 2, "endpoints": ["CONTROLLER://127.0.0.1:19193"]}, {"id": 3, "endpoints": ["CONTROLLER://127.0.0.1:19293"]}]
CurrentObservers:       []
"""  # Kafka 4.1.1, `describe --status` of the 3-node cluster
    assert stack.parse_quorum_status(out) == (2, [1, 2, 3])
    assert stack.parse_quorum_status("CurrentVoters:          [3,1,2]\nLeaderId: 1\n") == (1, [1, 2, 3])
    assert stack.parse_quorum_status("") == (None, [])


# ---------------------------------------------------------------- Cassandra


def test_ring_nodes_live_on_their_own_loopback_address() -> None:
    assert [stack.cassandra_address(i) for i in (1, 2, 3)] == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    assert stack.cassandra_seeds(3, STORAGE) == "127.0.0.1:17000"
    assert stack.cassandra_seeds(1, STORAGE) == "127.0.0.1:17000"
    assert [stack.cassandra_jmx_port(i, 17199) for i in (1, 2, 3)] == [17199, 17200, 17201]


def test_ring_tokens_are_distinct_balanced_and_interleaved() -> None:
    per_node = [stack.cassandra_tokens(i, 3) for i in (1, 2, 3)]
    every = sorted(t for tokens in per_node for t in tokens)
    assert all(len(tokens) == 16 for tokens in per_node)
    assert len(set(every)) == 48
    assert every[0] == -(2**63) and every[-1] < 2**63
    gaps = {b - a for a, b in itertools.pairwise(every)}
    assert max(gaps) - min(gaps) <= 1
    owner = {t: i for i, tokens in enumerate(per_node, 1) for t in tokens}
    assert [owner[t] for t in every[:6]] == [1, 2, 3, 1, 2, 3]


def test_single_cassandra_node_keeps_the_dev_settings() -> None:
    conf = _cassandra(1, 1)
    assert conf["listen_address"] == conf["rpc_address"] == "127.0.0.1"
    assert conf["native_transport_port"] == CQL and conf["storage_port"] == STORAGE
    assert conf["seed_provider"][0]["parameters"][0]["seeds"] == "127.0.0.1:17000"
    assert conf["hinted_handoff_enabled"] is False
    assert "initial_token" not in conf and "broadcast_address" not in conf


@pytest.mark.parametrize("index", [1, 2, 3])
def test_ring_node_config(index: int) -> None:
    conf = _cassandra(index, 3)
    address = f"127.0.0.{index}"
    assert {conf[k] for k in ("listen_address", "rpc_address", "broadcast_address", "broadcast_rpc_address")} == {
        address}
    assert conf["native_transport_port"] == CQL and conf["storage_port"] == STORAGE
    assert conf["seed_provider"][0]["parameters"][0]["seeds"] == "127.0.0.1:17000"
    tokens = [int(t) for t in str(conf["initial_token"]).split(",")]
    assert tokens == stack.cassandra_tokens(index, 3)
    assert conf["num_tokens"] == len(tokens) == 16
    assert conf["auto_bootstrap"] is False
    assert conf["hinted_handoff_enabled"] is True
    assert conf["data_file_directories"] == [f"/c/{index}/data"]
    assert conf["endpoint_snitch"] == "SimpleSnitch"


def test_ring_nodes_get_jmx_and_a_smaller_heap() -> None:
    heap, flags = stack.cassandra_node_flags(2, 3)
    assert heap == ["-Xms768m", "-Xmx768m"]
    assert f"-Dcassandra.jmx.local.port={stack.cassandra_jmx_port(2)}" in flags
    heap, flags = stack.cassandra_node_flags(1, 1)
    assert heap == ["-Xms1g", "-Xmx1g"]
    assert not any("jmx" in f for f in flags)


def test_ring_states_are_read_from_nodetool_status() -> None:
    out = """Datacenter: datacenter1
=======================
Status=Up/Down
|/ State=Normal/Leaving/Joining/Moving
--  Address    Load        Tokens  Owns (effective)  Host ID                               Rack
UN  127.0.0.1  104.3 KiB   16      100.0%            4f1d1c3e-7a7f-4a8e-9f0c-1b2a3c4d5e6f  rack1
DN  127.0.0.2  98.1 KiB    16      100.0%            5a2e2d4f-8b80-4b9f-a01d-2c3b4d5e6f70  rack1
UJ  127.0.0.3  ?           16      ?                 6b3f3e50-9c91-4ca0-b12e-3d4c5e6f7081  rack1
"""
    assert stack.parse_ring(out) == {"127.0.0.1": "UN", "127.0.0.2": "DN", "127.0.0.3": "UJ"}


# ---------------------------------------------------------------- nodes, topology, commands


def test_single_nodes_keep_their_names_and_cluster_nodes_live_apart() -> None:
    assert stack.Node("kafka").name == "kafka"
    assert stack.Node("kafka").base == stack.path("kafka")
    assert stack.Node("cassandra", 2, 3).name == "cassandra-2"
    assert stack.Node("cassandra", 2, 3).base == stack.path("cassandra-cluster", "2")
    assert stack.Node("kafka", 3, 3).base == stack.path("kafka-cluster", "3")
    assert stack.kafka_cluster_id_file(3) != stack.kafka_cluster_id_file(1)
    with pytest.raises(stack.StackError):
        stack.Node("kafka", 4, 3)


def test_kafka_starts_at_once_and_the_ring_one_node_after_the_other() -> None:
    waves = stack.start_waves({"kafka": 3, "cassandra": 3}, ["kafka", "cassandra"])
    assert [[n.name for n in wave] for wave in waves] == [
        ["kafka-1", "kafka-2", "kafka-3", "cassandra-1"], ["cassandra-2"], ["cassandra-3"]]
    waves = stack.start_waves({"kafka": 1, "cassandra": 1}, ["kafka", "cassandra"])
    assert [[n.name for n in wave] for wave in waves] == [["kafka", "cassandra"]]
    assert [[n.name for n in w] for w in stack.start_waves({"kafka": 3, "cassandra": 3}, ["cassandra"])] == [
        ["cassandra-1"], ["cassandra-2"], ["cassandra-3"]]


@pytest.mark.parametrize(("text", "expected"), [
    ('{"kafka": 3, "cassandra": 3}', {"kafka": 3, "cassandra": 3}),
    ('{"kafka": 3}', {"kafka": 3, "cassandra": 1}),
    ('{"kafka": 0, "cassandra": "3"}', {"kafka": 1, "cassandra": 1}),
    ('{"kafka": true, "cassandra": 99}', {"kafka": 1, "cassandra": 1}),
    ("[3]", {"kafka": 1, "cassandra": 1}),
    ("not json", {"kafka": 1, "cassandra": 1}),
])
def test_topology_file_falls_back_to_one_node(text: str, expected: dict[str, int]) -> None:
    assert stack.parse_topology(text) == expected


def test_usage() -> None:
    assert stack.parse_args(["up"]) == ("up", ["kafka", "cassandra"], {}, False, None)
    assert stack.parse_args(["up", "--kafka-brokers", "3", "--cassandra-nodes=3"]) == (
        "up", ["kafka", "cassandra"], {"kafka": 3, "cassandra": 3}, False, None)
    assert stack.parse_args(["up", "cassandra", "--cassandra-nodes", "3"]) == (
        "up", ["cassandra"], {"cassandra": 3}, False, None)
    assert stack.parse_args(["down", "--purge", "kafka"]) == ("down", ["kafka"], {}, True, None)
    assert stack.parse_args(["kill", "kafka", "2"]) == ("kill", ["kafka"], {}, False, 2)
    assert stack.parse_args(["nodes", "cassandra"]) == ("nodes", ["cassandra"], {}, False, None)
    assert stack.parse_args(["fetch"]) == ("fetch", ["kafka"], {}, False, None)
    assert stack.parse_args(["fetch", "cassandra"]) == ("fetch", ["cassandra"], {}, False, None)
    for bad in (["up", "--kafka-brokers", "0"], ["up", "--kafka-brokers"], ["kill", "kafka"],
                ["start", "zookeeper", "1"], ["status", "--kafka-brokers", "3"], ["nodes"], ["env", "kafka"],
                ["fetch", "zookeeper"], ["fetch", "--purge"], ["frobnicate"]):
        with pytest.raises(ValueError, match=r"\w"):
            stack.parse_args(bad)


def _exports(lines: list[str]) -> dict[str, str]:
    out = {}
    for line in lines:
        word, assignment = shlex.split(line)
        assert word == "export"
        key, _, value = assignment.partition("=")
        out[key] = value
    return out


@pytest.mark.parametrize(("brokers", "nodes"), [(1, 1), (3, 3), (3, 1)])
def test_env_lines_are_real_settings_for_the_topology(brokers: int, nodes: int,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    env = _exports(stack.stack_env({"kafka": brokers, "cassandra": nodes}, KAFKA, CQL))
    settings = {k: v for k, v in env.items() if not k.startswith("DOCSTREAM_TEST_")}
    assert set(settings) <= settings_env_names()
    for key, value in settings.items():
        monkeypatch.setenv(key, value)
    loaded = Settings()
    assert loaded.kafka.bootstrap_servers.split(",") == [f"127.0.0.1:{19092 + 100 * i}" for i in range(brokers)]
    assert loaded.kafka.replication_factor == (3 if brokers == 3 else 1)
    assert loaded.cassandra.contact_points == [f"127.0.0.{i}" for i in range(1, nodes + 1)]
    assert loaded.cassandra.port == CQL
    assert loaded.cassandra.replication == (
        f"{{'class': 'SimpleStrategy', 'replication_factor': {3 if nodes == 3 else 1}}}")
    assert loaded.cassandra.consistency == "QUORUM"
    assert env["DOCSTREAM_TEST_KAFKA"] == loaded.kafka.bootstrap_servers
    assert env["DOCSTREAM_TEST_CASSANDRA"] == f"127.0.0.1:{CQL}"
