"""What kube-apiserver v1.32 accepts as names, label keys and values, and in a toleration: one definition for
the template check (`api.template`, a JSON schema), the label checks of `kube.api` and the emulated API server
(`sim.cluster.builtin`), so the operator refuses up front exactly what the API server would refuse.

Patterns as apimachinery spells them (pkg/util/validation/validation.go), unanchored; the `*_RE` forms are whole
strings with their length limits, one regex each (a JSON schema pattern has no length check of its own).
"""

from __future__ import annotations

DNS1123_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN = DNS1123_LABEL + r"(\." + DNS1123_LABEL + ")*"
DNS1035_LABEL = "[a-z]([-a-z0-9]*[a-z0-9])?"
QUALIFIED_NAME = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"  # the name part of a label key
LABEL_VALUE = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
NAME_MAX = 63  # a label (DNS-1123, DNS-1035), a qualified name's name part, a label value
SUBDOMAIN_MAX = 253  # a DNS-1123 subdomain, a label key's prefix

DNS1123_LABEL_RE = f"^{DNS1123_LABEL}$"
# IsQualifiedName: an optional DNS-1123 subdomain prefix and '/', then a name of at most 63
LABEL_KEY_RE = (rf"^((?=[^/]{{1,{SUBDOMAIN_MAX}}}/){DNS1123_SUBDOMAIN}/)?(?=[^/]{{1,{NAME_MAX}}}$)"
                rf"{QUALIFIED_NAME}$")
LABEL_VALUE_RE = rf"^(?=.{{0,{NAME_MAX}}}$){LABEL_VALUE}$"  # IsValidLabelValue: may be empty

# ValidateTolerations (pkg/apis/core/validation): an empty operator means Equal, an empty effect every effect
TOLERATION_OPERATORS = ("Equal", "Exists")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
