"""Rendering JavaScript pages: the decision, the browser pool and the browser's requests.

Modules: ``settings`` (config section), ``decide`` (when to render), ``gate`` (every
request a browser makes goes through the shard's rules), ``cdp`` (DevTools client),
``page`` (one render), ``waitrule``, ``browser`` (processes and pool), ``renderer``
(the shard's side: hand over, fall back), ``sizing`` (how many render actors on Ray, and
their CPUs). docs/invariants.md #12.
"""
