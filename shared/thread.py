"""A chat is a tree: a message answers or follows its parent, and the children of one parent are
branches (a regenerated answer, an edited question). What a chat shows is one path from the root,
taking at each fork the child chosen on the device, or the newest; what an assistant is asked
about is the path to the question. The server and the browser walk it the same way, here.

A message whose parent is gone (deleted) follows the message created just before it, so deleting
one message in the middle of a chat keeps the rest of the chat together. Pure: rows in, paths out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

ROOT = ""  # the fork of a chat's first messages


@dataclass(frozen=True)
class Link:
    """What the tree needs of a message."""

    id: str
    parent_id: str | None
    created_at: str


@dataclass(frozen=True)
class Step:
    """One message of a shown path, and where it stands among its siblings."""

    id: str
    fork: str  # its parent's id, or ROOT
    siblings: tuple[str, ...]  # oldest first, itself included

    @property
    def index(self) -> int:
        return self.siblings.index(self.id)


def parents(links: Iterable[Link]) -> dict[str, str]:
    """Each message's parent in the tree (ROOT for the first ones), in the order of creation (ids
    are UUIDv7: they break ties of time in that order too).

    Clocks of devices differ, so a parent may look newer than its child; an orphan then never
    follows one of its own descendants (that would be a cycle, cut off from the root): it starts
    a branch at the root instead."""
    ordered = sorted(links, key=lambda link: (link.created_at, link.id))
    ids = {link.id for link in ordered}
    found = {link.id: link.parent_id or ROOT for link in ordered if link.parent_id is None or link.parent_id in ids}
    previous = ROOT
    for link in ordered:
        if link.id not in found:
            found[link.id] = ROOT if _descends(previous, link.id, found) else previous
        previous = link.id
    return found


def _descends(node: str, ancestor: str, up: dict[str, str]) -> bool:
    seen = set()
    while node in up and node not in seen:
        if node == ancestor:
            return True
        seen.add(node)
        node = up[node]
    return node == ancestor


def children(links: Iterable[Link]) -> dict[str, list[str]]:
    """Fork -> its children's ids, oldest first."""
    tree: dict[str, list[str]] = {}
    for child, fork in parents(links).items():
        tree.setdefault(fork, []).append(child)
    return tree


def shown_path(links: Iterable[Link], chosen: dict[str, str]) -> list[Step]:
    """The path from the root: at each fork the child in ``chosen`` (fork -> child id), else the
    newest."""
    tree = children(links)
    path: list[Step] = []
    fork, seen = ROOT, set()
    while fork in tree and fork not in seen:
        seen.add(fork)
        kids = tree[fork]
        pick = chosen.get(fork)
        child = pick if pick in kids else kids[-1]
        path.append(Step(child, fork, tuple(kids)))
        fork = child
    return path


def path_to(links: Iterable[Link], message_id: str) -> list[str]:
    """The ids from the chat's start to ``message_id`` (included); empty when it is not there."""
    up = parents(links)
    chain: list[str] = []
    current = message_id
    while current in up and current not in chain:
        chain.append(current)
        current = up[current]
    return chain[::-1]
