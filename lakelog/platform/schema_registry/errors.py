"""The schema registry's errors, with Confluent's numeric error codes and HTTP statuses.

Confluent's clients read `{"error_code": <int>, "message"}`; `ingest_api/errors.py` answers these in that
shape (the registry's paths answer every other error in it too).
"""

from __future__ import annotations

from lakelog.platform.errors import LakelogError


class RegistryError(LakelogError):
    code = "SCHEMA_REGISTRY_ERROR"
    status = 500
    error_code = 50001


class SubjectNotFound(RegistryError):
    status, error_code = 404, 40401

    def __init__(self, subject: str) -> None:
        super().__init__(f"Subject '{subject}' not found.")


class VersionNotFound(RegistryError):
    status, error_code = 404, 40402

    def __init__(self, subject: str, version: object) -> None:
        super().__init__(f"Version {version} not found for subject '{subject}'.")


class SchemaNotFound(RegistryError):
    status, error_code = 404, 40403


class SubjectSoftDeleted(RegistryError):
    status, error_code = 404, 40404


class SubjectNotSoftDeleted(RegistryError):
    status, error_code = 404, 40405


class VersionSoftDeleted(RegistryError):
    status, error_code = 404, 40406


class VersionNotSoftDeleted(RegistryError):
    status, error_code = 404, 40407


class SubjectConfigNotFound(RegistryError):
    status, error_code = 404, 40408


class IncompatibleSchema(RegistryError):
    status, error_code = 409, 409


class ConcurrentChange(RegistryError):
    """Other nodes kept changing the registry while this one tried to: retriable."""

    status, error_code = 409, 40901
    retriable = True


class InvalidSchema(RegistryError):
    status, error_code = 422, 42201


class InvalidVersion(RegistryError):
    status, error_code = 422, 42202

    def __init__(self, version: object) -> None:
        super().__init__(f"The specified version '{version}' is not a valid version id. Allowed values are "
                         "between [1, 2^31-1] and the string \"latest\"")


class InvalidCompatibilityLevel(RegistryError):
    status, error_code = 422, 42203


class InvalidMode(RegistryError):
    status, error_code = 422, 42204


class OperationNotPermitted(RegistryError):
    status, error_code = 422, 42205


class ReferenceExists(RegistryError):
    status, error_code = 422, 42206
