"""What an approval binds to: the arguments' fingerprint."""

import hashlib

from approvals.policy import arguments_fingerprint


def test_the_fingerprint_is_sha256_of_canonical_json():
    expected = hashlib.sha256(b'{"build":"9","environment":"production"}').hexdigest()
    assert arguments_fingerprint({"environment": "production", "build": "9"}) == expected


def test_key_order_does_not_change_it_at_any_depth():
    one = {"build": "9", "target": {"region": "eu", "zone": 2}, "flags": [1, 2]}
    other = {"flags": [1, 2], "target": {"zone": 2, "region": "eu"}, "build": "9"}
    assert arguments_fingerprint(one) == arguments_fingerprint(other)


def test_any_changed_value_changes_it():
    base = {"build": "9", "environment": "production", "dry_run": False, "replicas": 3, "target": {"region": "eu"}}
    changed = [
        {**base, "build": "10"},
        {**base, "environment": "Production"},
        {**base, "dry_run": True},
        {**base, "replicas": 4},
        {**base, "replicas": "3"},  # a number and a string are not the same argument
        {**base, "target": {"region": "us"}},
        {**base, "extra": None},
        {k: v for k, v in base.items() if k != "dry_run"},
    ]
    fingerprints = {arguments_fingerprint(args) for args in changed}
    assert len(fingerprints) == len(changed) and arguments_fingerprint(base) not in fingerprints


def test_text_is_hashed_as_utf8_not_escaped():
    expected = hashlib.sha256('{"note":"déploiement ✓"}'.encode()).hexdigest()
    assert arguments_fingerprint({"note": "déploiement ✓"}) == expected
