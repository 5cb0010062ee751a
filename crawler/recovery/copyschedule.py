"""When a whole copy of a piece of durable state is worth writing to OUT again.

With a remote output a shard's store reaches OUT as a log of its changes plus, now and
then, a whole snapshot (crawler.recovery.statelog); the seen sets and the content index
reach it as whole copies (crawler.recovery.statefiles). Copying a piece whole every
``runtime.state_ship_interval_s`` makes the bytes sent per minute grow with the piece's
size, i.e. with the crawl's age. :class:`CopySchedule` copies it again only once what
changed since the last copy reaches ``ratio`` times that copy's size:

* between two copies at least ``ratio x size`` bytes of change were written, so a copy
  costs at most ``1 / ratio`` times the change written since the last one: the bytes sent
  per minute are at most ``(1 + 1 / ratio)`` times the rate of change, at any size;
* a restore reads the last copy and at most ``ratio x`` its size of what came after.

A piece up to ``floor_bytes`` is copied whenever it changed (small crawls behave as if
copied every period: the floor bounds what that costs per period).
"""

from __future__ import annotations

from crawler.config.sections import RuntimeConfig


class CopySchedule:
    """Whether a copy of a piece of state is due (module docstring).

    Args:
        ratio: a copy is due once the change since the last copy reaches this share of its size.
        floor_bytes: a piece whose last copy is at most this size is copied whenever it changed.
    """

    def __init__(self, ratio: float, floor_bytes: int) -> None:
        if ratio <= 0:
            raise ValueError(f"ratio must be > 0, got {ratio}")
        self.ratio = ratio
        self.floor_bytes = floor_bytes

    def due(self, changed_bytes: float, last_copy_bytes: float) -> bool:
        """Whether to copy now, ``changed_bytes`` (> 0: something changed) after a copy of
        ``last_copy_bytes`` (0: none yet)."""
        if changed_bytes <= 0:
            return False
        if last_copy_bytes <= self.floor_bytes:
            return True
        return changed_bytes >= self.ratio * last_copy_bytes

    @classmethod
    def of(cls, runtime: RuntimeConfig) -> "CopySchedule":
        """The schedule ``runtime.state_snapshot_log_ratio`` and ``state_snapshot_floor_mb`` set."""
        return cls(runtime.state_snapshot_log_ratio, int(runtime.state_snapshot_floor_mb * 1024 * 1024))


class CopyGate:
    """The whole copies of one piece of state that has no log (a seen set, a content index
    shard: crawler.recovery.statefiles): copy again once what changed since the last copy
    reaches the schedule's share of what the piece held then; at the end of a run, copy
    whatever changed. Changes and holdings are counted in the piece's own unit (keys
    added or removed, bytes appended).

    A copy older than the piece costs what the piece's restore says it costs (a seen set's:
    duplicate deliveries the owners refuse, counted), never a URL.
    """

    def __init__(self) -> None:
        self._changed = 0.0  # changes counted since the last copy
        self._held = 0.0  # what the piece held at the last copy (its unit)
        self._size = 0  # the last copy's bytes
        self._copied = False
        self._length = 0  # an append-only piece's bytes at the last grown_to()
        self._marked = 0.0  # the changes counted when the last due() was asked
        self.copies = 0
        self.deferred = 0

    def note(self, changes: float) -> None:
        """Count ``changes`` (keys added or removed, bytes appended)."""
        self._changed += changes

    def grown_to(self, length: int) -> None:
        """Count an append-only piece's growth (a content index shard's log) to ``length`` bytes."""
        self._changed += max(0, length - self._length)
        self._length = length

    def due(self, schedule: CopySchedule, *, final: bool = False) -> bool:
        """Whether to copy now by ``schedule`` (class docstring); the first call of an
        incarnation copies (what OUT holds may be older than the node's disk was)."""
        self._marked = self._changed  # what a copy started now holds; later changes stay counted
        if not self._copied:
            return True
        if self._changed <= 0:
            return False
        if final or self._size <= schedule.floor_bytes:
            return True
        if self._changed >= schedule.ratio * max(self._held, 1.0):
            return True
        self.deferred += 1
        return False

    def copied(self, size_bytes: int, held: float) -> None:
        """The copy :meth:`due` allowed was written: ``size_bytes``, of a piece holding
        ``held`` (its unit). Changes counted since that call may not be in it: they count
        toward the next copy."""
        self._copied, self._size, self._held = True, size_bytes, held
        self._changed -= self._marked
        self._marked = 0.0
        self.copies += 1
