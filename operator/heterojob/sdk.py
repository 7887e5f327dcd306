"""The training SDK, re-exported: it lives in its own distribution, `heterojob-sdk` (`sdk/` in this repository,
package `heterojob_sdk`, standard library only), which a training image installs alone. Import it from there
in training scripts; this name stays for scripts written against earlier versions."""

from heterojob_sdk import *  # noqa: F403 - the old name re-exports the SDK whole
from heterojob_sdk import __all__  # noqa: F401 - and says what it holds
