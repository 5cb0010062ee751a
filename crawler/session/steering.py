"""The operator's calls on a running crawl, for both runtimes: add seeds, set a host's
policy or region, and look at a host or a URL (crawler.session.crawlsession.CrawlSession delegates
here; the CLI, the notebook and the HTTP control API reach them through the session).

Also the admission of depth-0 URLs (:meth:`Steering.deliver_new`) that adding seeds
shares with the session's own seeding.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, Sequence

from crawler.frontier.urlitem import check_priority
from crawler.config.settings import CrawlConfig
from crawler.errors import ConfigError, SeedError, ServiceUnavailableError
from crawler.frontier.urlitem import UrlItem
from crawler.policy.hostpolicy import HostPolicy, PolicyChange, parse_host
from crawler.engine.shardapi import HostPolicyView
from crawler.session.runtime import Runtime
from crawler.session.termination import TerminationDetector
from crawler.urls import host_key, normalize, url_hash, validate_seed
from crawler.frontier.store import UrlStatus

log = logging.getLogger(__name__)


class Steering:
    """Steers one crawl session's shards through its runtime.

    Args:
        cfg: the crawl config (``runtime.regions`` for region rules).
        runtime: where the shards run (crawler.session.runtime).
        owner_of: the home shard of a host (the session's topology, once started).
        detector: the session's termination detector (driver batches are counted).
    """

    def __init__(
        self, cfg: CrawlConfig, runtime: Runtime, owner_of: Callable[[str], str], detector: TerminationDetector,
    ) -> None:
        self.cfg = cfg
        self.runtime = runtime
        self._owner_of = owner_of
        self.detector = detector

    async def add_seeds(self, urls: Sequence[str], *, priority: int = 0, strict: bool = True) -> dict[str, Any]:
        """Add seeds to a running crawl; the scope widens to include them.

        Each URL is ``accepted`` (queued), ``already_seen``, or ``refused`` with a reason:
        ``invalid: ...`` (malformed), ``robots: ...`` (the owning shard's cached robots.txt
        rules disallow it) or ``scope: <rule>`` (a trap rule: length, query parameters,
        repeated path segments), or ``not queued: ...`` when its owning shard could not
        take it (its seen mark is undone, so adding it again works). Refused URLs are not
        marked seen. ``priority`` (-1000 to 1000, crawler.frontier.urlitem.MAX_PRIORITY) > 0 puts
        the seeds that many levels ahead in their hosts' queues (for this run: it is not
        kept across a restart). With ``strict`` a malformed URL raises SeedError before
        anything is changed; a bad ``priority`` always raises ConfigError. Returns the
        counts and ``urls``: one entry per URL given.
        """
        check_priority(priority)
        results: list[dict[str, Any]] = []
        pending: dict[str, dict[str, Any]] = {}  # normalized URL -> its first entry
        for raw in urls:
            entry: dict[str, Any] = {"url": raw, "normalized": None, "url_hash": None, "result": "refused", "reason": None}
            results.append(entry)
            try:
                clean = validate_seed(raw)
            except SeedError as exc:
                if strict:
                    raise
                entry["reason"] = f"invalid: {exc}"
                continue
            entry.update(normalized=clean, url_hash=url_hash(clean))
            if clean in pending:
                entry.update(result="already_seen", reason="repeated in this request")
            else:
                pending[clean] = entry
        by_owner: dict[str, list[str]] = {}
        for clean in pending:
            by_owner.setdefault(self._owner_of(host_key(clean)), []).append(clean)
        for owner, batch in by_owner.items():
            for clean, reason in zip(batch, await self.runtime.vet_seeds(owner, batch)):
                if reason is not None:
                    pending[clean]["reason"] = reason
        ok = [u for u, e in pending.items() if e["reason"] is None]
        if ok:
            await self.runtime.widen_scope(ok)
            verdicts, failed = await self.deliver_new(ok, boost=priority)
            for u, new in zip(ok, verdicts):
                if u in failed:
                    pending[u]["reason"] = f"not queued: {failed[u]}; add it again"
                else:
                    pending[u]["result"] = "accepted" if new else "already_seen"
        counts = {k: sum(1 for e in results if e["result"] == k) for k in ("accepted", "already_seen", "refused")}
        return {**counts, "urls": results}

    async def set_host_policy(
        self, host: str, *, max_rps: float | None = None, paused: bool | None = None, max_pages: int | None = None,
        region: str | None = None,
    ) -> str:
        """An operator's host policy (crawler.policy.hostpolicy): ``max_rps`` (interval 1/max_rps,
        a floor like Crawl-delay), ``paused``, ``max_pages`` (pages admitted in all). A
        hostname without a port applies to every key of that hostname on every shard;
        ``host:port`` to that key on its owning shard. It applies at once and survives
        restarts (it is checkpointed). ``region`` (a crawl with ``runtime.regions``) places
        the key (``host`` or ``host:port``) in that region, moving it with its state if it
        lives elsewhere; ``"auto"`` drops the rule (the host is measured again). Returns
        the host as normalized. Raises ConfigError for a bad host or value, before
        anything is changed."""
        target = parse_host(host)
        policy = HostPolicy(max_rps=max_rps, paused=paused, max_pages=max_pages)
        if region is not None:
            regions = self.cfg.runtime.regions
            if not regions:
                raise ConfigError("region: this crawl has one region (runtime.regions is null)")
            if region != "auto" and region not in regions:
                raise ConfigError(f"region: {region!r} is not one of runtime.regions ({', '.join(regions)}) or auto")
        owner = None if target.hostname_wide else self._owner_of(target.key)
        if not policy.is_empty():
            await self.runtime.set_host_policy(owner, PolicyChange.of(target, policy))
        if region is not None:
            await self.runtime.place(self._owner_of(target.key), target.key, None if region == "auto" else region)
        return target.spec()

    async def host_info(self, host: str) -> dict[str, Any]:
        """A host as the shards see it (GET /hosts/{host}); see :meth:`set_host_policy`."""
        target = parse_host(host)
        infos = await self.runtime.host_info(None if target.hostname_wide else self._owner_of(target.key), target)
        keys = sorted((k for i in infos for k in i.keys), key=lambda k: k.key)
        hostname_policy = infos[0].hostname_policy if infos else HostPolicyView()
        return {"host": target.spec(), "hostname_wide": target.hostname_wide,
                "hostname_policy": dataclasses.asdict(hostname_policy), "keys": [k.to_dict() for k in keys]}

    async def url_status(self, url: str) -> UrlStatus | None:
        """The per-URL state (crawler.frontier.store) of a URL, or of a 16-hex-digit ``url_hash``
        (None if never admitted): status, last and next crawl, interval, validators,
        content hash, fetches and changes. A URL is normalized first, like a seed."""
        if isinstance(url, str) and len(url) == 16 and all(c in "0123456789abcdef" for c in url):
            return await self.url_status_by_hash(url)
        clean = normalize(url) if isinstance(url, str) else None
        if clean is None:
            return None
        return await self.runtime.url_status(self._owner_of(host_key(clean)), clean)

    async def url_status_by_hash(self, url_hash_hex: str) -> UrlStatus | None:
        """:meth:`url_status` of the URL whose public id (crawler.urls.url_hash) this is."""
        url = await self.runtime.url_for_hash(url_hash_hex.lower())
        return None if url is None else await self.url_status(url)

    async def seed(self, urls: Sequence[str]) -> None:
        """A run's own seeds: :meth:`deliver_new`, and a seed no shard could take fails the
        start (nothing is half-applied: its seen mark is undone)."""
        _, failed = await self.deliver_new(urls)
        if failed:
            url, why = next(iter(failed.items()))
            raise ServiceUnavailableError(f"{len(failed)} seeds could not be queued, e.g. {url}: {why}")

    async def deliver_new(self, urls: Sequence[str], boost: int = 0) -> tuple[list[bool], dict[str, str]]:
        """Admit URLs at depth 0, atomically per URL (docs/invariants.md #3 and #5).

        1. Seen-check them: the new ones are marked seen now.
        2. Deliver the new ones to their owning shards, one batch per owner.
        3. Undo the marks of every URL in a batch whose delivery failed, so nothing
           stays marked seen that no shard holds: such a URL could never be admitted
           again in this crawl, and the ledger would count it admitted with no row.

        Returns (the seen verdict of each URL, the failed URLs with the reason).
        """
        verdicts = list(await self.runtime.seen_check(list(urls)))
        by_owner: dict[str, list[UrlItem]] = {}
        for url, new in zip(urls, verdicts):
            if new:
                item = UrlItem(url, 0, boost=boost)
                by_owner.setdefault(self._owner_of(item.host), []).append(item)
        failed: dict[str, str] = {}
        for owner, batch in by_owner.items():
            try:
                await self.runtime.deliver(owner, batch)
            except Exception as exc:  # noqa: BLE001 - any failure: the marks are undone below
                log.error("delivering %d seeds to %s failed: %r", len(batch), owner, exc)
                failed.update((item.url, f"{type(exc).__name__}: {exc}") for item in batch)
        self.detector.note_driver_batches(len(by_owner))
        if failed:
            undone = await self.runtime.seen_forget(list(failed))
            log.warning("%d seen marks undone for URLs no shard took", undone)
        return verdicts, failed
