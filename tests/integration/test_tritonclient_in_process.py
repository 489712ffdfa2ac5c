"""tritonclient and graphengine in one process: a server started in process from a model
repository answers the unmodified tritonclient.grpc client, and reflection resolves every
service it lists (the checks `make test-wheel` runs on the installed wheel)."""

from __future__ import annotations

from tests.packaging import check_wheel


def test_in_process_server_answers_tritonclient(tmp_path) -> None:
    params = check_wheel.write_repository(tmp_path / "models")
    check_wheel.check_server(tmp_path / "models", params)
