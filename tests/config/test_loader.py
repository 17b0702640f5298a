from __future__ import annotations

import pytest
from pydantic import SecretStr

from trialflow.config import ConfigError, load_config, to_v2_dict
from trialflow.config.platforms import LocalConfig, RemoteConfig

MINIMAL = """\
searchSpace:
  x: {_type: uniform, _value: [0, 1]}
trialCommand: python3 trial.py
trialConcurrency: 2
tuner: {name: TPE, classArgs: {optimize_mode: maximize}}
trainingService: {platform: local}
"""


def problems(exc: ConfigError) -> list[str]:
    return [str(p) for p in exc.problems]


def test_minimal_v2_config(write):
    path = write("exp/config.yml", MINIMAL)
    config = load_config(path)
    assert config.trial_concurrency == 2
    assert isinstance(config.training_service[0], LocalConfig)
    assert config.trial_code_directory == path.parent  # "." resolves against the config's folder
    assert config.source_file == path.resolve()


def test_keys_match_ignoring_case_and_underscores(write):
    path = write(
        "c.yml",
        MINIMAL.replace("trialConcurrency", "trial_concurrency").replace("trialCommand", "TRIAL_COMMAND")
        + "max_trial_number: 5\nMaxExperimentDuration: 1h\n",
    )
    config = load_config(path)
    assert (config.trial_concurrency, config.max_trial_number, config.max_experiment_duration) == (2, 5, 3600)
    assert config.trial_command == "python3 trial.py"


def test_same_key_twice_in_different_spellings_is_an_error(write):
    path = write("c.yml", MINIMAL + "trial_concurrency: 3\n")
    with pytest.raises(ConfigError, match="given twice"):
        load_config(path)


def test_unknown_key_names_file_line_path_and_suggests(write):
    path = write("c.yml", MINIMAL + "trialConcurency: 3\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    (message,) = problems(err.value)
    assert message.startswith(f"{path.resolve()}:7: trialConcurency: unknown key")
    assert "did you mean 'trialConcurrency'" in message


def test_nested_error_has_key_path_and_line(write):
    path = write(
        "c.yml",
        MINIMAL.replace(
            "trainingService: {platform: local}",
            """\
trainingService:
  platform: remote
  machineList:
    - host: a
      user: u
      port: notaport
""",
        ),
    )
    with pytest.raises(ConfigError) as err:
        load_config(path)
    (message,) = problems(err.value)
    assert ":11: trainingService.machineList[0].port:" in message
    assert "integer" in message and "'notaport'" in message


def test_every_problem_is_reported_at_once(write):
    path = write("c.yml", MINIMAL.replace("trialConcurrency: 2", "trialConcurrency: 0") + "maxTrialNumber: x\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    keys = {p.key_path[0] for p in err.value.problems}
    assert keys == {"trialConcurrency", "maxTrialNumber"}


def test_unknown_platform_lists_the_known_ones(write):
    path = write("c.yml", MINIMAL.replace("platform: local", "platform: slurm"))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    (message,) = problems(err.value)
    assert "trainingService" in message and "local" in message and "kubeflow" in message and "slurm" in message


def test_missing_platform(write):
    path = write("c.yml", MINIMAL.replace("trainingService: {platform: local}", "trainingService: {}"))
    with pytest.raises(ConfigError, match="platform"):
        load_config(path)


def test_trial_command_inside_training_service(write):
    text = MINIMAL.replace("trialCommand: python3 trial.py\n", "").replace(
        "trainingService: {platform: local}", "trainingService: {platform: local, trialCommand: python3 t.py}"
    )
    config = load_config(write("c.yml", text))
    from trialflow.config import effective_trial_command

    assert effective_trial_command(config) == "python3 t.py"


def test_trial_command_required(write):
    with pytest.raises(ConfigError, match="trialCommand is required"):
        load_config(write("c.yml", MINIMAL.replace("trialCommand: python3 trial.py\n", "")))


def test_search_space_file_json_and_yaml(write, tmp_path):
    write("space.json", '{"lr": {"_type": "loguniform", "_value": [0.001, 0.1]}}')
    write("space.yaml", "lr: {_type: choice, _value: [1, 2]}\n")
    base = MINIMAL.replace("searchSpace:\n  x: {_type: uniform, _value: [0, 1]}\n", "")
    assert (
        load_config(write("a.yml", base + "searchSpaceFile: space.json\n")).search_space["lr"]["_type"] == "loguniform"
    )
    assert load_config(write("b.yml", base + "searchSpaceFile: space.yaml\n")).search_space["lr"]["_value"] == [1, 2]


def test_search_space_both_or_neither(write):
    write("space.json", "{}")
    with pytest.raises(ConfigError, match="not both"):
        load_config(write("a.yml", MINIMAL + "searchSpaceFile: space.json\n"))
    with pytest.raises(ConfigError, match="set searchSpace"):
        load_config(write("b.yml", MINIMAL.replace("searchSpace:\n  x: {_type: uniform, _value: [0, 1]}\n", "")))


def test_search_space_file_missing_names_the_file(write):
    base = MINIMAL.replace("searchSpace:\n  x: {_type: uniform, _value: [0, 1]}\n", "")
    with pytest.raises(ConfigError, match="nope.json does not exist"):
        load_config(write("a.yml", base + "searchSpaceFile: nope.json\n"))


def test_bad_search_space_entry_has_path_and_line(write):
    path = write("c.yml", MINIMAL.replace("[0, 1]", "[1, 0]"))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    (message,) = problems(err.value)
    assert ":2: searchSpace.x._value: uniform needs low < high" in message


def test_yaml_syntax_error_has_line(write):
    path = write("c.yml", MINIMAL + "tuner: [unclosed\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert "not valid YAML" in str(err.value) and f"{path.resolve()}:" in str(err.value)


def test_missing_file_and_non_mapping(write, tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "nope.yml")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config(write("list.yml", "- 1\n- 2\n"))
    with pytest.raises(ConfigError, match="not an NNI experiment config"):
        load_config(write("other.yml", "apiVersion: v1\nkind: Pod\n"))


def test_placeholder_in_braces_gets_a_quoting_hint(write):
    path = write("c.yml", MINIMAL + "nniManagerIp: {replace_with_your_ip}\n")
    with pytest.raises(ConfigError, match="quote it"):
        load_config(path)


def test_tuner_required_and_not_with_advisor(write):
    with pytest.raises(ConfigError, match="tuner must be set"):
        load_config(write("a.yml", MINIMAL.replace("tuner: {name: TPE, classArgs: {optimize_mode: maximize}}\n", "")))
    with pytest.raises(ConfigError, match="not both"):
        load_config(write("b.yml", MINIMAL + "advisor: {name: Hyperband}\n"))


def test_annotation_is_refused_clearly(write):
    with pytest.raises(ConfigError, match="annotations"):
        load_config(write("a.yml", MINIMAL + "useAnnotation: true\n"))


def test_gpu_needs_use_active_gpu_on_local(write):
    with pytest.raises(ConfigError, match="useActiveGpu must be set"):
        load_config(write("a.yml", MINIMAL + "trialGpuNumber: 1\n"))
    config = load_config(
        write(
            "b.yml",
            MINIMAL.replace("{platform: local}", "{platform: local, useActiveGpu: false}") + "trialGpuNumber: 1\n",
        )
    )
    assert config.trial_gpu_number == 1


@pytest.mark.parametrize("given, expected", [('"0,2"', [0, 2]), ("3", [3]), ("[1, 2]", [1, 2]), ("1", [1])])
def test_gpu_indices_forms(write, given, expected):
    config = load_config(
        write("a.yml", MINIMAL.replace("{platform: local}", f"{{platform: local, gpuIndices: {given}}}"))
    )
    assert config.training_service[0].gpu_indices == expected


def test_relative_paths_resolve_against_config_folder(write, tmp_path):
    path = write("sub/c.yml", MINIMAL + "trialCodeDirectory: ../code\nexperimentWorkingDirectory: runs\n")
    config = load_config(path)
    assert config.trial_code_directory.resolve() == (tmp_path / "code").resolve()
    assert config.experiment_working_directory == tmp_path / "sub" / "runs"


def test_secrets_are_masked_in_the_v2_form(write):
    path = write(
        "c.yml",
        MINIMAL.replace(
            "trainingService: {platform: local}",
            """\
trainingService:
  platform: remote
  machineList: [{host: h, user: u, password: hunter2, sshPassphrase: 12345}]
""",
        ),
    )
    config = load_config(path)
    machine = config.training_service[0].machine_list[0]
    assert isinstance(machine.password, SecretStr) and machine.password.get_secret_value() == "hunter2"
    assert machine.ssh_passphrase.get_secret_value() == "12345"  # plain digits: taken as typed
    dumped = str(to_v2_dict(config)) + repr(config)
    assert "hunter2" not in dumped and "12345" not in dumped


def test_remote_machine_needs_host_and_user_or_a_connection(write):
    text = MINIMAL.replace(
        "trainingService: {platform: local}", "trainingService: {platform: remote, machineList: [{port: 22}]}"
    )
    with pytest.raises(ConfigError, match="host and user"):
        load_config(write("a.yml", text))
    ok = MINIMAL.replace(
        "trainingService: {platform: local}", "trainingService: {platform: remote, machineList: [{sshConnId: gpu_box}]}"
    )
    assert isinstance(load_config(write("b.yml", ok)).training_service[0], RemoteConfig)
    with pytest.raises(ConfigError, match="at least one machine"):
        load_config(write("c.yml", MINIMAL.replace("{platform: local}", "{platform: remote, machineList: []}")))


def test_hybrid_list_keeps_each_platform_model(write):
    text = MINIMAL.replace(
        "trainingService: {platform: local}",
        """\
trainingService:
  - platform: local
  - platform: remote
    machineList: [{host: h, user: u}]
""",
    )
    config = load_config(write("c.yml", text))
    assert config.platform_names == ["local", "remote"]
    with pytest.raises(ConfigError) as err:
        load_config(write("d.yml", text.replace("host: h, ", "")))
    assert "trainingService[1].machineList[0]" in str(err.value)


def test_kubeflow_roles_must_fit_the_operator(write):
    text = MINIMAL.replace(
        "trainingService: {platform: local}",
        """\
trainingService:
  platform: kubeflow
  operator: tf-operator
  master: {replicas: 1, command: x, cpuNumber: 1, memorySize: 1gb}
""",
    )
    with pytest.raises(ConfigError, match="tf-operator takes worker and ps"):
        load_config(write("c.yml", text))


def test_v2_form_round_trips(write, tmp_path):
    import yaml

    config = load_config(write("c.yml", MINIMAL + "maxTrialDuration: 10m\n"))
    again = load_config(write("again.yml", yaml.safe_dump(to_v2_dict(config))))
    assert to_v2_dict(again) == to_v2_dict(config)


def test_unreadable_search_space_file_is_a_clear_error(write, tmp_path):
    (tmp_path / "space.json").write_bytes(b"\xff\xfe not utf-8")
    base = MINIMAL.replace("searchSpace:\n  x: {_type: uniform, _value: [0, 1]}\n", "")
    with pytest.raises(ConfigError, match="cannot read search space file"):
        load_config(write("a.yml", base + "searchSpaceFile: space.json\n"))
