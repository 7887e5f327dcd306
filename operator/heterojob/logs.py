"""Logs an SRE can read: one line per event, tracebacks only under --verbose, Kopf's chatter at DEBUG.

Without --verbose: a record carrying an exception is logged as one line ending in `[ExcType: message]`
(the traceback is dropped); Kopf's per-handler `Handler '...' succeeded.` lines are DEBUG (hidden);
urllib3's retry warnings are hidden (the failure that follows is logged by us, once). With --verbose
everything is kept, tracebacks included, and the demoted lines show at DEBUG.
"""

from __future__ import annotations

import logging

_DEMOTED = (" succeeded.",)  # kopf/_core/actions/execution.py: logger.info(f"{handler} succeeded.")


class _Readable(logging.Filter):
    def __init__(self, verbose: bool) -> None:
        super().__init__()
        self.verbose = verbose

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("kopf") and record.levelno == logging.INFO \
                and str(record.msg).endswith(_DEMOTED):
            if not self.verbose:
                return False
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        if record.exc_info and not self.verbose:
            exc = record.exc_info[1]
            first = str(exc).strip().splitlines()[0][:300] if exc is not None and str(exc).strip() else ""
            name = type(exc).__name__ if exc is not None else "error"
            record.msg, record.args = f"{record.getMessage()} [{name}{': ' + first if first else ''}]", None
            record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


def configure(verbose: bool) -> None:
    """Call after kopf.configure(): adds the filter to every root handler and quiets the HTTP libraries."""
    readable = _Readable(verbose)
    for handler in logging.getLogger().handlers:
        handler.addFilter(readable)
    logging.getLogger("heterojob").setLevel(logging.DEBUG if verbose else logging.INFO)
    for name in ("urllib3", "kubernetes"):
        logging.getLogger(name).setLevel(logging.DEBUG if verbose else logging.ERROR)
