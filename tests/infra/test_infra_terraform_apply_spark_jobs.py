"""The applied stack's Spark jobs (tf_stack.py: infra/terraform applied to a local AWS endpoint): the EMR
Serverless application runs Spark 4, and one schedule per maintenance job starts a run of the shipped
package, through a scheduler role that may do nothing else."""

from __future__ import annotations

import json

import pytest
from tf_stack import (
    ARTIFACTS_PREFIX,
    JOBS,
    NAME,
    ROOT_PREFIX,
    as_list,
    inline_policies,
    policy_statements,
    role_name_of,
)

pytestmark = [pytest.mark.s3, pytest.mark.timeout(900)]


def test_emr_serverless_application_runs_spark_4(stack):
    app = stack.client("emr-serverless").get_application(applicationId=stack.outputs["emr_application_id"])["application"]
    assert app["releaseLabel"] == "emr-spark-8.0.0"
    assert app["type"].lower() == "spark"
    assert app["autoStopConfiguration"] == {"enabled": True, "idleTimeoutMinutes": 15}
    assert app["maximumCapacity"]["cpu"] == "16 vCPU"


def test_one_schedule_per_job_starts_a_run_of_the_shipped_package(stack):
    scheduler = stack.client("scheduler")
    group = stack.outputs["schedule_group_name"]
    schedules = scheduler.list_schedules(GroupName=group)["Schedules"]
    assert sorted(s["Name"] for s in schedules) == sorted(f"{NAME}-{job}" for job in JOBS)

    bucket = stack.outputs["bucket"]
    artifacts = f"s3://{bucket}/{ARTIFACTS_PREFIX}"
    intervals = {"retention": 60, "roll": 30, "compact": 360, "vacuum": 1440}
    scheduler_role = None
    for job in JOBS:
        schedule = scheduler.get_schedule(GroupName=group, Name=f"{NAME}-{job}")
        assert schedule["State"] == "ENABLED"
        assert schedule["ScheduleExpression"] == f"rate({intervals[job]} minutes)"
        target = schedule["Target"]
        assert target["Arn"] == "arn:aws:scheduler:::aws-sdk:emrserverless:startJobRun"
        scheduler_role = target["RoleArn"]
        run = json.loads(target["Input"])
        assert run["ApplicationId"] == stack.outputs["emr_application_id"]
        assert run["ExecutionRoleArn"] == stack.outputs["emr_job_role_arn"]
        assert run["ClientToken"] == "<aws.scheduler.execution-id>"
        driver = run["JobDriver"]["SparkSubmit"]
        assert driver["EntryPoint"] == f"{artifacts}/submit.py"
        assert driver["EntryPointArguments"] == [job, "--root", f"s3://{bucket}/{ROOT_PREFIX}"]
        params = driver["SparkSubmitParameters"]
        for conf in [
            f"spark.archives={artifacts}/lakelog-venv.tar.gz#environment",
            "spark.emr-serverless.driverEnv.PYSPARK_PYTHON=./environment/bin/python",
            "spark.executorEnv.PYSPARK_PYTHON=./environment/bin/python",
            "spark.emr-serverless.driverEnv.LAKELOG_STORAGE__CONDITIONAL_PUT=etag",
            "spark.executorEnv.LAKELOG_STORAGE__CONDITIONAL_PUT=etag",
        ]:
            assert f"--conf {conf}" in params, conf
        log_uri = run["ConfigurationOverrides"]["MonitoringConfiguration"]["S3MonitoringConfiguration"]["LogUri"]
        assert log_uri == f"s3://{bucket}/lakelog-emr-logs/"

    # The scheduler's role may start runs on this application and pass the job role, nothing else.
    (policy,) = inline_policies(stack.client("iam"), role_name_of(scheduler_role))
    granted = {(a, r) for s in policy_statements(policy) for a in as_list(s["Action"]) for r in as_list(s["Resource"])}
    app_arn = stack.client("emr-serverless").get_application(applicationId=stack.outputs["emr_application_id"])["application"]["arn"]
    assert granted == {
        ("emr-serverless:StartJobRun", app_arn),
        ("emr-serverless:StartJobRun", f"{app_arn}/jobruns/*"),
        ("iam:PassRole", stack.outputs["emr_job_role_arn"]),
    }
