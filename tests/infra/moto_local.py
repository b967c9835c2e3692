"""A local AWS endpoint for the Terraform tests: moto's server on 127.0.0.1.

moto 5.2.5 lacks a few things the Terraform module needs. Rather than leave
those resources out of the test, this module fills the gaps in the moto
server running in this process (the shims touch the local endpoint only,
never the Terraform code). Each one is listed in the README (Deploy to AWS):

* EMR Serverless: moto only knows the old ``emr-N.N.0`` release labels and an
  upper-case application type. It is taught to accept the Spark 4 releases
  (``emr-spark-8.x.y``) and any case of the type, as the real service does;
  the application keeps the label it was created with, so the test can check
  that the deployed application really is on ``emr-spark-8.0.0``. A new
  application is reported ``CREATED``, as by the real service (moto says
  ``STARTED``, which the provider's create waiter rejects).
* Application Auto Scaling: moto has no ``ListTagsForResource`` /
  ``TagResource`` / ``UntagResource`` (the provider calls them for every
  scalable target) and answers them with HTTP 500, which the provider retries
  for ever. A minimal in-memory tag store is added.
* S3 conditional writes: applied one at a time, as S3 applies them
  atomically (``tests/moto_fidelity.py``; the suite's own moto servers too).

Run this file directly to get a server for manual ``terraform`` runs::

    .venv/bin/python tests/infra/moto_local.py    # prints the endpoint URL
"""

from __future__ import annotations

import json
import re
import socket
import sys
import threading
from pathlib import Path
from typing import Any

_SHIMS_APPLIED = False
_LOCK = threading.Lock()

SPARK4_RELEASE = re.compile(r"^emr-spark-\d+\.\d+\.\d+$")


def _apply_shims() -> None:
    global _SHIMS_APPLIED
    with _LOCK:
        if _SHIMS_APPLIED:
            return
        _shim_emr_serverless()
        _shim_application_autoscaling_tags()
        _shim_conditional_writes()
        _SHIMS_APPLIED = True


def _shim_conditional_writes() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, as the suite's moto server does
    from moto_fidelity import make_conditional_writes_atomic

    make_conditional_writes_atomic()


def _shim_emr_serverless() -> None:
    from moto.emrserverless.models import EMRServerlessBackend

    original = EMRServerlessBackend.create_application

    def create_application(self: Any, name: str, release_label: str, application_type: str, *args: Any, **kwargs: Any) -> Any:
        application_type = application_type.upper()
        if SPARK4_RELEASE.match(release_label):
            # moto's label check predates the emr-spark-* naming; validate
            # against a label it knows, then keep the real one.
            app = original(self, name, "emr-7.0.0", application_type, *args, **kwargs)
            app.release_label = release_label
        else:
            app = original(self, name, release_label, application_type, *args, **kwargs)
        # A new application is CREATED (moto says STARTED, which the provider's
        # waiter rejects); it starts when the first job run arrives.
        app.state = "CREATED"
        return app

    EMRServerlessBackend.create_application = create_application  # type: ignore[method-assign]


def _shim_application_autoscaling_tags() -> None:
    from moto.applicationautoscaling.responses import ApplicationAutoScalingResponse

    tags: dict[str, dict[str, str]] = {}
    original_register = ApplicationAutoScalingResponse.register_scalable_target

    def register_scalable_target(self: Any) -> str:
        body = original_register(self)
        arn = json.loads(body)["ScalableTargetARN"]
        tags.setdefault(arn, {}).update(self._get_param("Tags") or {})
        return body

    def list_tags_for_resource(self: Any) -> str:
        return json.dumps({"Tags": tags.get(self._get_param("ResourceARN"), {})})

    def tag_resource(self: Any) -> str:
        tags.setdefault(self._get_param("ResourceARN"), {}).update(self._get_param("Tags") or {})
        return "{}"

    def untag_resource(self: Any) -> str:
        current = tags.get(self._get_param("ResourceARN"), {})
        for key in self._get_param("TagKeys") or []:
            current.pop(key, None)
        return "{}"

    ApplicationAutoScalingResponse.register_scalable_target = register_scalable_target  # type: ignore[method-assign]
    ApplicationAutoScalingResponse.list_tags_for_resource = list_tags_for_resource  # type: ignore[attr-defined]
    ApplicationAutoScalingResponse.tag_resource = tag_resource  # type: ignore[attr-defined]
    ApplicationAutoScalingResponse.untag_resource = untag_resource  # type: ignore[attr-defined]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalAws:
    """A moto server on 127.0.0.1 (a free port), with the shims above."""

    def __init__(self) -> None:
        import logging

        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
        _apply_shims()
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)

    def start(self) -> "LocalAws":
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    def client(self, service: str, region: str = "us-east-1") -> Any:
        import boto3

        return boto3.client(
            service,
            region_name=region,
            endpoint_url=self.endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            aws_session_token="testing",
        )


if __name__ == "__main__":  # pragma: no cover - manual use
    import time

    aws = LocalAws().start()
    print(aws.endpoint, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        aws.stop()
