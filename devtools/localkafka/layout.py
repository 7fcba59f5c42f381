"""What a stopped local cluster left in its directory: its nodes, their ports and its
cluster id, read back from the files each node was started with. ``dev kafka start``
starts such a cluster again as a real broker restarts: with its topics and jobs, at
the address every client and the exported ``KAFKA_BOOTSTRAP`` still name.
"""

from __future__ import annotations

import errno
import socket
from pathlib import Path

from devtools.localkafka.cluster import BrokerNode

NODE_PREFIX = "node-"
PROPERTIES = "server.properties"


def recorded_nodes(workdir: Path) -> list[BrokerNode]:
    """The nodes whose configuration ``workdir`` holds, by node id; none for a new one."""
    nodes = []
    for directory in workdir.glob(f"{NODE_PREFIX}*"):
        settings = _read_properties(directory / PROPERTIES)
        ports = _listener_ports(settings.get("listeners", ""))
        if "node.id" not in settings or not {"PLAINTEXT", "CONTROLLER"} <= ports.keys():
            continue
        nodes.append(
            BrokerNode(
                node_id=int(settings["node.id"]),
                port=ports["PLAINTEXT"],
                controller_port=ports["CONTROLLER"],
                directory=directory,
            )
        )
    return sorted(nodes, key=lambda node: node.node_id)


def recorded_cluster_id(nodes: list[BrokerNode]) -> str:
    """The id the nodes' storage was formatted with ("" when none was)."""
    for node in nodes:
        found = _read_properties(node.directory / "data" / "meta.properties").get("cluster.id")
        if found:
            return found
    return ""


def node_paths(workdir: Path) -> list[Path]:
    """What a cluster wrote into ``workdir`` (its nodes' data and logs); a reset deletes
    these and nothing else a user may keep beside them."""
    return sorted(workdir.glob(f"{NODE_PREFIX}*"))


def port_taken(port: int) -> bool:
    """Whether something listens on ``port`` of the loopback. Connections a stopped
    broker left in TIME_WAIT do not count: the broker binds with SO_REUSEADDR too."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def _read_properties(path: Path) -> dict[str, str]:
    try:
        text = path.read_text()
    except OSError:
        return {}
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line)
    return {key.strip(): value.strip() for key, value in pairs if not key.startswith("#")}


def _listener_ports(listeners: str) -> dict[str, int]:
    """``PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093`` by listener name."""
    ports = {}
    for listener in filter(None, listeners.split(",")):
        name, _, address = listener.partition("://")
        port = address.rpartition(":")[2]
        if port.isdigit():
            ports[name] = int(port)
    return ports
