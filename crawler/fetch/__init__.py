"""The network: the fetcher, its transport seam and aiohttp transport, DNS, the SSRF guard, content decoding."""
