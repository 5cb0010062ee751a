"""The operator's control API and host policies."""
