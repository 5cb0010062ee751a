"""Fetching again: recrawl intervals, sitemaps, feeds and news."""
