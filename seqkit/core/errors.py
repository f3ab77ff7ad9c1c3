"""The one exception type that reaches a user as a single line (see ``seqkit.cli.common``)."""


class SeqkitError(Exception):
    """A user-facing error: bad input, bad config, missing file. Printed as one line, exit 1."""
