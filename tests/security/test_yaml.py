"""Hostile YAML and JSON: alias bombs, recursive anchors, deep nesting and oversized files are
refused while a config is read (so DAG parsing stays bounded), with the file and the line."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from trialflow.config import ConfigError, load_config
from trialflow.config.files import MAX_CONFIG_BYTES, MAX_DEPTH, MAX_SEARCH_SPACE_BYTES, load_yaml

HEAD = "trialConcurrency: 1\ntrialCommand: python3 t.py\ntuner: {name: Random}\ntrainingService: {platform: local}\n"
SPACE = "searchSpace:\n  x: {_type: uniform, _value: [0, 1]}\n"


def bomb(levels: int = 9, width: int = 9) -> str:
    """The classic 'billion laughs': each level lists the previous one ``width`` times."""
    lines = ['l0: &l0 ["lol"' + ', "lol"' * (width - 1) + "]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def _limited_validate(config: Path) -> subprocess.CompletedProcess:
    """`trialflow validate` with at most 2 GiB of address space: a bomb that is expanded
    would die of MemoryError instead of refusing the file."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    return subprocess.run(
        [sys.executable, "-m", "trialflow.cli", "validate", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit,
    )


def test_an_alias_bomb_in_the_config_is_refused_with_its_line(write):
    text = HEAD + SPACE + "extra:\n" + "".join("  " + line + "\n" for line in bomb().splitlines())
    assert len(bomb()) < 600  # a few hundred bytes, 9**9 values expanded
    path = write("bomb.yml", text)
    with pytest.raises(ConfigError, match="alias") as err:
        load_config(path)
    problem = err.value.problems[0]
    assert problem.file == path.resolve() and problem.line is not None and problem.line > 6
    result = _limited_validate(path)
    assert result.returncode == 1 and "aliases expand to more than" in result.stderr, result.stderr[-2000:]
    assert "MemoryError" not in result.stderr and "Traceback" not in result.stderr


def test_an_alias_bomb_in_a_search_space_file_is_refused(write, tmp_path):
    write("space.yml", bomb() + "x: {_type: choice, _value: *l8}\n")
    path = write("c.yml", HEAD + "searchSpaceFile: space.yml\n")
    result = _limited_validate(path)
    assert result.returncode == 1, result.stdout
    assert f"{(tmp_path / 'space.yml').resolve()}:" in result.stderr and "alias" in result.stderr
    assert "Traceback" not in result.stderr


def test_aliases_used_within_bounds_still_work(write):
    text = "searchSpace:\n  a: &u {_type: uniform, _value: [0, 1]}\n  b: *u\n" + HEAD
    config = load_config(write("ok.yml", text))
    assert config.search_space == {
        "a": {"_type": "uniform", "_value": [0, 1]},
        "b": {"_type": "uniform", "_value": [0, 1]},
    }
    data, _ = load_yaml("a: &a [1, 2]\nb: [*a, *a]\n")
    assert data == {"a": [1, 2], "b": [[1, 2], [1, 2]]}


@pytest.mark.parametrize(
    "text, line",
    [
        ("x: &x [*x]\n", 1),
        ("a: 1\nx: &x {y: *x}\n", 2),
        ("x: &x [1, [2, *x]]\n", 1),
    ],
)
def test_recursive_anchors_are_refused(write, text, line):
    with pytest.raises(ConfigError, match="recursive") as err:
        load_config(write("r.yml", HEAD + SPACE + text))
    assert err.value.problems[0].line == line + HEAD.count("\n") + SPACE.count("\n")


def test_deep_nesting_is_refused_at_its_line(write):
    deep = "deep: " + "[" * 100_000 + "]" * 100_000 + "\n"
    with pytest.raises(ConfigError, match=f"nested deeper than {MAX_DEPTH} levels") as err:
        load_config(write("deep.yml", HEAD + SPACE + deep))
    assert err.value.problems[0].line == 7
    block = "deep:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 200)) + "  " * 200 + "v: 1\n"
    with pytest.raises(ConfigError, match="nested deeper"):
        load_config(write("block.yml", HEAD + SPACE + block))


def test_a_deep_json_search_space_is_refused(write, tmp_path):
    write("space.json", '{"x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ConfigError, match="nested deeper") as err:
        load_config(write("c.yml", HEAD + "searchSpaceFile: space.json\n"))
    assert err.value.problems[0].file == (tmp_path / "space.json").resolve()


def test_deep_nested_choices_are_refused_not_a_recursion_error(write, tmp_path):
    depth = 2000
    head = "".join(f'{{"_type": "choice", "_value": [{{"_name": "n{i}", "p": ' for i in range(depth))
    write("space.json", '{"x": ' + head + '{"_type": "uniform", "_value": [0, 1]}' + "}]}" * depth + "}")
    with pytest.raises(ConfigError, match="nested deeper"):
        load_config(write("c.yml", HEAD + "searchSpaceFile: space.json\n"))


def test_oversized_files_are_refused_before_parsing(write, tmp_path):
    big = write("big.yml", HEAD + SPACE + "# " + "x" * MAX_CONFIG_BYTES + "\n")
    with pytest.raises(ConfigError, match="larger than 1024 KiB"):
        load_config(big)
    space = tmp_path / "space.json"
    with open(space, "w") as handle:
        handle.write('{"x": {"_type": "choice", "_value": [' + "1," * (MAX_SEARCH_SPACE_BYTES // 2) + "1]}}")
    with pytest.raises(ConfigError, match="search space file .* is larger than"):
        load_config(write("c.yml", HEAD + "searchSpaceFile: space.json\n"))


@pytest.mark.parametrize(
    "target, message",
    [
        ("folder", "is a folder, expected a file"),
        ("/dev/zero", "is not a regular file"),
        ("missing.json", "does not exist"),
    ],
)
def test_a_search_space_file_that_is_not_a_file_says_what_it_is(write, tmp_path, target, message):
    (tmp_path / "folder").mkdir()
    with pytest.raises(ConfigError, match=message) as err:
        load_config(write("c.yml", HEAD + f"searchSpaceFile: {target}\n"))
    assert err.value.problems[0].key_path == ("searchSpaceFile",)
    assert err.value.problems[0].line == 5


def test_a_config_that_is_a_folder_or_device_is_clear(tmp_path):
    with pytest.raises(ConfigError, match="is a folder"):
        load_config(tmp_path)
    with pytest.raises(ConfigError, match="not a regular file"):
        load_config("/dev/zero")


def test_too_many_values_are_refused(write):
    many = "big: [" + ", ".join("1" for _ in range(100_001)) + "]\n"
    with pytest.raises(ConfigError, match="more than 100000 values"):
        load_config(write("many.yml", HEAD + SPACE + many))


# -- duplicate keys, and a search-space file that is not one -----------------------------------

DUPLICATE_CONFIG = """\
searchSpace: {x: {_type: uniform, _value: [0, 1]}}
trialCommand: python3 t.py
trialConcurrency: 1
tuner: {name: TPE}
trialConcurrency: 8
trainingService: {platform: local}
"""


def test_a_key_written_twice_in_the_config_is_refused_with_both_lines(tmp_path):
    from trialflow.config import ConfigError, load_config

    path = tmp_path / "c.yml"
    path.write_text(DUPLICATE_CONFIG)
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert f"{path}:5:" in str(refused.value)
    assert "duplicate key 'trialConcurrency': on line 3 and line 5" in str(refused.value)


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            '{"x": {"_type": "uniform", "_value": [0, 1]},\n "x": {"_type": "choice", "_value": [1]}}',
            "on line 1 and line 2",
        ),
        ('{"x": {"_type": "uniform", "_value": [0, 1], "_type": "choice"}}', "duplicate key '_type'"),
    ],
)
def test_a_key_written_twice_in_a_search_space_json_is_refused(tmp_path, text, expected):
    from trialflow.config import ConfigError, load_config

    (tmp_path / "space.json").write_text(text)
    path = tmp_path / "c.yml"
    path.write_text(
        DUPLICATE_CONFIG.replace("trialConcurrency: 8\n", "").replace(
            "searchSpace: {x: {_type: uniform, _value: [0, 1]}}", "searchSpaceFile: space.json"
        )
    )
    with pytest.raises(ConfigError, match=expected):
        load_config(path)


SHADOW = "root:$6$TOPSECRETHASH:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n"


@pytest.mark.parametrize(
    "name, text",
    [
        ("shadow", SHADOW),
        ("shadow", "root: $6$TOPSECRET: x\n"),  # not YAML: PyYAML's message quotes the line
        ("shadow", "password: TOPSECRET\n"),  # YAML, but no search space
        ("shadow.json", '{"password": "TOPSECRET"}'),
        ("shadow.json", '{"password": TOPSECRET}'),
    ],
)
def test_a_search_space_file_that_is_not_one_is_described_not_quoted(tmp_path, name, text):
    from trialflow.config import ConfigError, load_config

    (tmp_path / name).write_text(text)
    path = tmp_path / "c.yml"
    path.write_text(
        DUPLICATE_CONFIG.replace("trialConcurrency: 8\n", "").replace(
            "searchSpace: {x: {_type: uniform, _value: [0, 1]}}", f"searchSpaceFile: {name}"
        )
    )
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    said = str(refused.value)
    assert str(tmp_path / name) in said
    assert "TOPSECRET" not in said and "password" not in said and "$6$" not in said


@pytest.mark.parametrize(
    "content, words",
    [
        ('{"x": {"_type": "uniform", "_value": [0, 1]}, "x": {"_type": "choice", "_value": [1]}}', "duplicate key 'x'"),
        ("a" * 1_100_000, "is larger than"),
        ("{x: [", "not JSON or YAML"),
        (
            "a: &a [1,1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
            "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
            "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
            "f: [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n",
            "alias",
        ),
    ],
)
def test_a_hostile_search_space_file_is_refused_before_any_store_is_opened(tmp_path, capsys, content, words):
    """`trialflow update-searchspace` reads its file with the config reader's bounds."""
    from trialflow.cli.commands import main

    path = tmp_path / "space.yml"
    path.write_text(content)
    assert main(["update-searchspace", "e1", str(path), "--store", f"sqlite:///{tmp_path / 'none.db'}"]) == 1
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err, err
    assert not (tmp_path / "none.db").exists()
