"""Hostile files end in a clear SpecError (exit 2) naming the file, before they can hang or grow."""
from __future__ import annotations

import pytest

import planner.io as pio
from planner.cli.main import main
from planner.errors import SpecError
from planner.io import load_yaml, parse_yaml, read_matrix_csv


def test_directory_is_refused(tmp_path):
    with pytest.raises(SpecError, match="is a directory"):
        load_yaml(str(tmp_path))


def test_device_file_is_refused_without_reading_it():
    with pytest.raises(SpecError, match="not a regular file") as e:
        read_matrix_csv("/dev/zero", "c.yaml", "network.bandwidth_matrix")
    assert e.value.file == "c.yaml" and e.value.field == "network.bandwidth_matrix"


def test_binary_file_is_refused(tmp_path):
    p = tmp_path / "b.yaml"
    p.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe" * 10)
    with pytest.raises(SpecError, match="not UTF-8"):
        load_yaml(str(p))


def test_oversized_file_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(pio, "MAX_INPUT_BYTES", 100)
    p = tmp_path / "big.yaml"
    p.write_text("a: 1\n" * 50)
    with pytest.raises(SpecError, match="more than the 100"):
        read_matrix_csv(str(p), None, "m")


def test_deep_nesting_is_refused_not_a_recursion_error():
    with pytest.raises(SpecError, match="deeper than 64"):
        parse_yaml("[" * 5000 + "]" * 5000, "deep.yaml")
    with pytest.raises(SpecError, match="deeper than 64"):
        parse_yaml("a:\n" + "".join(" " * i + "- \n" for i in range(1, 200)), "deep.yaml")


def test_alias_bomb_is_refused_but_plain_aliases_work():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(8))
    with pytest.raises(SpecError, match="expands to more than"):
        parse_yaml(bomb, "bomb.yaml")
    assert parse_yaml("base: &b {x: 1}\nuse: *b\n", "ok.yaml") == {"base": {"x": 1}, "use": {"x": 1}}


def test_recursive_alias_is_refused():
    with pytest.raises(SpecError, match="contains it"):
        parse_yaml("a: &a [1, *a]\n", "rec.yaml")


@pytest.mark.parametrize("target", ["dir", "binary", "devzero"])
def test_cli_exits_2_naming_the_file(tmp_path, capsys, target):
    arg = {"dir": str(tmp_path), "binary": str(tmp_path / "x.yaml"), "devzero": "/dev/zero"}[target]
    (tmp_path / "x.yaml").write_bytes(b"\x00\xff\xfe" * 100)
    rc = main(["estimate", arg, "--tp", "1", "--pp", "1", "--dp", "16", "--mbs", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and arg in err


@pytest.mark.parametrize("text,field", [("a: .nan\n", "a"), ("a: {b: [1, .inf]}\n", "a.b[1]"), ("x: -.inf\n", "x")])
def test_non_finite_numbers_are_refused_with_their_field(tmp_path, text, field):
    p = tmp_path / "n.yaml"
    p.write_text(text)
    with pytest.raises(SpecError, match="not a finite number") as e:
        load_yaml(str(p))
    assert e.value.field == field and e.value.file == str(p)


def test_non_finite_matrix_cell_is_refused(tmp_path):
    p = tmp_path / "m.csv"
    p.write_text("0,1\nnan,0\n")
    with pytest.raises(SpecError, match=r"\[1,0\] = nan"):
        read_matrix_csv(str(p), "c.yaml", "network.bandwidth_matrix")


@pytest.mark.parametrize("text,field", [('{"compute": {"max_efficiency": NaN}}', None),
                                        ('{"compute": {"max_efficiency": 1e999}}', "compute.max_efficiency")])
def test_profiles_refuse_non_finite_numbers(tmp_path, text, field):
    from planner.costs.compute import load_profile
    p = tmp_path / "p.json"
    p.write_text(text)
    with pytest.raises(SpecError) as e:
        load_profile(str(p))
    assert e.value.file == str(p) and e.value.field == field


def test_profile_at_dev_zero_is_refused_at_once():
    from planner.costs.compute import load_profile
    from planner.costs.learned import LearnedMemory
    for load in (load_profile, LearnedMemory.load):
        with pytest.raises(SpecError, match="not a regular file"):
            load("/dev/zero")
