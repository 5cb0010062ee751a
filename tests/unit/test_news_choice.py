"""Which news source of a host is read (crawler.freshness.newschoice, through
crawler.freshness.news.NewsPolicy), and publication dates that are no dates.

A host publishes at random (a Poisson stream); its sources are simulated on the mock
clock: each read of a source lists the articles it carries, the policy is told what the
read listed and which URLs were new, and it answers when to read that source next."""

from __future__ import annotations

import calendar
import random
import statistics
from collections import Counter

import pytest

from crawler.clock import MockClock
from crawler.freshness.news import DATE_FLOOR, NewsPolicy, sane_published
from crawler.freshness.newschoice import CHECK_EVERY, COMPLETE, HostChoice
from crawler.freshness.sitemaps import SitemapReader, parse_sitemap
from crawler.frontier.backqueue import default_priority
from crawler.frontier.recrawl import Previous, Schedule
from crawler.frontier.urlitem import UrlItem
from crawler.parse.feeds import Feed
from crawler.policy.links import LinkPolicy
from crawler.policy.traprules import TrapRules
from crawler.counters import ShardCounters
from crawler.urls import Scope

HOST = "http://n.test"
LAG = 1.0  # the politeness interval: an article is fetched this long after the read that found it


def policy(clock, **kw):
    args = dict(min_interval_s=5.0, initial_interval_s=86_400.0, max_interval_s=2_592_000.0, probe_interval_s=10.0,
                target_new_per_fetch=0.6, hub_min_new=3, max_sources=100, clock=clock, target_delay_p95_s=12.0,
                fetch_lag_s=LAG)
    args.update(kw)
    return NewsPolicy(**args)


class Host:
    """One news host on the mock clock, its sources read when the policy says.

    ``sources``: path -> (kind, carries(i, t) -> bool): whether a read at ``t`` lists
    article i. Every source lists at most the newest 20 articles it carries."""

    def __init__(self, clock: MockClock, news: NewsPolicy, sources: dict, mean_s: float = 15.0, seed: int = 1,
                 horizon: float = 3600.0) -> None:
        self.clock, self.news, self.sources = clock, news, sources
        rng = random.Random(seed)
        self.published = [-rng.uniform(0, 120) for _ in range(8)]
        t = 0.0
        while t < horizon:
            t += rng.expovariate(1 / mean_s)
            self.published.append(t)
        self.published.sort()
        self.found: dict[int, float] = {}  # article -> fetched (clock seconds)
        self.reads: list[tuple[float, str]] = []
        self.due = {path: 0.5 * k for k, path in enumerate(sources)}
        self.seq = Counter[str]()
        self.last = dict.fromkeys(sources, 86_400.0)

    def url(self, path: str) -> str:
        return f"{HOST}{path}"

    def run(self, until: float) -> None:
        while True:
            path = min(self.due, key=self.due.__getitem__)
            if self.due[path] > until:
                return
            self.clock.advance(max(0.0, self.due[path] - self.clock.now()))
            self.read(path)

    def read(self, path: str) -> None:
        now = self.clock.now()
        kind, carries = self.sources[path]
        self.reads.append((now, path))
        self.seq[path] += 1
        listed = [i for i, p in enumerate(self.published) if p <= now and carries(i, now)][-20:]
        new = [i for i in listed if i not in self.found]
        for k, i in enumerate(sorted(new, key=lambda i: -self.published[i])):
            self.found[i] = now + LAG * (k + 1)  # fetched one politeness interval apart, newest first
        url = self.url(path)
        self.news.credit([UrlItem(self.url(f"/a/{i}"), 1, url) for i in new])
        links = [self.url(f"/a/{i}") for i in listed]
        wall = self.clock.wall() - now
        if kind == "sitemap":
            again = self.news.sitemap_again(UrlItem(url, 0, kind="sitemap"), True, None,
                                            [wall + self.published[i] for i in listed], links)
            assert again is not None, path
            self.due[path] = again.due_at
            return
        seq = self.seq[path]
        item = UrlItem(url, 0, fetch_seq=seq, kind="refresh" if seq > 1 else "discover",
                       prev=Previous(seq - 1, self.last[path]) if seq > 1 else None)
        feed = Feed(entries=[(link, wall + self.published[i], None) for link, i in zip(links, listed)]) if kind == "feed" else None
        self.news.mark(item, [UrlItem(link, 1, url) for link in links])  # as the pipeline does
        out = self.news.after_fetch(item, 200, Schedule(None, 86_400.0, self.clock.wall() + 86_400.0), feed)
        assert out is not None
        self.last[path] = out.interval_s
        self.due[path] = now + (out.next_crawl_at - self.clock.wall())

    def delays(self, start: float, end: float) -> list[float]:
        return [self.found[i] - p for i, p in enumerate(self.published) if start <= p <= end]

    def share(self, path: str, start: float, end: float) -> float:
        got = [p for t, p in self.reads if start <= t <= end]
        return got.count(path) / len(got)


def everything(i: int, t: float) -> bool:
    return True


def section(k: int):
    return lambda i, t: i % 4 == k


def test_the_source_that_carries_every_article_is_read_and_the_others_checked_in_its_turns():
    """A feed and a news sitemap carry every article, a section page a quarter of them.
    One source takes the host's reads; the other complete one is checked one read in
    ``CHECK_EVERY``; the section, which carries too little, stops being read as news."""
    clock = MockClock()
    news = policy(clock)
    host = Host(clock, news, {"/feed.xml": ("feed", everything), "/news-sitemap.xml": ("sitemap", everything),
                              "/section/1": ("hub", section(1))})
    host.run(3600.0)
    delays = host.delays(0.0, 3500.0)
    assert len(delays) >= 200 and all(d >= LAG for d in delays)
    # Read at the pace the p95 target needs: a uniform wait over the period plus the lag.
    assert statistics.median(delays) <= 7.0 and sorted(delays)[int(0.95 * len(delays))] <= 13.0
    # About one read per period in all: reading each source at that pace would cost 3x.
    late = [t for t, _ in host.reads if t >= 600.0]
    articles = sum(600.0 <= p <= 3600.0 for p in host.published)
    assert len(late) / articles <= 1.5
    chosen = news._hosts["n.test"].choice.chosen
    assert chosen in (host.url("/feed.xml"), host.url("/news-sitemap.xml"))
    other = ({"/feed.xml", "/news-sitemap.xml"} - {chosen.removeprefix(HOST)}).pop()
    assert host.share(chosen.removeprefix(HOST), 600.0, 3600.0) >= 1 - 1.5 / CHECK_EVERY
    assert host.share(other, 600.0, 3600.0) >= 0.5 / CHECK_EVERY  # checked, in the chosen one's turns
    assert not news.is_source(host.url("/section/1"))


def test_a_chosen_source_that_stops_carrying_everything_is_replaced():
    """The chosen source goes stale at 1800 s (it lists nothing newer): the check of the
    other source notices within a few of its turns and the host's reads move to it."""
    clock = MockClock()
    news = policy(clock)
    stale: dict[str, float] = {}

    def carries(path: str):
        return lambda i, t: path not in stale or host.published[i] <= stale[path]

    host = Host(clock, news, {"/feed.xml": ("feed", carries("/feed.xml")),
                              "/news-sitemap.xml": ("sitemap", carries("/news-sitemap.xml"))}, seed=3)
    host.run(1800.0)
    first = news._hosts["n.test"].choice.chosen
    assert first is not None
    stale[first.removeprefix(HOST)] = 1800.0
    host.run(4800.0)
    choice = news._hosts["n.test"].choice
    assert choice.chosen not in (None, first) and choice.switches >= 1
    assert news.counters["news_source_switches"] >= 1
    assert host.share(choice.chosen.removeprefix(HOST), 3000.0, 4800.0) >= 1 - 1.5 / CHECK_EVERY
    # Nothing is lost, and once switched the delays are as before.
    assert all(i in host.found for i, p in enumerate(host.published) if p <= 4700.0)
    after = host.delays(3000.0, 4700.0)
    assert sorted(after)[int(0.95 * len(after))] <= 13.0


def test_the_period_follows_the_arrival_rate_and_the_p95_target():
    """One article per 15 s and a 12 s p95 target with a 1 s lag: 0.95 T + 1 (1 + T / 15)
    = 12 gives T = 10.8 s. One per 600 s: the p95 target would cost about 55 reads per
    article; ``target_new_per_fetch`` (0.6) bounds it to 360 s."""
    for mean_s, period in ((15.0, 11.0 / (0.95 + 1 / 15.0)), (600.0, 0.6 * 600.0)):
        clock = MockClock()
        news = policy(clock)
        host = Host(clock, news, {"/feed.xml": ("feed", everything)}, mean_s=mean_s, horizon=40 * mean_s)
        host.run(40 * mean_s)
        assert news._hosts["n.test"].choice.period == pytest.approx(period, rel=0.35), mean_s


def test_reach_counts_the_newest_articles_revealed_since_a_source_was_last_read():
    choice = HostChoice()
    choice.observe("feed", 0.0, [], [])
    choice.observe("sitemap", 0.0, [], [])
    for k in range(1, 6):  # the feed reveals one article each read; the sitemap lists them too
        choice.observe("feed", 10.0 * k, [f"a{k}"], [f"a{j}" for j in range(1, k + 1)])
        choice.observe("sitemap", 10.0 * k + 1, [], [f"a{j}" for j in range(1, k + 1)])
    assert choice.reach["sitemap"].coverage() == 1.0 and choice.reach["feed"].coverage() == 1.0
    choice.observe("section", 55.0, [], [])
    for k in range(6, 12):  # a section lists every other one
        choice.observe("feed", 10.0 * k, [f"a{k}"], [f"a{k}"])
        choice.observe("section", 10.0 * k + 1, [], [f"a{k}"] if k % 2 else [])
    assert choice.reach["section"].coverage() == pytest.approx(0.5, abs=0.1)
    assert choice.choose({"feed": "feed", "sitemap": "sitemap", "section": "hub"}) == "feed"
    # A 304 lists what the source listed before: nothing newer.
    choice.observe("feed", 130.0, [], ["a11"])
    choice.observe("sitemap", 131.0, ["a12"], [f"a{j}" for j in range(1, 13)])
    for t in (140.0, 150.0, 160.0, 170.0, 180.0, 190.0, 200.0):
        choice.unchanged("feed", t)
        choice.observe("sitemap", t + 1, [f"b{t}"], [f"b{t}"])
    cov = choice.reach["feed"].coverage()
    assert cov is not None and cov < COMPLETE
    assert choice.choose({"feed": "feed", "sitemap": "sitemap"}) == "sitemap" and choice.switches == 1


def test_one_slot_in_check_every_goes_to_the_other_sources_in_turn():
    choice = HostChoice(chosen="f")
    choice.set_period(10.0, 0.0)
    members = ["f", "s", "h"]
    owners = []
    t = 0.0
    for _ in range(4 * CHECK_EVERY):
        got = {m: choice.slot(m, members, t + 1e-6, t + 10.0) for m in members}
        t = min(got.values())
        owners.append(min(got, key=got.__getitem__))
    assert owners.count("f") == 4 * CHECK_EVERY - 4 and owners.count("s") == 2 and owners.count("h") == 2
    # The chosen source is not due (it failed): another source stands in at the next slot.
    assert choice.slot("s", members, 1000.0, None) == 1000.0


# -- dates that are no dates ----------------------------------------------------------------

NOW = calendar.timegm((2026, 12, 1, 12, 0, 0))


@pytest.mark.parametrize("text, expected, wrong", [
    ("9999-12-31", NOW, "future"),  # beyond every fetch: taken as the fetch time
    ("2100-01-01", NOW, "future"),
    ("1970-01-01", None, "ancient"),  # epoch zero: a placeholder
    ("0001-01-01", None, "ancient"),  # datetime.min
    ("1989-12-31T23:59:59Z", None, "ancient"),
    ("2026-12-01T11:59:00Z", NOW - 60.0, None),  # a real date
    ("2026-12-01T12:05:00Z", NOW + 300.0, None),  # a clock a few minutes ahead: kept
])
def test_a_news_sitemap_date_far_in_the_future_is_the_fetch_time_and_one_before_1990_is_unknown(text, expected, wrong):
    clock = MockClock(wall_start=NOW)
    news = policy(clock)
    links = LinkPolicy(lambda u: u, Scope("host", [f"{HOST}/"]),
                       TrapRules(max_depth=16, max_url_length=2048, max_query_params=12, max_path_repeats=3))
    reader = SitemapReader(max_files=5, max_urls=100, max_bytes=10**6, links=links, counters=ShardCounters(),
                           dropped=Counter(), news=news)
    body = (f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
            f'xmlns:news="http://www.google.com/schemas/sitemap-news/0.9">'
            f'<url><loc>{HOST}/a/odd</loc><news:news><news:publication_date>{text}</news:publication_date>'
            f'<news:title>t</news:title></news:news></url>'
            f'<url><loc>{HOST}/a/real</loc><news:news><news:publication_date>2026-12-01T11:00:00Z'
            f'</news:publication_date><news:title>t</news:title></news:news></url></urlset>').encode()
    assert parse_sitemap(body, f"{HOST}/news.xml").news  # the parser reads the date as given
    got, _, is_news, _ = reader._yields(UrlItem(f"{HOST}/news.xml", 0, kind="sitemap"), 200, body)
    odd, real = got
    assert is_news and odd.fresh and odd.published == expected and real.published == NOW - 3600.0
    stats = news.stats(fresh=True)
    assert stats["dates_future"] == (wrong == "future") and stats["dates_ancient"] == (wrong == "ancient")
    # Neither goes ahead of the real news: a date in 9999 does not rank first, nor 1970 last
    # by a century (an unknown date ranks as the oldest news, after dated news).
    if wrong is not None:
        assert default_priority(odd, 0.0) >= default_priority(UrlItem(f"{HOST}/a/new", fresh=True, published=NOW), 0.0)


def test_sane_published_keeps_unknown_unknown_and_refuses_non_numbers():
    assert sane_published(None, NOW) == (None, None)
    assert sane_published(float("nan"), NOW) == (None, "ancient")
    assert sane_published(float("inf"), NOW) == (None, "ancient")
    assert sane_published(DATE_FLOOR, NOW) == (DATE_FLOOR, None)


def test_feed_dates_are_checked_and_do_not_skew_the_hosts_rate():
    clock = MockClock(wall_start=NOW)
    news = policy(clock)
    feed = Feed(entries=[(f"{HOST}/a/{k}", NOW - 15.0 * k, None) for k in range(10)]
                + [(f"{HOST}/a/zero", 0.0, None), (f"{HOST}/a/far", 253402214400.0, None)])
    links = news.feed_links(UrlItem(f"{HOST}/feed.xml", 0), feed, lambda urls, d: [(u, u) for u in urls])
    by_url = {link.url: link.published for link in links}
    assert by_url[f"{HOST}/a/zero"] is None and by_url[f"{HOST}/a/far"] == NOW
    news.after_fetch(UrlItem(f"{HOST}/feed.xml", 0), 200, Schedule(None, 86_400.0, NOW + 86_400.0), feed)
    rate = news._hosts["n.test"].rate()
    assert rate == pytest.approx(1 / 15.0, rel=0.2)  # the 1970 entry would make it ~0
    s = news.stats(fresh=True)
    assert s["dates_future"] == 1 and s["dates_ancient"] == 1
