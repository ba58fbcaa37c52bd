"""The text of a PDF, as every model is sent it (shared/prompt.py cuts it to its limits).

Apart from shared/prompt.py, with nothing but the standard library and pypdf, so that the
browser's Python worker (static/python-worker.js), which has no pydantic, runs this same function
for "Model on this device"; the server runs it in a thread. pypdf is imported only when a PDF is
read (in the browser it is loaded only then).
"""

from __future__ import annotations

import io
import logging

log = logging.getLogger(__name__)


def pdf_text(data: bytes) -> str | None:
    """The text of a PDF's pages, or None when there is none or the file cannot be read."""
    try:
        import pypdf

        reader = pypdf.PdfReader(io.BytesIO(data))
        text = "\n\n".join((page.extract_text() or "").strip() for page in reader.pages).strip()
    except Exception as e:  # (a broken or encrypted PDF: pypdf raises many kinds; no pypdf here)
        log.info("a PDF's text could not be read: %s", e)
        return None
    return text or None
