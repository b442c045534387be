"""Show a message body safely: text, JSON or hex, with a size cap.

Templates print the results with autoescaping on, so a body holding HTML or
``<script>`` is shown as text and never runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

#: Bytes of a body shown on a page; the rest is counted, not rendered.
BODY_DISPLAY_CAP = 64 * 1024
HEX_CAP = 4 * 1024


@dataclass(slots=True)
class BodyView:
    size: int
    truncated: bool
    is_utf8: bool
    text: str
    json: str | None
    hex: str
    default: str  # "json", "text" or "hex"


def hexdump(data: bytes) -> str:
    """Return a classic 16-bytes-a-line hex dump with an ASCII column."""
    lines = []
    for i in range(0, len(data), 16):
        chunk = data[i : i + 16]
        hx = " ".join(f"{b:02x}" for b in chunk)
        asc = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{i:08x}  {hx:<47}  {asc}")
    return "\n".join(lines)


def view_body(body: bytes, cap: int = BODY_DISPLAY_CAP) -> BodyView:
    """Return the body prepared for display as text, JSON and hex."""
    shown = body[:cap]
    try:
        text = shown.decode("utf-8")
        is_utf8 = True
    except UnicodeDecodeError as exc:
        # A cap may cut a multi-byte character: only that is forgiven.
        is_utf8 = len(body) > cap and exc.start >= len(shown) - 3
        text = shown.decode("utf-8", errors="replace")
    pretty = None
    if is_utf8 and len(body) <= cap:
        try:
            pretty = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            pretty = None
    default = "json" if pretty is not None else ("text" if is_utf8 else "hex")
    return BodyView(
        len(body),
        len(body) > cap,
        is_utf8,
        text,
        pretty,
        hexdump(body[:HEX_CAP]),
        default,
    )
