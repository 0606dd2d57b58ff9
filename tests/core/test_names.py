"""Names -> DNS-1123 labels: always valid, never colliding."""

from __future__ import annotations

import random
import string

import pytest

from aviflow.names import DNS1123_LABEL, label_value, slugify
from aviflow.spec import TrainJob

HOSTILE = [
    "resnet-50",
    "ResNet-50",
    "resnet_50",
    "resnet.50",
    "-leading",
    "trailing-",
    "--both--",
    "Ünïcødé",
    "日本語",
    "a" * 70,
    "a" * 71,
    "a" * 63,
    "a---b",
    "A---B",
    "my run",
    "my_run",
    "my-run",
    "x",
    "X",
    "0",
    "-",
    "_",
    "a b c",
    "a  b c",
    "émile",
    "emile",
]


def test_valid_names_are_kept():
    assert slugify("resnet-50") == "resnet-50"
    assert slugify("a" * 63) == "a" * 63


@pytest.mark.parametrize("name", HOSTILE)
def test_every_slug_is_a_dns1123_label(name):
    slug = slugify(name)
    assert len(slug) <= 63
    assert DNS1123_LABEL.match(slug), slug


def test_hostile_names_map_injectively():
    slugs = {slugify(n) for n in HOSTILE}
    assert len(slugs) == len(set(HOSTILE))


def test_injective_over_many_random_names():
    rng = random.Random(7)
    alphabet = string.ascii_letters + string.digits + "-_. /éü日"
    names = {"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 80))) for _ in range(20000)}
    slugs = {slugify(n) for n in names}
    assert len(slugs) == len(names)
    assert all(DNS1123_LABEL.match(s) and len(s) <= 63 for s in slugs)


def test_short_slugs_for_job_ids():
    long = TrainJob.from_dict(
        {"metadata": {"name": "Very Long Experiment Name " * 4}, "spec": {"script": "pass"}}
    )
    assert len(long.slug) <= 40
    assert DNS1123_LABEL.match(long.slug)


def test_label_values():
    assert label_value("Team_A.1") == "Team_A.1"
    assert label_value("-bad") != "-bad"
    assert len(label_value("x" * 100)) <= 63


def test_a_trailing_newline_is_not_a_label() -> None:
    from aviflow.names import is_dns1123_label, label_value

    assert not is_dns1123_label("tiny-1234abcd\n")
    assert label_value("team\n") != "team\n" and is_dns1123_label(label_value("team\n"))
