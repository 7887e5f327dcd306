"""What kube-apiserver v1.32 accepts as names, label keys and values, and in a toleration: one definition for
the template check (`api.template`, a JSON schema), the CRD types' names and `requires.nodeLabels` (`api.common`,
`api.job`, `api.accelerator`), the label checks of `kube.api` and the emulated API server (`sim.cluster.builtin`),
so the operator refuses up front exactly what the API server would refuse.

Patterns as apimachinery spells them (pkg/util/validation/validation.go), unanchored; the `*_RE` forms are whole
strings with their length limits, one regex each (a JSON schema pattern has no length check of its own). The
lookaheads those need are Python's: pydantic's and the CRD's (RE2) engines have none, so the types use the plain
shapes and `label_key_problem` for a label key's lengths.
"""

from __future__ import annotations

import re

DNS1123_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN = DNS1123_LABEL + r"(\." + DNS1123_LABEL + ")*"
DNS1035_LABEL = "[a-z]([-a-z0-9]*[a-z0-9])?"
QUALIFIED_NAME = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"  # the name part of a label key
LABEL_VALUE = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
NAME_MAX = 63  # a label (DNS-1123, DNS-1035), a qualified name's name part, a label value
SUBDOMAIN_MAX = 253  # a DNS-1123 subdomain, a label key's prefix

DNS1123_LABEL_RE = f"^{DNS1123_LABEL}$"
# A label key's shape without its length limits (an optional subdomain prefix and '/', then a name part), for
# schemas whose regex engine has no lookahead (pydantic's, and the CRD's RE2): `label_key_problem` adds the limits.
LABEL_KEY = rf"({DNS1123_SUBDOMAIN}/)?{QUALIFIED_NAME}"
LABEL_KEY_MAX = SUBDOMAIN_MAX + 1 + NAME_MAX
# IsQualifiedName: an optional DNS-1123 subdomain prefix and '/', then a name of at most 63
LABEL_KEY_RE = (rf"^((?=[^/]{{1,{SUBDOMAIN_MAX}}}/){DNS1123_SUBDOMAIN}/)?(?=[^/]{{1,{NAME_MAX}}}$)"
                rf"{QUALIFIED_NAME}$")
LABEL_VALUE_RE = rf"^(?=.{{0,{NAME_MAX}}}$){LABEL_VALUE}$"  # IsValidLabelValue: may be empty

# ValidateTolerations (pkg/apis/core/validation): an empty operator means Equal, an empty effect every effect
TOLERATION_OPERATORS = ("Equal", "Exists")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def label_key_problem(key: str) -> str | None:
    """What is wrong with `key` as a label key (IsQualifiedName, lengths included) and how to fix it, or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return f"{key!r}: the prefix before '/' is empty; drop the '/' or give a DNS subdomain such as example.com"
    if slash and not re.fullmatch(DNS1123_SUBDOMAIN, prefix):
        return (f"{key!r}: the prefix {prefix!r} is not a lower-case DNS subdomain (dot-separated labels of "
                "a-z, 0-9 and '-', none empty), e.g. example.com")
    if len(prefix) > SUBDOMAIN_MAX:
        return f"{key!r}: the prefix is {len(prefix)} characters; at most {SUBDOMAIN_MAX}"
    if not re.fullmatch(QUALIFIED_NAME, name):
        return (f"{key!r}: the name part {name!r} must be alphanumerics, '-', '_' or '.', starting and ending "
                "with an alphanumeric")
    if len(name) > NAME_MAX:
        return f"{key!r}: the name part is {len(name)} characters; at most {NAME_MAX}, shorten it"
    return None
