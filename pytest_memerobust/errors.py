"""Exceptions that name the culprit (file, row, name), so a user can fix their input without a traceback."""


class MemeRobustError(Exception):
    """Base class: every error this package raises on bad input."""


class DataError(MemeRobustError):
    """A dataset file, row, image or caption is missing, unreadable or outside the label schema."""


class NothingToFitOn(DataError):
    """A universal attack has no memes to fit on that it is not judged on (no train split, every meme evaluated):
    its cases skip, naming the fixes, rather than fit on their own test memes."""


class SuiteError(MemeRobustError):
    """A suite file is malformed or names an unknown perturbation, severity or key."""


class UnknownNameError(MemeRobustError, KeyError):
    """A registry lookup failed; the message lists the names that exist."""

    LIST_LIMIT = 24  # longer lists give the closest names and where to see them all, not a page of names

    def __init__(self, kind: str, name: str, known, hint: str = ""):
        from difflib import get_close_matches

        self.kind, self.name, self.known = kind, name, sorted(known)
        if len(self.known) <= self.LIST_LIMIT:
            listed = f"known: {', '.join(self.known) or '(none)'}"
        else:
            close = get_close_matches(str(name), self.known, n=3, cutoff=0.6)
            listed = (f"did you mean {' or '.join(map(repr, close))}? " if close else "") + \
                f"{len(self.known)} known: `memerobust list` shows them"
        super().__init__(f"unknown {kind} {name!r}; {hint + '; ' if hint else ''}{listed}")

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return self.args[0]


class CheckpointError(MemeRobustError):
    """A checkpoint is missing, of an untrusted format, or does not fit the model card."""


class ConfigError(MemeRobustError):
    """A model card or option value is malformed."""


class ModeNotRead(ConfigError):
    """A fusion mode that keeps only a channel the detector does not read (`:image` of a caption-only detector).
    The channel ablation skips such cases with this message."""


class BackendMissing(MemeRobustError):
    """A perturbation needs a model or data that is not installed here (a translation model, WordNet...).

    Suites skip such cases with this message, which says what to install or pass; nothing is downloaded."""


class EndpointError(MemeRobustError):
    """A hosted endpoint kept failing (after the retries), or refused the request outright (a bad key, an unknown
    model, a reply too large)."""


class EndpointDown(EndpointError):
    """A hosted endpoint failed several requests in a row, so no more are sent to it: every later case would wait
    out the same timeouts, so the run stops (items.py) with this message, which says since when and after what."""


class DiskFull(MemeRobustError, OSError):
    """A write ran out of space (ENOSPC) or of quota (EDQUOT): one line naming the file being written (atomic.py
    leaves nothing half-written). An OSError too, so code that shrugs off a failed write (the feature cache) still
    does."""

    def __init__(self, path, error: OSError, hint: str = ""):
        import os

        super().__init__(error.errno, os.strerror(error.errno))  # the system's words (Arrow adds its own)
        self.filename, self.hint = str(path), hint

    def __str__(self) -> str:
        import errno

        what = "the disk quota is used up" if self.errno == getattr(errno, "EDQUOT", None) else "the disk is full"
        return (f"{what} writing {self.filename} ({self.strerror}): nothing half-written is left (a file there before "
                f"is unchanged); free some space, then " + (self.hint or "run the command again"))

    def named(self, path=None, hint: str | None = None) -> "DiskFull":
        """The same failure named as `path` (where a staged file will go) or with another `hint` of what to run."""
        return DiskFull(self.filename if path is None else path, self, self.hint if hint is None else hint)
