"""The ``checkpoints`` key: its defaults, the stores it names, and the URLs it refuses, each
refusal naming the file, the key and what was expected, never echoing a credential."""

from __future__ import annotations

import pytest

from tests.config.test_loader import MINIMAL, problems
from trialflow.config import ConfigError, load_config
from trialflow.config.checkpoints import MAX_STORE_URL, STORE_SCHEMES


def _load(write, checkpoints: str):
    return load_config(write("c.yml", MINIMAL + f"checkpoints: {checkpoints}\n"))


def test_an_empty_key_keeps_the_last_two_and_the_best_in_the_experiments_folder(write):
    kept = _load(write, "{}").checkpoints
    assert kept is not None and kept.store is None and kept.scheme == "default"
    assert (kept.keep_last, kept.keep_best, kept.restarts, kept.restart_on_failure) == (2, 1, 3, False)
    assert (kept.max_checkpoint_bytes, kept.max_artifacts_bytes) == (4 * 1024**3, 4 * 1024**3)
    assert load_config(write("none.yml", MINIMAL)).checkpoints is None
    sized = _load(write, "{maxCheckpointSize: 512mb, maxArtifactsSize: 1gb}").checkpoints
    assert sized is not None and (sized.max_checkpoint_bytes, sized.max_artifacts_bytes) == (512 * 1024**2, 1024**3)


@pytest.mark.parametrize("scheme", STORE_SCHEMES)
def test_every_object_store_airflow_reaches_is_named_by_its_url(write, scheme):
    url = "file:///data/checkpoints" if scheme == "file" else f"{scheme}://bucket/experiments"
    kept = _load(write, f"{{store: '{url}', connId: my_store, keepLast: 3, keepBest: 0, restarts: 5}}").checkpoints
    assert kept is not None and kept.scheme == scheme and kept.conn_id == "my_store"
    assert (kept.keep_last, kept.keep_best, kept.restarts) == (3, 0, 5)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("{store: 'http://minio:9000/bucket'}", "checkpoints.store: expected a URL of one of file, s3"),
        ("{store: 'bucket/prefix'}", "checkpoints.store: expected a URL of one of file, s3, gs, gcs"),
        ("{store: 's3:///prefix'}", "checkpoints.store: expected a bucket or container after s3://"),
        ("{keepLast: 0}", "checkpoints.keepLast: Input should be greater than or equal to 1"),
        ("{keepBest: -1}", "checkpoints.keepBest: Input should be greater than or equal to 0"),
        ("{restarts: 101}", "checkpoints.restarts: Input should be less than or equal to 100"),
        ("{restarts: true}", "checkpoints.restarts"),
        ("{keepLatest: 2}", "checkpoints.keepLatest"),
        ("{maxArtifactsSize: 2tb}", "checkpoints.maxArtifactsSize: Input should be less than or equal to 1048576"),
        ("{maxCheckpointSize: lots}", "checkpoints.maxCheckpointSize: expected a size such as 512mb"),
        ("{maxCheckpointSize: 0}", "checkpoints.maxCheckpointSize: expected a positive, finite size"),
        ("[s3://bucket]", "checkpoints"),
    ],
)
def test_bad_settings_are_refused_by_key_in_the_file(write, tmp_path, value, expected):
    with pytest.raises(ConfigError) as raised:
        _load(write, value)
    assert any(expected in p for p in problems(raised.value)), problems(raised.value)
    assert all(p.startswith(f"{tmp_path / 'c.yml'}:") for p in problems(raised.value))


@pytest.mark.parametrize(
    ("url", "secret"),
    [
        ("s3://AKIAEXAMPLEKEY:wJalrXUtnFEMIsecret@bucket/prefix", "wJalrXUtnFEMIsecret"),
        ("abfs://container@account.dfs.core.windows.net/p?sv=2022-11-02&sig=Zm9vYmFyc2VjcmV0", "Zm9vYmFyc2VjcmV0"),
        ("gs://bucket/p?X-Goog-Signature=deadbeefsecret", "deadbeefsecret"),
        ("s3://token-only-secret@bucket/p", "token-only-secret"),
    ],
)
def test_a_credential_in_the_url_is_refused_and_never_repeated(write, url, secret):
    with pytest.raises(ConfigError) as raised:
        _load(write, f"{{store: '{url}'}}")
    text = "\n".join(problems(raised.value))
    assert "credentials go in the Airflow connection named by connId" in text
    assert secret not in text and secret not in str(raised.value)


def test_a_url_past_its_bound_is_refused_before_it_is_parsed(write):
    with pytest.raises(ConfigError) as raised:
        _load(write, f"{{store: 's3://b/{'x' * (10 * MAX_STORE_URL)}'}}")
    assert any(f"at most {MAX_STORE_URL} characters" in p for p in problems(raised.value))


def test_a_v1_config_is_told_to_convert_before_adding_the_key(write):
    """trialflow's own keys are v2's: NNI's v1 schema had none, and a v1 file is read as NNI read it."""
    write("space.json", '{"x": {"_type": "choice", "_value": [1, 2]}}')
    v1 = (
        "authorName: a\nexperimentName: e\ntrialConcurrency: 1\ntrainingServicePlatform: local\n"
        "searchSpacePath: space.json\ntuner: {builtinTunerName: Random}\n"
        "trial: {command: python3 t.py, codeDir: .}\ncheckpoints: {keepLast: 2}\n"
    )
    with pytest.raises(ConfigError) as raised:
        load_config(write("v1.yml", v1))
    assert any(
        "checkpoints is trialflow's own key, and a v1 config holds NNI's v1 schema only" in p
        for p in problems(raised.value)
    ), problems(raised.value)
