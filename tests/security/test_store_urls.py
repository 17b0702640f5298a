"""Store URLs whose passwords hold '@' or ':' (issue 64, 4): SQLAlchemy ends a password at its
first '@', so the rest became the host and psycopg's "failed to resolve host" said it. No part
of such a password reaches a message; the URL is refused with its scheme alone, and the
percent-encoded form of the same password works."""

from __future__ import annotations

import pytest

from trialflow.store.experiment_store import ExperimentStore
from trialflow.store.urls import StoreUrlError, check_store_url, safe_url, with_installed_driver

HOSTILE = [
    # (url, every fragment of its password that must not be shown)
    ("postgresql://alice:p@ssW0rd-SECRET@127.0.0.1:1/db", ("ssW0rd", "SECRET", "p@ss")),
    ("postgresql://alice:Sec:ret@Pw77@127.0.0.1:1/db", ("Sec:ret", "Pw77", "ret@")),
    ("postgresql+psycopg://bob:a@b@c@d@10.0.0.1/db?sslmode=require", ("a@b", "c@d", "b@c")),
    ("postgresql://carol:Top@hunter2:PW99@127.0.0.1:5999/x", ("hunter2", "PW99")),
    ("mysql://dave:x@y/z@host/db", ("y/z",)),
]


@pytest.mark.parametrize(("url", "fragments"), HOSTILE)
def test_an_ambiguous_url_is_refused_with_its_scheme_alone(url, fragments):
    scheme = url.split("://", 1)[0]
    for refuse in (check_store_url, with_installed_driver, ExperimentStore):
        with pytest.raises(StoreUrlError) as caught:
            refuse(url)
        said = str(caught.value)
        assert f"({scheme}://...)" in said and "percent-encoded" in said
        assert not any(fragment in said for fragment in fragments), said
        assert "127.0.0.1" not in said and "alice" not in said
    shown = safe_url(url)
    assert shown == f"{scheme}://..."


def test_the_percent_encoded_password_is_read_whole_and_hidden():
    url = "postgresql://alice:p%40ssW0rd-SECRET@127.0.0.1:1/db"
    check_store_url(url)
    from sqlalchemy.engine import make_url

    parsed = make_url(with_installed_driver(url))
    assert (parsed.host, parsed.password, parsed.port) == ("127.0.0.1", "p@ssW0rd-SECRET", 1)
    assert "SECRET" not in safe_url(url) and "127.0.0.1" in safe_url(url)


def test_a_sqlite_path_may_hold_an_at_sign(tmp_path):
    folder = tmp_path / "team@x" / "a@b"
    folder.mkdir(parents=True)
    url = f"sqlite:///{folder}/experiments.db"
    check_store_url(url)
    ExperimentStore(url).open_experiment("e")
    assert (folder / "experiments.db").is_file()


def test_a_scheme_that_is_not_one_is_not_shown():
    for url in ("alice:hunter2@host/db", "pw hunter2://u@h/d", "x" * 50 + "://u:hunter2@h:p/d"):
        with pytest.raises(StoreUrlError) as caught:
            check_store_url(url)
        assert "hunter2" not in str(caught.value) and "xxxxx" not in str(caught.value)
        assert "(?://...)" in str(caught.value)
