"""Configuration: the typed, frozen settings of a crawl and the generic YAML loader."""
