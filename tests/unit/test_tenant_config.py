"""Tenant weights and caps from flags and a TOML file (issue 10, item 4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from leasekeeper.fairness.tenant_config import tenant_policy


def test_the_file_gives_defaults_and_tenants_and_flags_win(tmp_path: Path) -> None:
    path = tmp_path / "tenants.toml"
    path.write_text(
        "[defaults]\nweight = 2\ncap = 50\n\n[tenants.acme]\nweight = 5\ncap = 10\n"
        "\n[tenants.zed]\ncap = 3\n"
    )
    policy = tenant_policy(path=path, weight_for=("acme=7",), cap_for=("zed=4",))
    assert (policy.weight("acme"), policy.cap("acme")) == (7.0, 10)
    assert (policy.weight("zed"), policy.cap("zed")) == (2.0, 4)
    assert (policy.weight("other"), policy.cap("other")) == (2.0, 50)
    assert tenant_policy(path=path, cap=5).cap("other") == 5


@pytest.mark.parametrize(
    ("text", "problem"),
    [("[tenants.acme]\nweight = 0\n", "tenants.acme.weight: expected a number > 0"),
     ("[tenants.acme]\nlimit = 3\n", "takes weight and cap only"),
     ("[defaults\n", "--tenants ")],
)  # fmt: skip
def test_a_bad_file_names_the_file_and_the_entry(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "tenants.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=problem) as caught:
        tenant_policy(path=path)
    assert str(path) in str(caught.value)


def test_no_flags_means_no_caps_and_equal_weights() -> None:
    policy = tenant_policy()
    assert (policy.cap("t"), policy.weight("t")) == (None, 1.0)
    with pytest.raises(ValueError, match="--tenant-cap 0: expected 1 or more"):
        tenant_policy(cap=0)
