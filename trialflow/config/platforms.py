"""Config sections of every training service NNI knew, plus trialflow's own.

Each platform's section validates here even before trialflow can run it, so a
config written for a later platform is checked now and fails early, not
half-way into an experiment. Field names follow NNI v2
(nni/experiment/config/training_services/); AdaptDL and DLTS had only v1
schemas in NNI, so their v2 spelling here is trialflow's.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from trialflow.config.base import ConfigPath, Float, GpuIndices, Int, NniModel, Secret, SizeMB, Str


class TrainingServiceConfig(NniModel):
    """What every platform section has. ``trialCommand`` & co. may sit here or at the top."""

    platform: str
    trial_command: Str | None = None
    trial_code_directory: ConfigPath | None = None
    trial_gpu_number: Int | None = Field(default=None, ge=0)
    reuse_mode: bool | None = None
    #: trialflow: the address of a trial's page on the platform (a Kubernetes dashboard, a job
    #: page), with the trial handle's fields as placeholders: {trial_id}, {experiment_id}, {name},
    #: {namespace}, {host}, {trial_dir}. Shown as the trial task's "Platform" link.
    trial_web_url: str | None = None

    #: Platforms whose command lives in per-role sections (kubeflow worker/ps...) say False.
    needs_trial_command: ClassVar[bool] = True

    @field_validator("trial_web_url")
    @classmethod
    def _web_url(cls, value: str | None) -> str | None:
        from trialflow.config.web_url import check_web_url

        return None if value is None else check_web_url(value)


# --- local and remote -----------------------------------------------------------------


class LocalConfig(TrainingServiceConfig):
    platform: Literal["local"] = "local"
    use_active_gpu: bool | None = None
    max_trial_number_per_gpu: Int = Field(default=1, ge=1)
    gpu_indices: GpuIndices = None


class RemoteMachineConfig(NniModel):
    """One SSH machine. ``sshConnId`` (trialflow) keeps secrets in an Airflow connection."""

    host: Str | None = None
    port: Int = Field(default=22, ge=1, le=65535)
    user: Str | None = None
    password: Secret | None = None
    ssh_key_file: ConfigPath | None = None
    ssh_passphrase: Secret | None = None
    ssh_conn_id: str | None = None
    #: trialflow: the host key to trust ("ssh-ed25519 AAAA..."), else knownHostsFile (default
    #: ~/.ssh/known_hosts); hostKeyCheck: false turns checking off (logged). NNI checked nothing.
    host_key: str | None = None
    known_hosts_file: ConfigPath | None = None
    host_key_check: bool = True
    use_active_gpu: bool = False
    max_trial_number_per_gpu: Int = Field(default=1, ge=1)
    gpu_indices: GpuIndices = None
    python_path: str | None = None

    @model_validator(mode="after")
    def _who_and_how(self) -> RemoteMachineConfig:
        if self.ssh_conn_id is None:
            missing = [k for k in ("host", "user") if getattr(self, k) is None]
            if missing:
                raise ValueError(
                    f"a machine needs {' and '.join(missing)} (or sshConnId naming an Airflow SSH connection)"
                )
        return self


class RemoteConfig(TrainingServiceConfig):
    platform: Literal["remote"] = "remote"
    machine_list: list[RemoteMachineConfig]

    @field_validator("machine_list")
    @classmethod
    def _at_least_one(cls, value: list[RemoteMachineConfig]) -> list[RemoteMachineConfig]:
        if not value:
            raise ValueError("must provide at least one machine in machineList")
        return value


# --- OpenPAI --------------------------------------------------------------------------


class OpenpaiConfig(TrainingServiceConfig):
    platform: Literal["openpai"] = "openpai"
    host: str
    username: Str
    token: Secret | None = None
    #: trialflow: an Airflow connection whose password is the token (instead of ``token``).
    token_conn_id: str | None = None
    trial_cpu_number: Int = Field(ge=1)
    trial_memory_size: SizeMB
    storage_config_name: Str
    docker_image: str = "msranni/nni:latest"
    virtual_cluster: str | None = None
    local_storage_mount_point: ConfigPath
    container_storage_mount_point: str
    openpai_config: dict | None = None
    openpai_config_file: ConfigPath | None = None

    @model_validator(mode="after")
    def _one_openpai_config(self) -> OpenpaiConfig:
        if self.openpai_config is not None and self.openpai_config_file is not None:
            raise ValueError("set openpaiConfig or openpaiConfigFile, not both")
        if (self.token is None) == (self.token_conn_id is None):
            raise ValueError(
                "set token, or tokenConnId (an Airflow connection whose password is the token): one of them"
            )
        return self


# --- Kubernetes family ----------------------------------------------------------------


class KubernetesStorageConfig(NniModel):
    """Storage the pods mount, which the Airflow side reaches through ``localMountPoint``.

    NNI mounted NFS with sudo on its manager; trialflow never mounts anything: the user
    mounts the share (or the claim's volume) on the Airflow workers and names the folder.
    Azure Files takes its key from a Kubernetes secret (``secretName``, holding
    azurestorageaccountname / azurestorageaccountkey); NNI's keyVault fields are read only to
    say how to make that secret. Without any storage, code travels in a ConfigMap and
    metrics come from the pods' logs.
    """

    storage_type: Literal["nfs", "azureStorage", "pvc"] = "nfs"
    server: str | None = None
    path: str | None = None
    azure_account: str | None = None
    azure_share: str | None = None
    key_vault_name: str | None = None
    key_vault_key: str | None = None
    #: trialflow: the Kubernetes secret with the Azure Files account name and key.
    secret_name: str | None = None
    claim_name: str | None = None
    #: trialflow: where the Airflow workers see the storage (NNI's pvc ``path`` means the same).
    local_mount_point: ConfigPath | None = None
    #: trialflow: where the pods see it (NNI: /tmp/mount).
    container_mount_point: str = "/tmp/mount"

    @model_validator(mode="after")
    def _complete(self) -> KubernetesStorageConfig:
        need = {
            "nfs": ("server", "path"),
            "azureStorage": ("azure_account", "azure_share"),
            "pvc": (),
        }[self.storage_type]
        missing = [name for name in need if getattr(self, name) is None]
        if missing:
            names = ", ".join(self.model_fields[m].alias or m for m in missing)
            raise ValueError(f"storageType {self.storage_type} needs {names}")
        if not self.container_mount_point.startswith("/"):
            raise ValueError("containerMountPoint must be an absolute path inside the pods")
        return self


class KubernetesServiceConfig(TrainingServiceConfig):
    """What every Kubernetes platform shares: where the cluster is and how status is followed.

    ``kubernetesConnId`` names an Airflow Kubernetes connection (kube_config_path,
    kube_config or in_cluster, cluster_context); else ``kubeconfig`` (a file) or the usual
    default (KUBECONFIG, ~/.kube/config, then in-cluster). ``statusUpdates: watch`` follows
    every trial of a process over one watch per kind (``poll`` asks per trial and poll).
    """

    namespace: str = "default"
    kubernetes_conn_id: str | None = None
    kubeconfig: ConfigPath | None = None
    status_updates: Literal["watch", "poll"] = "watch"
    storage: KubernetesStorageConfig | None = None
    service_account_name: str | None = None

    needs_trial_command: ClassVar[bool] = False

    @model_validator(mode="after")
    def _one_cluster_source(self) -> KubernetesServiceConfig:
        if self.kubernetes_conn_id is not None and self.kubeconfig is not None:
            raise ValueError("set kubernetesConnId or kubeconfig, not both")
        storage = self.storage
        if (
            storage is not None
            and storage.storage_type == "pvc"
            and not storage.claim_name
            and getattr(self, "config_path", None) is None
        ):
            raise ValueError(
                "storageType pvc needs claimName (only a frameworkcontroller configPath template "
                "may mount the claim itself, at containerMountPoint)"
            )
        return self


class KubeflowRoleConfig(NniModel):
    replicas: Int = Field(default=1, ge=1)
    command: Str
    gpu_number: Int = Field(default=0, ge=0)
    cpu_number: Float = Field(gt=0)
    memory_size: SizeMB
    docker_image: str = "msranni/nni:latest"
    code_directory: ConfigPath | None = None
    private_registry_auth_path: ConfigPath | None = None


class KubeflowConfig(KubernetesServiceConfig):
    platform: Literal["kubeflow"] = "kubeflow"
    operator: Literal["tf-operator", "pytorch-operator"]
    #: NNI's v1alpha2 / v1beta1 / v1beta2 are accepted and sent as v1 (the only version the
    #: training operator still serves); the platform logs what it sends.
    api_version: Literal["v1", "v1alpha2", "v1beta1", "v1beta2"] = "v1"
    worker: KubeflowRoleConfig | None = None
    ps: KubeflowRoleConfig | None = None
    master: KubeflowRoleConfig | None = None

    @model_validator(mode="after")
    def _roles_fit_operator(self) -> KubeflowConfig:
        if self.worker is None and self.master is None:
            raise ValueError("kubeflow needs a worker (tf-operator) or master (pytorch-operator) section")
        if self.operator == "tf-operator" and self.master is not None:
            raise ValueError("tf-operator takes worker and ps roles, not master")
        if self.operator == "pytorch-operator" and self.ps is not None:
            raise ValueError("pytorch-operator takes master and worker roles, not ps")
        return self


class FrameworkAttemptCompletionPolicy(NniModel):
    min_failed_task_count: Int
    # NNI v2 spells it minSucceedTaskCount; v1 (and FrameworkController) say minSucceeded...,
    # which the v1 converter renames.
    min_succeed_task_count: Int


class FrameworkTaskRoleConfig(NniModel):
    name: str
    docker_image: str = "msranni/nni:latest"
    task_number: Int = Field(default=1, ge=1)
    command: Str
    gpu_number: Int = Field(default=0, ge=0)
    cpu_number: Float = Field(gt=0)
    memory_size: SizeMB
    framework_attempt_completion_policy: FrameworkAttemptCompletionPolicy
    private_registry_auth_path: ConfigPath | None = None


class FrameworkControllerConfig(KubernetesServiceConfig):
    platform: Literal["frameworkcontroller"] = "frameworkcontroller"
    task_roles: list[FrameworkTaskRoleConfig] = Field(default_factory=list)
    #: NNI v1's configPath: a Framework YAML used as the template.
    config_path: ConfigPath | None = None

    @model_validator(mode="after")
    def _roles_or_template(self) -> FrameworkControllerConfig:
        if not self.task_roles and self.config_path is None:
            raise ValueError("frameworkcontroller needs taskRoles (or configPath to a Framework template)")
        return self


class AdaptdlNfsConfig(NniModel):
    server: str
    path: str
    container_mount_path: str
    #: trialflow: where the Airflow workers see this share (needed to use it for code and metrics).
    local_mount_point: ConfigPath | None = None


class AdaptdlCheckpointConfig(NniModel):
    storage_class: str
    storage_size: str


class AdaptdlConfig(KubernetesServiceConfig):
    """AdaptDL had only a v1 schema in NNI (trainingServicePlatform: adl)."""

    platform: Literal["adl"] = "adl"
    docker_image: str
    needs_trial_command: ClassVar[bool] = True
    image_pull_secrets: list[dict] | None = None
    nfs: AdaptdlNfsConfig | None = None
    adaptive: bool = False
    checkpoint: AdaptdlCheckpointConfig | None = None
    cpu_number: Float | None = Field(default=None, gt=0)
    memory_size: SizeMB | None = None


class KubeflowTrainerConfig(KubernetesServiceConfig):
    """Kubeflow Trainer v2 TrainJob (trainer.kubeflow.org/v1alpha1): trialflow's addition.

    The command is trialCommand; the runtime (a ClusterTrainingRuntime unless
    ``runtimeKind`` says TrainingRuntime) brings the rest of the pod.
    """

    platform: Literal["kubeflow-trainer"] = "kubeflow-trainer"
    runtime_ref: str
    runtime_kind: Literal["ClusterTrainingRuntime", "TrainingRuntime"] = "ClusterTrainingRuntime"
    docker_image: str | None = None
    num_nodes: Int = Field(default=1, ge=1)
    cpu_number: Float | None = Field(default=None, gt=0)
    memory_size: SizeMB | None = None
    needs_trial_command: ClassVar[bool] = True


# --- hosted services ------------------------------------------------------------------


class AmlConfig(TrainingServiceConfig):
    platform: Literal["aml"] = "aml"
    subscription_id: Str
    resource_group: Str
    workspace_name: Str
    compute_target: Str
    docker_image: str = "msranni/nni:latest"
    max_trial_number_per_gpu: Int = Field(default=1, ge=1)


class DltsConfig(TrainingServiceConfig):
    """DLTS had only a v1 schema in NNI (dltsConfig); email/password may come from env in-cluster."""

    platform: Literal["dlts"] = "dlts"
    dashboard: str
    cluster: str = ".default"
    team: str | None = None
    email: str | None = None
    password: Secret | None = None
    docker_image: str = "msranni/nni:latest"
    #: trialflow: where the jobs' work storage is on the Airflow side and in the jobs. NNI ran
    #: inside a DLTS job and saw it at the same path; without these, so must the experiment's
    #: folder (trialflow's experimentWorkingDirectory).
    local_storage_mount_point: ConfigPath | None = None
    container_storage_mount_point: str | None = None


class DlcConfig(TrainingServiceConfig):
    """Alibaba Cloud PAI-DLC, as NNI 2.x defined it."""

    platform: Literal["dlc"] = "dlc"
    type: str = "Worker"
    image: str
    job_type: Literal["TFJob", "PyTorchJob"] = "TFJob"
    pod_count: Int = Field(default=1, ge=1)
    ecs_spec: str
    region: str
    workspace_id: str | None = None
    nas_data_source_id: str
    oss_data_source_id: str | None = None
    access_key_id: Secret
    access_key_secret: Secret
    local_storage_mount_point: ConfigPath
    container_storage_mount_point: str


BUILTIN_PLATFORM_CONFIGS: dict[str, type[TrainingServiceConfig]] = {
    "local": LocalConfig,
    "remote": RemoteConfig,
    "openpai": OpenpaiConfig,
    "kubeflow": KubeflowConfig,
    "kubeflow-trainer": KubeflowTrainerConfig,
    "frameworkcontroller": FrameworkControllerConfig,
    "adl": AdaptdlConfig,
    "aml": AmlConfig,
    "dlts": DltsConfig,
    "dlc": DlcConfig,
}
