"""Who is using the console, and whether they may edit.

With Streamlit's OIDC login configured (`[auth]` in secrets.toml) the identity is the logged-in user's
email; otherwise it is `local-admin` only when the admin list (HETEROJOB_CONSOLE_ADMINS, comma
separated) explicitly contains `local-admin` (the demo), and `anonymous` (read-only) for everyone else.
"""

from __future__ import annotations

import os

import streamlit as st

LOCAL_ADMIN = "local-admin"


def admins() -> set[str]:
    return {a.strip() for a in os.environ.get("HETEROJOB_CONSOLE_ADMINS", "").split(",") if a.strip()}


def identity() -> str:
    try:
        if st.user.is_logged_in:
            return str(st.user.get("email") or st.user.get("name") or "unknown")
    except (AttributeError, KeyError):  # no [auth] configured
        pass
    return LOCAL_ADMIN if LOCAL_ADMIN in admins() else "anonymous"


def is_admin(who: str) -> bool:
    return who in admins()
