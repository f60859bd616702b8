"""User names in their one canonical form, and the look-alikes refused on the way."""

import unicodedata
from functools import lru_cache

from confusable_homoglyphs.confusables import confusables_data

from runs.kernel.errors import AuthRejected

# Cyrillic and Greek letters that render like Latin ones, beside those Unicode's confusables
# list maps to one (below). A name made only of these (and digits/punctuation) is a
# whole-script look-alike of a Latin name ("аdmin" in Cyrillic).
_LATIN_LOOKALIKES = set("аеорсухіјѕԁӏԛԝһүαεικνορτυχ")
NAMESPACE_SEPARATOR = "/"  # refused inside names, so "partner/carol" names one person only


def _script(char: str) -> str | None:
    """The script of a letter, from its Unicode name (LATIN SMALL LETTER A → LATIN)."""
    if not char.isalpha():
        return None
    name = unicodedata.name(char, "")
    return name.split(" ", 1)[0] if name else "UNKNOWN"


@lru_cache(maxsize=4096)
def _ascii_lookalike(char: str) -> bool:
    """A letter outside ASCII that renders as one ASCII letter or digit: Unicode's
    confusables (confusable_homoglyphs' copy of confusables.txt) map it to one, `ɑ` → a,
    `ı` → i, `ǀ` → l, Cyrillic `а` → a. Accented letters (é, ø, ł) are not in that list."""
    if char.isascii():
        return False
    if char in _LATIN_LOOKALIKES:
        return True
    homoglyphs = confusables_data.get(char, ())
    return any(len(h["c"]) == 1 and h["c"].isascii() and h["c"].isalnum() for h in homoglyphs)


def name_normalise(name: object) -> str:
    """The canonical form of a user name: NFKC, case folded, stripped. `Alice`, `alice `
    and `ａｌｉｃｅ` (full width) are all `alice`.

    Look-alikes are refused rather than mapped: a name mixing scripts (Latin `alice` with a
    Cyrillic `а`), a Latin name with a letter that renders as another (`ɑlice`, `alıce`; so
    Turkish dotless ı too), or a Cyrillic/Greek name made only of Latin look-alike letters
    is almost always an impersonation, and guessing which Latin name it "means" would merge two
    people. Control, format and space characters inside a name are refused too."""
    if not isinstance(name, str):
        raise AuthRejected("the user name must be a string")
    canonical = unicodedata.normalize("NFKC", name).casefold().strip()
    # NFKC after case folding again: folding can produce characters NFKC would change.
    canonical = unicodedata.normalize("NFKC", canonical)
    if not 0 < len(canonical) <= 150:
        raise AuthRejected("the user name is empty or too long")
    if any(unicodedata.category(c)[0] in "CZ" for c in canonical):
        raise AuthRejected("the user name contains spaces or invisible characters")
    if NAMESPACE_SEPARATOR in canonical:
        raise AuthRejected(f"the user name may not contain {NAMESPACE_SEPARATOR!r}")
    scripts = {s for s in map(_script, canonical) if s}
    if len(scripts) > 1:
        raise AuthRejected("the user name mixes scripts (a look-alike of another name)")
    letters = [c for c in canonical if c.isalpha()]
    if scripts == {"LATIN"} and any(map(_ascii_lookalike, letters)):
        raise AuthRejected("the user name has a letter that looks like another (`ɑ` for a, `ı` for i)")
    if scripts and scripts != {"LATIN"} and all(map(_ascii_lookalike, letters)):
        raise AuthRejected("the user name looks like a Latin name written in another script")
    return canonical
