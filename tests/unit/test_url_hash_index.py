"""A shard's store finds a URL by its public id (crawler.urls.url_hash), the id rows and
events carry: for URLs added now, and for a store made before the index existed."""

from __future__ import annotations

import sqlite3

from crawler.frontier.urlitem import UrlItem
from crawler.frontier.store import FrontierStore
from crawler.urls import url_hash


def test_url_found_by_its_public_id(tmp_path):
    store = FrontierStore(str(tmp_path / "s.sqlite"))
    urls = [f"http://a.test/{i}" for i in range(50)]
    store.add([UrlItem(u, 1) for u in urls])
    assert all(store.url_for_hash(url_hash(u)) == u for u in urls)
    assert store.url_for_hash(url_hash(urls[3]).upper()) == urls[3]
    assert store.url_for_hash(url_hash("http://a.test/never")) is None
    assert store.url_for_hash("not-hex-at-all!!") is None and store.url_for_hash("abc") is None
    store.close()


def test_a_store_from_before_the_index_is_indexed_when_opened(tmp_path):
    path = str(tmp_path / "s.sqlite")
    store = FrontierStore(path)
    store.add([UrlItem(f"http://a.test/{i}", 1) for i in range(20)])
    store.close()
    db = sqlite3.connect(path)  # what an older version left: no url_hash on its rows
    db.execute("UPDATE urls SET uh = NULL")
    db.commit()
    db.close()
    again = FrontierStore(path)
    assert again.url_for_hash(url_hash("http://a.test/7")) == "http://a.test/7"
    again.close()
