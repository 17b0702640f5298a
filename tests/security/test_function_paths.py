"""A function trial's import path is checked before anything is imported: bounded, ASCII
identifiers only, no private or dunder names, and quoted where it becomes a command."""

from __future__ import annotations

import shlex

import pytest

from trialflow.trial.function import MAX_IMPORT_PATH, FunctionTrialError, function_command, parse_import_path


@pytest.mark.parametrize(
    "path",
    [
        "",
        None,
        42,
        "train",  # no function
        "models.train",  # no colon
        "a:b:c",
        "models.train:",
        ":train",
        "models..train:f",
        "models.train:f.",
        "os:__class__",
        "builtins:__import__",
        "models._private:train",
        "models.train:_helper",
        "models.train:f; rm -rf /",
        "models.train:f $(id)",
        "models.tráin:f",  # not ASCII
        "models.train:f\n",
        "١:f",  # a digit that is not ASCII
        "a" * (MAX_IMPORT_PATH + 1) + ":f",
        "a." * 5000 + "b:f",  # long: refused by its length, before the pattern runs
    ],
)
def test_a_bad_import_path_is_refused_saying_what_is_expected(path):
    with pytest.raises(FunctionTrialError):
        parse_import_path(path)


def test_a_good_path_is_parsed_and_quoted_into_the_command():
    assert parse_import_path("models.train:Holder.nested") == ("models.train", "Holder.nested")
    command = function_command("models.train:train", "/opt/my python/bin/python3")
    assert shlex.split(command) == [
        "/opt/my python/bin/python3",
        "-m",
        "trialflow.trial.function",
        "models.train:train",
    ]
    with pytest.raises(FunctionTrialError):
        function_command("os:system; id")
