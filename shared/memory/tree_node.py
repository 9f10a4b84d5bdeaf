"""`TreeNode`: one node of the radix cache (`shared.memory.radix_cache`): a run of tokens, the KV
slots holding them, its children and its lock count and LRU tick."""

from __future__ import annotations

import weakref

import numpy as np


class TreeNode:
    """A run of tokens (`key`, [n] int64) and the KV slots holding them (`value`, [n] int64)."""

    # NOTE: the parent is held weakly (a node lives while its parent's `children` or a
    # request holds it), so a tree makes no reference cycle: a dropped cache is freed at once
    # by reference counting, with the simulator's cyclic collector paused (sim.run.driver).
    __slots__ = ("__weakref__", "_parent", "children", "key", "last_access", "lock_ref",
                 "node_id", "value")

    def __init__(self, key: np.ndarray, value: np.ndarray, parent: TreeNode | None,
                 node_id: int, last_access: int, lock_ref: int = 0) -> None:
        self.children: dict[int | tuple[int, ...], TreeNode] = {}
        self.key = key
        self.value = value
        self.parent = parent
        self.node_id = node_id
        self.last_access = last_access
        self.lock_ref = lock_ref

    @property
    def parent(self) -> TreeNode | None:
        return None if self._parent is None else self._parent()

    @parent.setter
    def parent(self, node: TreeNode | None) -> None:
        self._parent = None if node is None else weakref.ref(node)

    def __repr__(self) -> str:
        return f"TreeNode(id={self.node_id}, len={len(self.key)}, lock_ref={self.lock_ref})"
