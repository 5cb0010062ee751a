"""The optional parts of a shard, and what each is when a crawl has not turned it on.

A shard may run with regions (crawler.placement.handover), news sources
(crawler.freshness.news), recrawl's refresh feed (crawler.frontier.refreshfeed), a state
log in a remote OUT (crawler.recovery.statelog), page.fetched events
(crawler.events.emitter) and durable state (crawler.engine.checkpoint). Each is
described here by what the shard asks of it, and each has a null object that does the
nothing a crawl without the feature expects -- so the dispatcher and the shard call
every part the same way instead of testing for ``None`` at each use (the Null Object
pattern; the assembly, crawler.engine.assembly, picks the real or the null one once).
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence

from crawler.errors import ConfigError, DeliveryError
from crawler.frontier.urlitem import UrlItem
from crawler.output.schema import OutcomeRow
from crawler.frontier.recrawl import Schedule
from crawler.parse.feeds import Feed
from crawler.placement.peers import HostState, HostPlacement


class RegionsPart(Protocol):
    """What a shard asks of its side of regions (crawler.placement.handover.Regions)."""

    async def route(self, items: Sequence[UrlItem]) -> tuple[list[UrlItem], int]: ...
    async def adopt(self, state: HostState) -> int: ...
    async def before_fetch(self, host: str, origin_: str) -> bool: ...
    async def place(self, host: str, region: str | None) -> HostPlacement: ...
    async def located_at(self, host: str, region: str) -> None: ...
    def owner_elsewhere(self, key: str) -> str | None: ...
    def describe(self, key: str) -> HostPlacement | None: ...
    def pending(self) -> int: ...
    def stats(self) -> dict[str, Any] | None: ...
    async def close(self) -> None: ...


class NoRegions:
    """One region: every host lives here, nothing is forwarded, probed or moved."""

    enabled = False

    def __init__(self, shard_id: str) -> None:
        self._shard_id = shard_id

    async def route(self, items: Sequence[UrlItem]) -> tuple[list[UrlItem], int]:
        return list(items), 0

    async def adopt(self, state: HostState) -> int:
        raise DeliveryError(f"{self._shard_id} has no regions: it cannot adopt {state.host}")

    async def before_fetch(self, host: str, origin_: str) -> bool:
        return False

    async def place(self, host: str, region: str | None) -> HostPlacement:
        raise ConfigError("region: this runtime has one region (runtime.regions needs the Ray runtime)")

    async def located_at(self, host: str, region: str) -> None:
        raise ConfigError(f"located: {self._shard_id} has no regions")

    def owner_elsewhere(self, key: str) -> str | None:
        return None

    def describe(self, key: str) -> HostPlacement | None:
        return None

    def pending(self) -> int:
        return 0

    def stats(self) -> dict[str, Any] | None:
        return None

    async def close(self) -> None:
        return None


class NewsPart(Protocol):
    """What a shard asks of its news policy (crawler.freshness.news.NewsPolicy)."""

    def credit(self, items: Sequence[UrlItem]) -> None: ...
    def after_fetch(self, item: UrlItem, status: int | None, schedule: Schedule | None,
                    feed: Feed | None) -> Schedule | None: ...
    def stats(self, *, fresh: bool = False) -> dict[str, Any]: ...


class NoNews:
    """News sources off: no credit, the recrawl schedule as the pipeline made it."""

    def credit(self, items: Sequence[UrlItem]) -> None:
        return None

    def after_fetch(self, item: UrlItem, status: int | None, schedule: Schedule | None,
                    feed: Feed | None) -> Schedule | None:
        return schedule

    def stats(self, *, fresh: bool = False) -> dict[str, Any]:
        return {}


class FeedPart(Protocol):
    """What a shard asks of its refresh feed (crawler.frontier.refreshfeed.RefreshFeed)."""

    def tick(self) -> int: ...
    def after_record(self, item: UrlItem, row: OutcomeRow, schedule: Schedule | None) -> None: ...


class NoFeed:
    """Recrawl off (or no durable store): nothing is due again."""

    def tick(self) -> int:
        return 0

    def after_record(self, item: UrlItem, row: OutcomeRow, schedule: Schedule | None) -> None:
        return None


class JournalPart(Protocol):
    """What a shard asks of its state log (crawler.recovery.statelog.StateLog)."""

    async def run(self) -> None: ...
    def stop(self) -> None: ...
    async def synced(self) -> None: ...
    def stats(self) -> Mapping[str, int] | None: ...


class NoJournal:
    """A local output: the store on this disk is the state; nothing to copy to OUT."""

    async def run(self) -> None:
        return None

    def stop(self) -> None:
        return None

    async def synced(self) -> None:
        return None

    def stats(self) -> Mapping[str, int] | None:
        return None


class EventsPart(Protocol):
    """What a shard asks of its page.fetched events (crawler.events.emitter.EventEmitter)."""

    async def close(self) -> None: ...
    def stats(self) -> dict[str, Any] | None: ...


class NoEvents:
    """``events.sink: none``."""

    async def close(self) -> None:
        return None

    def stats(self) -> dict[str, Any] | None:
        return None


class CheckpointPart(Protocol):
    """What a shard asks of its checkpointer (crawler.engine.checkpoint.Checkpointer)."""

    def save(self, *, journal: bool = False) -> None: ...


class NoCheckpoints:
    """A crawl without durable state: an operator's setting lives as long as the run."""

    def save(self, *, journal: bool = False) -> None:
        return None
