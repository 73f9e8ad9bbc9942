"""roq.settings: settings from TOML files and flags, checked against config dataclasses."""

from __future__ import annotations

import dataclasses

import pytest

from roq.errors import ConfigError
from roq.settings import build, read_toml


@dataclasses.dataclass(frozen=True)
class _Settings:
    name: str
    port: int = 5000
    ratio: float = 0.5
    verbose: bool = False
    peers: tuple[str, ...] = ()


def test_build_takes_typed_values_from_the_section():
    file = {"svc": {"name": "a", "port": 7, "ratio": 2, "verbose": True, "peers": ["x", "y"]}}
    s = build(_Settings, file=file, section="svc")
    assert s == _Settings("a", 7, 2.0, True, ("x", "y"))
    assert type(s.ratio) is float and type(s.peers) is tuple


def test_build_uses_defaults_for_keys_not_given():
    assert build(_Settings, file={"svc": {"name": "a"}}, section="svc") == _Settings("a")


def test_build_ignores_other_sections():
    assert build(_Settings, file={"svc": {"name": "a"}, "other": {"zzz": 1}}, section="svc").name == "a"


def test_unknown_key_is_named_with_a_suggestion():
    with pytest.raises(ConfigError, match=r"roq\.toml: \[svc\] unknown key 'prot' \(did you mean 'port'\?\)"):
        build(_Settings, file={"svc": {"name": "a", "prot": 1}}, section="svc", source="roq.toml")


def test_unknown_key_without_a_close_match_lists_the_known_keys():
    with pytest.raises(ConfigError, match="unknown key 'zzzz'; known keys: name, peers, port, ratio, verbose"):
        build(_Settings, file={"svc": {"name": "a", "zzzz": 1}}, section="svc")


@pytest.mark.parametrize(
    "key, value",
    [("port", "80"), ("port", True), ("port", 1.5), ("ratio", "0.5"), ("ratio", False), ("verbose", 1),
     ("name", 3), ("peers", "x"), ("peers", ["x", 2])],
)
def test_wrong_type_is_named_with_section_and_key(key, value):
    with pytest.raises(ConfigError, match=rf"f\.toml: \[svc\] key '{key}' must be"):
        build(_Settings, file={"svc": {"name": "a", key: value}}, section="svc", source="f.toml")


def test_missing_required_key_is_named():
    with pytest.raises(ConfigError, match=r"\[svc\] missing key 'name'.*--name"):
        build(_Settings, file={"svc": {"port": 1}}, section="svc")


def test_missing_section_still_requires_the_required_key():
    with pytest.raises(ConfigError, match="missing key 'name'"):
        build(_Settings, file={}, section="svc")


def test_flags_override_the_file():
    s = build(_Settings, file={"svc": {"name": "a", "port": 1, "verbose": True}}, section="svc",
              flags={"port": 2, "verbose": False, "peers": ["p"]})
    assert (s.port, s.verbose, s.peers) == (2, False, ("p",))


def test_none_flags_are_ignored():
    s = build(_Settings, file={"svc": {"name": "a", "port": 1}}, section="svc", flags={"port": None, "name": None})
    assert (s.name, s.port) == ("a", 1)


def test_flags_alone_can_give_the_required_key():
    assert build(_Settings, flags={"name": "b", "ratio": 3}, section="svc") == _Settings("b", ratio=3.0)


def test_wrong_type_of_a_flag_names_the_option():
    with pytest.raises(ConfigError, match="option --port must be an integer"):
        build(_Settings, flags={"name": "a", "port": "x"}, section="svc")


def test_a_section_that_is_not_a_table_is_refused():
    with pytest.raises(ConfigError, match=r"\[svc\] must be a table"):
        build(_Settings, file={"svc": 3}, section="svc")


def test_read_toml_parses_a_file(tmp_path):
    path = tmp_path / "roq.toml"
    path.write_text('[svc]\nname = "a"\nport = 9\npeers = ["h:1", "h:2"]\n')
    s = build(_Settings, file=read_toml(str(path)), section="svc", source=str(path))
    assert s == _Settings("a", 9, peers=("h:1", "h:2"))


def test_read_toml_of_an_invalid_file_names_the_file(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("[svc\nname = \n")
    with pytest.raises(ConfigError, match=r"broken\.toml: not valid TOML"):
        read_toml(str(path))


def test_read_toml_of_a_missing_file_names_the_file(tmp_path):
    with pytest.raises(ConfigError, match=r"absent\.toml: cannot read"):
        read_toml(str(tmp_path / "absent.toml"))


def test_an_error_in_a_read_file_names_the_file(tmp_path):
    path = tmp_path / "roq.toml"
    path.write_text('[svc]\nname = "a"\nport = "high"\n')
    with pytest.raises(ConfigError, match=r"roq\.toml: \[svc\] key 'port'"):
        build(_Settings, file=read_toml(str(path)), section="svc", source=str(path))


def test_a_duration_reads_seconds_minutes_hours_and_days():
    from roq.settings import parse_duration

    assert [parse_duration(t) for t in ("90s", "30m", "1.5h", "7d")] == [90, 1800, 5400, 604800]
    for bad in ("", "7", "7w", "-1d", "d"):
        with pytest.raises(ConfigError, match="duration"):
            parse_duration(bad)
