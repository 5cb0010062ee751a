"""The crawl-wide services the shards share, as plain classes: the page budget
(crawler.services.budget) and the duplicate-content index (crawler.services.contentindex);
the seen-URL group is crawler.seen.group.

The in-process runtime (crawler.session.inprocess) calls them directly; the Ray runtime wraps
each in a thin actor (actors/serviceactors.py), the fault simulator in a simulated one.
Either way a shard sees the same async interfaces, so it cannot tell where it runs, and the
logic is tested here without Ray.
"""
