"""What a shard does with a fetch's response: retry it, or turn it into its one row.

:class:`FetchHandler` classifies the response (crawler.fetch.fetcher.classify): a
transient failure goes back to the frontier with backoff (nobody sleeps) until
``fetch.attempts``; a page goes through the :class:`~crawler.engine.pipeline.PagePipeline`,
and its links are routed to their owners *before* its row goes to the outbox (a crash in
between re-fetches the page and re-sends its links; docs/invariants.md #4).
"""

from __future__ import annotations


from crawler.engine.admission import Admission
from crawler.engine.linkrouter import LinkRouter
from crawler.engine.optional import NewsPart
from crawler.engine.pipeline import PagePipeline
from crawler.engine.recorder import Recorder
from crawler.errors import DeliveryError
from crawler.fetch.fetcher import FetchResult, classify
from crawler.frontier.frontier import Frontier
from crawler.frontier.urlitem import UrlItem
from crawler.policy.hostbudget import HostBudget
from crawler.counters import ShardCounters


class FetchHandler:
    """One shard's handling of responses (module docstring).

    Args:
        attempts: tries of a transiently failing URL before its row (``fetch.attempts``).
        frontier: takes retries back; a host's novelty demotes or restores it.
        pipeline: turns responses into rows and links.
        host_budget: each host's page budget, which its duplicates shrink.
        admission: trims a host's queue to its shrunk budget, durably.
        router: delivers a page's links to the shards that own them.
        news: a fetched source's next schedule (crawler.freshness.news).
        recorder: the URL's row.
        counters: the shard's counters (``retries``).
    """

    def __init__(self, attempts: int, *, frontier: Frontier, pipeline: PagePipeline, host_budget: HostBudget,
                 admission: Admission, router: LinkRouter, news: NewsPart, recorder: Recorder,
                 counters: ShardCounters) -> None:
        self._attempts = attempts
        self._frontier, self._pipeline, self._host_budget = frontier, pipeline, host_budget
        self._admission, self._router, self._news, self._recorder = admission, router, news, recorder
        self._counters = counters

    async def handle(self, item: UrlItem, res: FetchResult) -> None:
        kind = classify(res)
        item.attempts += 1
        if kind == "transient" and item.attempts < self._attempts:
            self._counters.retries += 1
            self._frontier.retry(item)
            return
        if kind == "ok":
            outcome = await self._pipeline.page(item, res)
            drop = self._host_budget.record_fetch(item.host, outcome.duplicate, self._frontier.queued_for(item.host))
            if drop:
                self._admission.trim(item.host, drop)
            self._frontier.demote(item.host, self._host_budget.penalty(item.host) > 1.0)
        elif kind == "redirect":
            outcome = self._pipeline.redirect(item, res)
        elif kind == "not_modified":
            outcome = self._pipeline.outcome(item, "not_modified", res)
        else:
            final = "http_error" if res.status is not None and res.status >= 400 else "failed"
            error = res.error or (f"HTTP {res.status}" if res.status is not None else "no response")
            outcome = self._pipeline.outcome(item, final, res, error=error)
        if outcome.links:
            # Acked only once its links reached their owners: in flight (docs/invariants.md #4)
            # however long a receiver refuses. False: given up (a bug) or a stop: InternalErrors.
            if not await self._router.submit(outcome.links, bypass_seen=item.replay):
                raise DeliveryError(f"{len(outcome.links)} links could not be delivered to their shards")
        # After delivery: the new URLs it yielded are counted.
        outcome.schedule = self._news.after_fetch(item, outcome.row.status, outcome.schedule, outcome.feed)
        self._recorder.record(item, outcome)
