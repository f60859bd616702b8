"""Each compat module names the versions of its library it was checked against: an
installed version outside that range fails here, until someone has read the module against
the new version's source and widened the range."""

import importlib
import pkgutil

import pytest

import compat
from compat import Checked, release

MODULES = sorted(info.name for info in pkgutil.iter_modules(compat.__path__))


def test_every_library_touched_past_its_public_api_has_a_compat_module():
    assert MODULES  # the package is found
    for name in MODULES:
        checked = importlib.import_module(f"compat.{name}").CHECKED
        assert isinstance(checked, Checked), name


@pytest.mark.parametrize("name", MODULES)
def test_the_installed_version_is_one_the_compat_module_was_checked_against(name):
    checked = importlib.import_module(f"compat.{name}").CHECKED
    assert checked.holds(), (
        f"compat/{name}.py was checked against {checked}, but {checked.name} "
        f"{'.'.join(map(str, checked.installed()))} is installed: read the module against this "
        "version's source, then widen CHECKED"
    )


def test_a_version_outside_the_range_fails_the_check(monkeypatch):
    checked = Checked("daphne", lowest=(4, 2), below=(4, 3))
    for installed, holds in [("4.2.0", True), ("4.2.9", True), ("4.3.0", False), ("4.1.9", False), ("5.0", False)]:
        monkeypatch.setattr("compat.version", lambda name, installed=installed: installed)
        assert checked.holds() is holds, installed
    assert str(checked) == "daphne>=4.2,<4.3"


def test_release_reads_the_numbers_of_a_version():
    assert release("4.2.3") == (4, 2, 3)
    assert release("26.10.0rc1") == (26, 10, 0)
    assert release("5.2.20+local") == (5, 2, 20)
