"""Errors and warnings of the HLO reader."""

from __future__ import annotations

from dataclasses import dataclass


class HloParseError(ValueError):
    """The text is not HLO at all (or a shape string is malformed).

    Carries the 1-based ``line`` and ``column`` of the first place the reader could not
    make sense of, so a caller can point the user at it.
    """

    def __init__(self, message: str, line: int = 1, column: int = 1):
        self.message = message
        self.line = line
        self.column = column
        super().__init__(f"line {line}, column {column}: {message}")


@dataclass(frozen=True, slots=True)
class HloWarning:
    """Something the reader kept verbatim because it did not understand it."""

    line: int  # 1-based line in the module text (0 when not tied to a line)
    kind: str  # short machine-readable tag: "unknown-opcode", "unknown-attribute", ...
    message: str  # one sentence for a human
    text: str = ""  # the verbatim text concerned (truncated for very long lines)

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line else ""
        return f"{where}{self.message}"


class HloTooDeepError(HloParseError):
    """A tuple shape nested deeper than any program's (a hostile or corrupted file): the whole
    module is refused, since a line dropped for it would leave the rest meaningless."""
