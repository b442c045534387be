"""Put the comparator's last table into docs/compat.md, between its markers.

python tests/conformance/publish.py TABLE.md docs/compat.md
"""

from __future__ import annotations

import sys
from pathlib import Path

BEGIN = "<!-- conformance table: begin (make conformance writes this) -->"
END = "<!-- conformance table: end -->"


def main() -> int:
    table = Path(sys.argv[1]).read_text()
    doc = Path(sys.argv[2])
    text = doc.read_text()
    head, sep, rest = text.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        print(f"{doc} has no table markers")
        return 2
    doc.write_text(f"{head}{BEGIN}\n{table}{END}{tail}")
    print(f"{doc}: table updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
