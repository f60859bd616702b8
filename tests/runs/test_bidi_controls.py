"""A right-to-left override (or any bidirectional control) in what a run or a person wrote
is shown, never obeyed, on every page: the inbox card, the run page, the runs list."""

import pytest
from django.test import Client

from runs.application import run_start
from runs.runtime.dispatch import drain
from runs.web.bidi import BIDI_CONTROLS, neutralise

GOAL = "deploy build 3.1 to staging\u202e\u2066noitcudorp\u2069"


def signed_in(name: str) -> Client:
    client = Client()
    assert client.login(username=name, password=f"{name}-password")
    return client


def test_every_bidi_control_is_made_visible():
    assert neutralise("a\u202eb\u200fc\u061c") == "a[U+202E]b[U+200F]c[U+061C]"
    assert all(char not in neutralise(BIDI_CONTROLS) for char in BIDI_CONTROLS)
    assert neutralise("שלום עולם · مرحبا") == "שלום עולם · مرحبا"  # right-to-left text itself is fine


@pytest.mark.parametrize(
    ("who", "path"), [("bob", "/inbox/"), ("alice", "/console/"), ("alice", "/console/runs/{run}/")]
)
def test_a_goal_with_bidi_controls_is_shown_not_obeyed(people, who, path):
    run, _ = run_start(caller=people.caller("alice"), query=GOAL, agent_id="deploy")
    drain()  # parks at its approval gate: a card in the inbox
    page = signed_in(who).get(path.format(run=run.pk))
    assert page.status_code == 200
    text = page.content.decode()
    assert "deploy build 3.1 to staging[U+202E][U+2066]noitcudorp[U+2069]" in text
    assert not any(char in text for char in BIDI_CONTROLS)
    assert int(page["Content-Length"]) == len(page.content)
