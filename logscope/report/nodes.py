"""What a report calls the node a rank ran on: the host, or the node folder where that is all that tells nodes
apart. Shared by the text and HTML reports."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def node_labels(ranks: Sequence[Mapping[str, Any]]) -> list[str]:
    """One label per row of the rank table, in order: the host a rank's own lines name; the node's folder (its
    first part, e.g. `node1`) only where it tells nodes apart that the hosts do not (several trees from one
    machine, or no host); nothing on a single node that names no host (its run folder says nothing)."""
    folders = {r.get("node") for r in ranks if r.get("node")}
    nodes_of_host: dict[str, set[str]] = {}
    for r in ranks:
        if r.get("node") and r.get("host"):
            nodes_of_host.setdefault(str(r["host"]), set()).add(str(r["node"]))
    labels = []
    for r in ranks:
        folder = str(r["node"]).split("/")[0] if r.get("node") and len(folders) > 1 else ""
        host = str(r.get("host") or "")
        if host and folder and len(nodes_of_host.get(host, ())) > 1:
            labels.append(f"{host} ({folder})")
        else:
            labels.append(host or folder)
    return labels
