"""Where the product reaches into a third-party library past its public API: one module per
library, each naming the versions it was checked against (`CHECKED`). A test fails when
the installed version leaves that range (tests/test_compat_versions.py): read the module
against the new version's source, then widen the range. Nothing outside this package may
touch a library's private names (tests/test_private_names.py)."""

import re
from dataclasses import dataclass
from importlib.metadata import version


@dataclass(frozen=True)
class Checked:
    """The distribution `name`, from version `lowest` up to (not including) `below`."""

    name: str
    lowest: tuple[int, ...]
    below: tuple[int, ...]

    def installed(self) -> tuple[int, ...]:
        return release(version(self.name))

    def holds(self) -> bool:
        return self.lowest <= self.installed() < self.below

    def __str__(self) -> str:
        spell = ".".join
        return f"{self.name}>={spell(map(str, self.lowest))},<{spell(map(str, self.below))}"


def release(text: str) -> tuple[int, ...]:
    """A version's release numbers ("4.2.3rc1" → (4, 2, 3))."""
    return tuple(int(part) for part in re.findall(r"\d+", text.split("+")[0].split("rc")[0])[:3])
