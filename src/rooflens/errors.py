"""The one error type every layer raises for bad input it was given.

The command line turns it into one sentence on stderr and exit status 2; library users catch it
like any exception. It lives outside the layers so each of them may raise it without importing
another.
"""


class RooflensError(Exception):
    """Bad input (an unknown chip, a malformed argument spec, a function that does not lower).

    The message is one sentence for a person, without a trailing traceback's worth of detail.
    """
