"""A test auth manager: Airflow's SimpleAuthManager, except that the users ``limited`` (a viewer)
and ``editor`` (a user: may edit DAGs) may not reach any DAG whose id contains ``private``
(per-DAG permissions, as FAB or Keycloak would give)."""

from __future__ import annotations

from typing import Any

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

LIMITED_USER = "limited"
PER_DAG_USERS = {LIMITED_USER, "editor"}


class OneDagAuthManager(SimpleAuthManager):
    def is_authorized_dag(self, *, method: Any, user: Any, access_entity: Any = None, details: Any = None) -> bool:
        if user.get_name() in PER_DAG_USERS and details is not None and "private" in (details.id or ""):
            return False
        if user.get_name() in PER_DAG_USERS and details is not None and details.id is None:
            return False  # "every DAG" is not something a per-DAG user has
        return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)
