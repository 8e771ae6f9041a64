"""A real three-master Redis Cluster for the store tests: three
redis-servers in cluster mode on free ports, joined by
`redis-cli --cluster create`, and moved slot by slot the way
`redis-cli --cluster reshard` does it (SETSLOT IMPORTING/MIGRATING, MIGRATE,
SETSLOT NODE), with a pause between keys when a test wants the slot to stay
half-moved for a while."""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from tests.harness import free_port
from tests.stores.servers import RedisServer, wait_until


@dataclass
class Node:
    server: RedisServer
    id: str = ""

    @property
    def port(self) -> int:
        return self.server.port

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=10)

    def call(self, *args: object) -> object:
        with self.client() as c:
            return c.execute_command(*args)

    def key_names(self) -> list[str]:
        with self.client() as c:
            return sorted(k.decode() for k in c.keys("*"))


class LocalCluster:
    def __init__(self, directory: Path, masters: int = 3) -> None:
        self.directory = directory
        self.nodes = [
            Node(
                RedisServer(
                    directory / f"node{n}",
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-port",
                    str(free_port()),
                    "--cluster-node-timeout",
                    "5000",
                )
            )
            for n in range(masters)
        ]

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{n.port}" for n in self.nodes[:2])
        return f"redis+cluster://{hosts}"

    def start(self) -> LocalCluster:
        for node in self.nodes:
            node.server.start()
        cli = shutil.which("redis-cli") or "/usr/bin/redis-cli"
        addresses = [f"127.0.0.1:{n.port}" for n in self.nodes]
        subprocess.run(
            [cli, "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        for node in self.nodes:
            node.id = str(_text(node.call("CLUSTER", "MYID")))
        wait_until(self._ok, timeout=30, what="cluster_state:ok on every node")
        return self

    def _ok(self) -> bool:
        for node in self.nodes:
            info = _text(node.call("CLUSTER", "INFO"))
            if "cluster_state:ok" not in info:
                return False
            # every node must know every slot's owner, or it answers CLUSTERDOWN
            slots = node.call("CLUSTER", "SLOTS")
            assert isinstance(slots, list)
            if sum(int(s[1]) - int(s[0]) + 1 for s in slots) != 16384 or len(slots) < 3:
                return False
        return True

    def stop(self) -> None:
        for node in self.nodes:
            node.server.stop()

    def slot(self, key: str) -> int:
        return int(str(self.nodes[0].call("CLUSTER", "KEYSLOT", key)))

    def owner(self, slot: int) -> Node:
        slots = self.nodes[0].call("CLUSTER", "SLOTS")
        assert isinstance(slots, list)
        for first, last, master, *_ in slots:
            if int(first) <= slot <= int(last):
                port = int(master[1])
                return next(n for n in self.nodes if n.port == port)
        raise AssertionError(f"no node serves slot {slot}")

    def migrate(self, slot: int, target: Node, pause: float = 0.0) -> int:
        """Move `slot` to `target` key by key; returns the keys moved."""
        source = self.owner(slot)
        if source is target:
            return 0
        target.call("CLUSTER", "SETSLOT", slot, "IMPORTING", source.id)
        source.call("CLUSTER", "SETSLOT", slot, "MIGRATING", target.id)
        moved = 0
        while True:
            keys = source.call("CLUSTER", "GETKEYSINSLOT", slot, 1)
            assert isinstance(keys, list)
            if not keys:
                break
            source.call("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
            moved += len(keys)
            time.sleep(pause)
        for node in (target, source, *[n for n in self.nodes if n not in (target, source)]):
            node.call("CLUSTER", "SETSLOT", slot, "NODE", target.id)
        return moved

    def reshard(self, source: Node, target: Node, slots: int) -> None:
        """`redis-cli --cluster reshard`: the first `slots` slots of `source` go to `target`."""
        cli = shutil.which("redis-cli") or "/usr/bin/redis-cli"
        subprocess.run(
            [
                cli,
                "--cluster",
                "reshard",
                f"127.0.0.1:{source.port}",
                "--cluster-from",
                source.id,
                "--cluster-to",
                target.id,
                "--cluster-slots",
                str(slots),
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
