"""The project's error hierarchy.

Errors are drawn as a small tree so callers can catch at the level they care about.
Library exceptions (aiohttp, pyarrow, yaml, ...) are translated at the module boundary
with ``raise X from exc`` so the original cause stays in the traceback.

Bad input from the *user* (config, seeds) raises :class:`ConfigError` / :class:`SeedError`
at once. Bad input from the *web* never raises out of the core: it becomes an outcome
row or a counted drop.
"""


class CrawlError(Exception):
    """Base class of every error this project raises on purpose."""


class ConfigError(CrawlError, ValueError):
    """The crawl configuration is invalid; the message names the key and the fix."""


class SeedError(ConfigError):
    """A seed URL is malformed or not crawlable; the message quotes the seed."""


class PathError(ConfigError):
    """A path the user gave cannot serve what was asked: missing, a file where a folder is
    needed, a folder that holds no crawl output; the message names the path."""


class StorageError(CrawlError):
    """Writing or reading crawl output or state failed."""


class OutputExistsError(StorageError):
    """The output folder holds a crawl made with a different configuration."""


class OutputLeasedError(StorageError):
    """Another crawl run holds the output's lease (docs/invariants.md #9)."""


class RefusedError(StorageError):
    """A run refused before it started: the output or the state in it cannot be used as it
    is (an output that cannot be written, a damaged crawl record or store). The message
    names what to do; the command line answers it as it does bad config (exit status 2)."""


class UnusableStateError(RefusedError):
    """A state file in the output that this crawl will not use as it is (the run stops
    before it starts); the message names the file and the fix."""


class ForeignStateError(UnusableStateError):
    """A state file was made by another crawl, or for another shard of this one (copied in
    from elsewhere): its stamp says so (crawler.recovery.stamps)."""


class DamagedStateError(UnusableStateError):
    """A state file is damaged (not what its name says, or cut short) beyond what can be
    reconciled from the rows in OUT."""


class FencedError(StorageError):
    """This run's lease was taken over, or a newer incarnation of this shard claimed its
    generation: it may no longer fetch, write or ack."""


class StateGapError(RefusedError):
    """A shard's state in OUT has a hole that listing again did not fill (a missing or
    unreadable object): it is not restored partly; the message names what is missing
    (a refusal: exit 2 at the command line)."""


class DeliveryError(CrawlError):
    """URLs could not be handed to the shards that own them (their sender keeps them)."""


class ShardFailedError(CrawlError):
    """A shard stopped with an error; the crawl cannot prove termination without it."""


class ServiceUnavailableError(CrawlError):
    """A crawl-wide service (content index, page budget) stayed unreachable past its
    restart allowance; the URL being processed fails with this, the crawl goes on."""



class RenderError(CrawlError):
    """A render did not produce a page (browser crashed or unreachable, protocol error,
    deadline, cap); the shard falls back to the raw response with a counted reason."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


class PlacementError(ConfigError):
    """An actor the crawl needs cannot be placed on the cluster (CPU short, no node with
    its region's label); the message names the resource and the setting to change."""


#: What a run refuses before it starts, answered at the command line with one line and
#: exit status 2: bad config or seeds, a path that cannot serve, an output holding another
#: crawl or leased by another run, state that cannot be used as it is.
REFUSALS: tuple[type[CrawlError], ...] = (ConfigError, OutputExistsError, OutputLeasedError, RefusedError)


#: "The receiver cannot take it now" (docs/invariants.md #13): a fenced or restarting
#: shard (a silent driver shuts its gate, a lease read failed), a service past its restart
#: allowance, the object store failing, a timeout, a dropped connection. The sender waits
#: and tries again; such an error is never a web outcome and never a row.
RETRY_LATER: tuple[type[BaseException], ...] = (StorageError, ServiceUnavailableError, TimeoutError, ConnectionError)


def retry_later(exc: BaseException) -> bool:
    """Whether ``exc`` says "not now" rather than "this is wrong" (:data:`RETRY_LATER`;
    a :data:`REFUSALS` error is the user's to fix, not a wait's)."""
    return isinstance(exc, RETRY_LATER) and not isinstance(exc, REFUSALS)
