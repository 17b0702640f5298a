from __future__ import annotations

import pytest

from trialflow.config import ConfigError, load_config, to_v2_dict
from trialflow.config.v1 import convert_v1

V1 = """\
authorName: someone
experimentName: v1exp
trialConcurrency: 2
maxExecDuration: 2h
maxTrialNum: 7
trainingServicePlatform: {platform}
searchSpacePath: space.json
useAnnotation: false
logCollection: http
tuner:
  builtinTunerName: TPE
  classArgs: {{optimize_mode: minimize}}
trial:
  command: python3 t.py
  codeDir: code
  gpuNum: 0
"""


@pytest.fixture
def v1(write):
    write("space.json", '{"x": {"_type": "choice", "_value": [1, 2]}}')

    def make(platform: str = "local", extra: str = "") -> object:
        return load_config(write("c.yml", V1.format(platform=platform) + extra))

    return make


def test_v1_local_maps_every_top_level_key(v1, tmp_path):
    config = v1("local", "localConfig: {useActiveGpu: true, maxTrialNumPerGpu: 2, gpuIndices: '0,1'}\n")
    assert config.experiment_name == "v1exp"
    assert config.max_experiment_duration == 7200
    assert config.max_trial_number == 7
    assert config.trial_command == "python3 t.py"
    assert config.trial_code_directory == tmp_path / "code"
    assert config.tuner.name == "TPE" and config.optimize_mode == "minimize"
    local = config.training_service[0]
    assert (local.use_active_gpu, local.max_trial_number_per_gpu, local.gpu_indices) == (True, 2, [0, 1])


def test_v1_remote_renames_machine_keys_including_passphrase(v1):
    config = v1(
        "remote",
        """\
machineList:
  - {ip: 10.0.0.1, port: 2222, username: bob, sshKeyPath: /keys/id, passphrase: s3cret, pythonPath: /opt/py/bin,
     maxTrialNumPerGpu: 3, useActiveGpu: true, gpuIndices: 1}
  - {ip: 10.0.0.2, username: eve, passwd: pw}
remoteConfig: {reuse: false}
""",
    )
    first, second = config.training_service[0].machine_list
    assert (first.host, first.port, first.user, str(first.ssh_key_file)) == ("10.0.0.1", 2222, "bob", "/keys/id")
    # NNI's converter drops `passphrase`; trialflow keeps it as sshPassphrase.
    assert first.ssh_passphrase.get_secret_value() == "s3cret"
    assert (first.python_path, first.max_trial_number_per_gpu, first.gpu_indices) == ("/opt/py/bin", 3, [1])
    assert second.password.get_secret_value() == "pw" and second.port == 22


def test_v1_pai_without_trial_resources_names_the_v2_keys(v1):
    with pytest.raises(ConfigError) as err:
        v1("pai", "paiConfig: {userName: u, token: tok, host: 'http://pai'}\n")
    assert "trainingService.trialCpuNumber" in str(err.value)
    assert "tok" not in str(err.value)


def test_v1_pai_complete(write):
    write("space.json", '{"x": {"_type": "choice", "_value": [1]}}')
    text = (
        V1.format(platform="pai").replace(
            "  gpuNum: 0\n",
            """\
  gpuNum: 0
  cpuNum: 2
  memoryMB: 4096
  image: img:1
  virtualCluster: vc
  paiStorageConfigName: confA
  nniManagerNFSMountPath: /mnt/nfs
  containerNFSMountPath: /mnt/c
""",
        )
        + "paiConfig: {userName: u, token: tok, host: 'http://pai'}\n"
    )
    service = load_config(write("c.yml", text)).training_service[0]
    assert service.platform == "openpai"
    assert (service.trial_cpu_number, service.trial_memory_size, service.docker_image) == (2, 4096, "img:1")
    assert (service.storage_config_name, service.virtual_cluster, service.container_storage_mount_point) == (
        "confA",
        "vc",
        "/mnt/c",
    )
    assert service.token.get_secret_value() == "tok"


def test_v1_kubeflow_roles_and_storage(write):
    write("space.json", '{"x": {"_type": "choice", "_value": [1]}}')
    text = (
        V1.format(platform="kubeflow")
        .replace("  command: python3 t.py\n", "")
        .replace(
            "  gpuNum: 0\n",
            """\
  worker: {replicas: 2, command: python3 w.py, gpuNum: 1, cpuNum: 2, memoryMB: 8192, image: img}
  ps: {replicas: 1, command: python3 ps.py, gpuNum: 0, cpuNum: 1, memoryMB: 2048, image: img}
""",
        )
        + """\
kubeflowConfig:
  operator: tf-operator
  apiVersion: v1alpha2
  storage: nfs
  nfs: {server: 10.1.1.1, path: /export}
"""
    )
    service = load_config(write("c.yml", text)).training_service[0]
    assert (service.operator, service.api_version) == ("tf-operator", "v1alpha2")
    assert (service.worker.replicas, service.worker.gpu_number, service.worker.memory_size) == (2, 1, 8192)
    assert service.ps.command == "python3 ps.py"
    assert (service.storage.storage_type, service.storage.server, service.storage.path) == (
        "nfs",
        "10.1.1.1",
        "/export",
    )


def test_v1_frameworkcontroller_renames_min_succeeded(write):
    write("space.json", '{"x": {"_type": "choice", "_value": [1]}}')
    text = (
        V1.format(platform="frameworkcontroller")
        .replace("  command: python3 t.py\n", "")
        .replace(
            "  gpuNum: 0\n",
            """\
  taskRoles:
    - name: worker
      taskNum: 2
      command: python3 w.py
      gpuNum: 0
      cpuNum: 1
      memoryMB: 1024
      image: img
      frameworkAttemptCompletionPolicy: {minFailedTaskCount: 1, minSucceededTaskCount: 2}
""",
        )
        + "frameworkcontrollerConfig: {storage: nfs, nfs: {server: s, path: /p}, serviceAccountName: fc}\n"
    )
    service = load_config(write("c.yml", text)).training_service[0]
    role = service.task_roles[0]
    assert (role.task_number, role.framework_attempt_completion_policy.min_succeed_task_count) == (2, 2)
    assert service.service_account_name == "fc"


def test_v1_custom_tuner_class(write):
    write("space.json", '{"x": {"_type": "choice", "_value": [1]}}')
    text = V1.format(platform="local").replace(
        """tuner:
  builtinTunerName: TPE
""",
        """tuner:
  codeDir: tuners
  classFileName: my_tuner.py
  className: MyTuner
""",
    )
    config = load_config(write("c.yml", text))
    assert config.tuner.class_name == "my_tuner.MyTuner"


def test_v1_hybrid(write):
    write("space.json", '{"x": {"_type": "choice", "_value": [1]}}')
    text = (
        V1.format(platform="hybrid")
        + """\
hybridConfig: {trainingServicePlatforms: [local, remote]}
machineList: [{ip: h, username: u, passwd: p}]
"""
    )
    assert load_config(write("c.yml", text)).platform_names == ["local", "remote"]


def test_v1_unknown_keys_are_named_by_their_v1_path(write):
    write("space.json", '{"x": {"_type": "choice", "_value": [1]}}')
    text = V1.format(platform="remote") + "machineList: [{ip: h, username: u, passwd: p, colour: red}]\nbogus: 1\n"
    with pytest.raises(ConfigError) as err:
        load_config(write("c.yml", text))
    paths = {p.key_path for p in err.value.problems}
    assert ("machineList", 0, "colour") in paths and ("bogus",) in paths
    assert all(p.line is not None for p in err.value.problems)


def test_v1_multiphase_is_refused(write):
    write("space.json", '{"x": {"_type": "choice", "_value": [1]}}')
    with pytest.raises(ConfigError, match="multi-phase"):
        load_config(write("c.yml", V1.format(platform="local") + "multiPhase: true\n"))


def test_v1_unknown_platform(write):
    write("space.json", "{}")
    with pytest.raises(ConfigError, match="unknown platform 'mesos'"):
        load_config(write("c.yml", V1.format(platform="mesos")))


def test_convert_v1_is_pure_and_reports_problems():
    v2, problems = convert_v1(
        {
            "trainingServicePlatform": "local",
            "trialConcurrency": 1,
            "trial": {"command": "x", "codeDir": "."},
            "localConfig": {"wat": 1},
        }
    )
    assert v2["trainingService"] == {"platform": "local"}
    assert v2["trialCommand"] == "x"
    assert [p.key_path for p in problems] == [("localConfig", "wat")]


def test_v1_converted_form_is_valid_v2(v1, write):
    import yaml

    config = v1("local")
    again = load_config(write("v2.yml", yaml.safe_dump(to_v2_dict(config))))
    assert again.max_trial_number == 7 and again.platform_names == ["local"]
