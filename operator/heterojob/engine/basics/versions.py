"""Software version requirements (pure): PEP 440 specifiers that also understand vendor version schemes.

Step of the pipeline: the software filter of placement (`placement.software_mismatch`) and the spec check
of `requires` (api.job) both call `check` / `parse_requirement` here.

Huawei CANN numbers its releases `8.0.RC1`, `8.0.RC2`, `8.0.RC3`, then `8.0.0`, then `8.1.RC1`; a
release candidate `X.Y.RCn` comes before `X.Y.0`. Builds such as `8.0.RC3.alpha002` / `8.0.RC2.beta1`
come before their RC. Such a version is read as the PEP 440 version `X.Y.0rcN` (`.devM` for the
alpha/beta build), in the class's software stack and in a job's requirement alike, so users can write
`cann: ">=8.0.RC1"` or `cann: ">=8.0.RC3, <8.1"`. Ascend drivers (`24.1.rc2`) and NVIDIA's
(`550.54.15`) are PEP 440 already. Release candidates are always allowed to match (a fleet runs them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.specifiers import InvalidSpecifier, Specifier, SpecifierSet
from packaging.version import InvalidVersion, Version

# X.Y.RCn, optionally .alphaNNN / .betaN / .TN after it (case-insensitive)
_VENDOR_RC = re.compile(r"(?i)\b(\d+)\.(\d+)\.RC(\d+)(?:\.(?:alpha|beta|t)(\d+))?\b")
_OPERATORS = ("~=", "===", "==", "!=", "<=", ">=", "<", ">")
EXAMPLES = "e.g. '>=12.1', '>=8.0.RC1' or '>=8.0.RC3, <8.1'"


class RequirementError(ValueError):
    """A requirement that is not a version range; the message says what to write instead."""


def _pep440(text: str) -> str:
    def repl(m: re.Match[str]) -> str:
        major, minor, rc, build = m.groups()
        return f"{major}.{minor}.0rc{rc}" + (f".dev{build}" if build is not None else "")
    return _VENDOR_RC.sub(repl, text.strip())


def parse_version(text: str) -> Version:
    """A version as PEP 440 orders it (CANN's `8.0.RC3` is `8.0.0rc3`); InvalidVersion if it is none."""
    return Version(_pep440(text))


def parse_requirement(text: str) -> SpecifierSet:
    """Comma-separated clauses (`>=8.0.RC1, <8.1`); a bare version means exactly that version."""
    clauses = [c.strip() for c in str(text).split(",") if c.strip()]
    if not clauses:
        raise RequirementError(f"empty version requirement; write a range, {EXAMPLES}")
    out = []
    for clause in clauses:
        op = next((o for o in _OPERATORS if clause.startswith(o)), "==")
        version = clause[len(op):].strip() if clause.startswith(op) else clause
        try:
            if not version.endswith(".*"):
                parse_version(version)
            out.append(str(Specifier(op + _pep440(version))))
        except (InvalidSpecifier, InvalidVersion):
            raise RequirementError(f"{text!r} is not a version requirement ({version!r} is not a version); "
                                   f"write {EXAMPLES}") from None
    return SpecifierSet(",".join(out))


@dataclass(frozen=True)
class Mismatch:
    """Why a version does not meet a requirement, and a requirement that would accept it."""

    name: str
    have: str | None
    wanted: str
    why: str

    def __str__(self) -> str:
        if self.have is None:
            return f"needs {self.name} {self.wanted}, the class declares no {self.name} version"
        return f"{self.name} {self.have} does not satisfy {self.wanted}{self.why}"


def check(name: str, have: str | None, wanted: str) -> Mismatch | None:
    """None when `have` meets `wanted`; else a Mismatch whose message says what would match."""
    if have is None:
        return Mismatch(name, None, wanted, "")
    try:
        spec = parse_requirement(wanted)
    except RequirementError as exc:
        return Mismatch(name, have, wanted, f": {exc}")
    try:
        version = parse_version(have)
    except InvalidVersion:
        return Mismatch(name, have, wanted, f": the class's {name} version {have!r} is not a version number")
    if spec.contains(version, prereleases=True):
        return None
    failing = [s for s in spec if not s.contains(version, prereleases=True)]
    hint = ""
    if version.is_prerelease and any(s.operator in (">=", ">", "~=", "==") for s in failing):
        hint = (f" ({have} is a release candidate, which comes before {version.base_version}: "
                f"'>={have}' would match it)")
    elif all(s.operator in (">=", ">") for s in failing):
        hint = f" (the class has {have}: '>={have}' would match it)"
    elif all(s.operator in ("<=", "<") for s in failing):
        hint = f" (the class has {have}: '<={have}' would match it)"
    else:
        hint = f" (the class has {have}: '=={have}' would match it)"
    return Mismatch(name, have, wanted, hint)


def is_prerelease(text: str) -> bool:
    try:
        return parse_version(text).is_prerelease
    except InvalidVersion:
        return False
