"""Which controller replica holds which SpecTuner: a stable hash of `namespace/name` modulo the
shard count (pure; no I/O).

The hash is SHA-256, not Python's `hash()` (salted per process) nor the order objects are
listed in: every replica, and every restart of one, must put an object in the same shard
without talking to the others. The name (not the uid) is hashed so that which shard holds an
object is known before it exists, and a SpecTuner deleted and created again lands where it
was."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from autotuner.errors import InputError

Key = tuple[str, str]  # namespace, name
# A StatefulSet pod's name: the set's name, a dash, its ordinal (`spec-autotuner-fleet-1`).
ORDINAL = re.compile(r"-(\d+)$")


def shard_of(key: Key, count: int) -> int:
    """The shard (0 .. count-1) that holds the SpecTuner `key`."""
    digest = hashlib.sha256("/".join(key).encode()).digest()
    return int.from_bytes(digest[:8], "big") % count


@dataclass(frozen=True)
class Shard:
    """This replica's share: the SpecTuners whose `shard_of` is `index`."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if self.count < 1:
            raise InputError(f"shards: {self.count}; there must be at least one")
        if not 0 <= self.index < self.count:
            raise InputError(f"shard {self.index} is not one of 0..{self.count - 1}")

    def holds(self, key: Key) -> bool:
        return self.count == 1 or shard_of(key, self.count) == self.index

    @property
    def label(self) -> str:
        """As the status says it: `1/2` (shard 1 of 2)."""
        return f"{self.index}/{self.count}"

    def lease_name(self, base: str) -> str:
        """One Lease per shard, so two replicas of one shard never both step it; one shard
        keeps the unsharded name."""
        return base if self.count == 1 else f"{base}-shard-{self.index}"


def ordinal(hostname: str) -> int | None:
    """A StatefulSet pod's ordinal from its hostname (None when it has none)."""
    found = ORDINAL.search(hostname)
    return int(found.group(1)) if found else None


def shard_for(count: int, index: int | None, hostname: str) -> Shard:
    """This replica's shard: `index` when given; else, when sharded, the ordinal of its
    StatefulSet pod (`HOSTNAME` ending in -N); an error when neither says which."""
    if index is None and count > 1:
        index = ordinal(hostname)
        if index is None:
            raise InputError(
                f"--shards {count}: say which with --shard, or run as a StatefulSet pod "
                f"(hostname ending in -N; this one is {hostname!r})"
            )
    return Shard(index or 0, count)
