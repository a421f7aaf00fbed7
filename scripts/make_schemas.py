"""Write the shipped JSON Schemas from the records they describe.

``src/modeltap/schemas/{audit_record,event,session}.schema.json`` are
generated from :mod:`modeltap.evidence.records` by
:func:`modeltap.evidence.schemas.generated`; after changing a record, run

    python scripts/make_schemas.py   # from the repository root

and commit the files it names. ``tests/test_schemas.py`` fails until they
match. (``report.schema.json`` is written by hand.)
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from modeltap.evidence import schemas  # noqa: E402

TARGET = ROOT / "src" / "modeltap" / schemas.PACKAGE_DIR


def main() -> int:
    for path in schemas.write(TARGET):
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
