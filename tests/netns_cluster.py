"""A small cluster of "hosts" on this one machine: N Linux network namespaces joined by a bridge, each with a veth
pair (`eth0` inside, an address 10.77.0.(i+1)/24), loopback up; everything deleted afterwards.

Names carry a per-use random suffix, so concurrent test runs never share a namespace or bridge; cleanup runs in a
`finally`, even when the test fails. Needs root (CAP_NET_ADMIN) and `ip` (iproute2); `tc` for `slow_link`.
`netns_available()` says why not, for pytest.skip. Every interface of a namespace goes with it (`ip netns del`);
the bridge is deleted by name.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SUBNET = "10.77.0"
IFNAME = "eth0"
"""The interface name inside every namespace (the same name in each, so GLOO_SOCKET_IFNAME fits them all)."""


@dataclass(frozen=True)
class NetnsHost:
    name: str
    """The namespace's name, also the host's name in the hostfile (`ip netns exec {host}`)."""
    address: str
    root_veth: str
    """The veth end on the bridge, in the root namespace."""


@dataclass(frozen=True)
class NetnsCluster:
    hosts: tuple[NetnsHost, ...]
    bridge: str

    def hostfile_text(self, slots: int = 1) -> str:
        return "".join(f"{h.name} slots={slots} addr={h.address}\n" for h in self.hosts)

    def write_hostfile(self, path: Path, slots: int = 1) -> Path:
        path.write_text(self.hostfile_text(slots), encoding="utf-8")
        return path


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


def netns_available() -> str | None:
    """None when namespaces can be made here, else the reason they cannot."""
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    probe = f"llms-probe-{secrets.token_hex(3)}"
    try:
        _ip("netns", "add", probe)
    except (subprocess.CalledProcessError, OSError) as exc:
        return f"`ip netns add` is not permitted here: {getattr(exc, 'stderr', '') or exc}".strip()
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30)
    return None


@contextmanager
def netns_cluster(n: int) -> Iterator[NetnsCluster]:
    """N namespaced hosts on one bridge; all deleted on exit."""
    suffix = secrets.token_hex(3)
    bridge = f"llbr{suffix}"
    made: list[str] = []
    bridge_made = False
    try:
        _ip("link", "add", bridge, "type", "bridge")
        bridge_made = True
        _ip("link", "set", bridge, "up")
        hosts = []
        for i in range(n):
            name, root_end, ns_end = f"llh{i}-{suffix}", f"llv{i}{suffix}", f"llp{i}{suffix}"
            _ip("netns", "add", name)
            made.append(name)
            _ip("link", "add", root_end, "type", "veth", "peer", "name", ns_end)
            _ip("link", "set", ns_end, "netns", name)
            _ip("-n", name, "link", "set", ns_end, "name", IFNAME)
            address = f"{SUBNET}.{i + 1}"
            _ip("-n", name, "addr", "add", f"{address}/24", "dev", IFNAME)
            _ip("-n", name, "link", "set", IFNAME, "up")
            _ip("-n", name, "link", "set", "lo", "up")
            _ip("link", "set", root_end, "master", bridge)
            _ip("link", "set", root_end, "up")
            hosts.append(NetnsHost(name, address, root_end))
        yield NetnsCluster(tuple(hosts), bridge)
    finally:
        for name in made:  # deleting a namespace deletes its veth end, and with it the pair's root end
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
        if bridge_made:
            subprocess.run(["ip", "link", "del", bridge], capture_output=True, timeout=30)


def slow_link(host: NetnsHost, rate_mbit: float) -> str:
    """A real slow link: a token-bucket filter (`tc qdisc ... tbf`) caps what leaves the host's interface at
    `rate_mbit`; deleted with its namespace. Returns the tc command line run. (tbf rather than `netem delay`: this
    kernel has no sch_netem, and a rate cap is the sub-healthy link a sweep must find — a NIC negotiated down, a
    flapping cable.)"""
    burst_kbit = max(int(rate_mbit * 8), 32)  # >= rate/HZ at HZ <= 1000, as tc-tbf(8) requires; 1 ms of traffic x 8
    argv = ["ip", "netns", "exec", host.name, "tc", "qdisc", "add", "dev", IFNAME, "root", "tbf", "rate",
            f"{rate_mbit:g}mbit", "burst", f"{burst_kbit}kbit", "latency", "100ms"]
    subprocess.run(argv, check=True, capture_output=True, text=True, timeout=30)
    return " ".join(argv)


def leftovers(cluster: NetnsCluster) -> list[str]:
    """Namespaces and the bridge of `cluster` that still exist (empty after a clean exit)."""
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, timeout=30).stdout
    present = {line.split()[0] for line in names.splitlines() if line.strip()}
    return [h.name for h in cluster.hosts if h.name in present] + ([cluster.bridge] if f" {cluster.bridge}:" in
                                                                    links or f" {cluster.bridge}@" in links else [])
