"""Property look-up in a record's encoded properties string.

The store keeps properties as ``name\\x01value\\x02`` segments
(``broker_core.message.decode_properties``); a search reads one or two names
per record, so finding them in the string beats decoding all of them.
"""

from __future__ import annotations

from broker_core.message import decode_properties

SEPARATOR = "\x02"


def find_property(text: str, name: str) -> str | None:
    """Return ``decode_properties(text).get(name)`` without decoding the rest.

    The last segment for ``name`` with a non-empty value wins, as in the decoder.
    """
    if not name or name == "__CRC32#" or "\x01" in name or SEPARATOR in name:
        return None
    pattern = SEPARATOR + name + "\x01"
    i = text.rfind(pattern)
    if i >= 0:
        start = i + len(pattern)
        j = text.find(SEPARATOR, start)
        value = text[start:j] if j >= 0 else text[start:]
        if value:
            return value
        # Rare: the last value is empty, so an earlier segment may win.
        return decode_properties(text).get(name)
    if text.startswith(pattern[1:]):
        # Only the first segment has the name.
        j = text.find(SEPARATOR, len(pattern) - 1)
        value = text[len(pattern) - 1 : j] if j >= 0 else text[len(pattern) - 1 :]
        return value or None
    return None
