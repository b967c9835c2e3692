# The maintenance jobs: an EMR Serverless Spark 4 application and one
# EventBridge Scheduler schedule per job, each starting a job run of
#   spark-submit s3://<bucket>/<artifacts_prefix>/submit.py <job> --root <root>
# with the lakelog package and its dependencies shipped as a packed venv.

locals {
  submit_py_uri    = "${local.artifacts_uri}/submit.py"
  venv_archive_uri = "${local.artifacts_uri}/lakelog-venv.tar.gz"

  jobs = {
    retention = var.retention_interval_minutes
    roll      = var.roll_interval_minutes
    compact   = var.compact_interval_minutes
    vacuum    = var.vacuum_interval_minutes
  }

  job_env = {
    LAKELOG_ROOT                     = local.root_uri
    LAKELOG_STORAGE__AWS_REGION      = local.region
    LAKELOG_STORAGE__CONDITIONAL_PUT = "etag"
    AWS_REGION                       = local.region
  }

  spark_conf = merge(
    var.job_spark_conf,
    {
      # The standard EMR Serverless Python-venv pattern: the archive is
      # unpacked as ./environment on the driver and every executor.
      "spark.archives"                                       = "${local.venv_archive_uri}#environment"
      "spark.emr-serverless.driverEnv.PYSPARK_DRIVER_PYTHON" = "./environment/bin/python"
      "spark.emr-serverless.driverEnv.PYSPARK_PYTHON"        = "./environment/bin/python"
      "spark.executorEnv.PYSPARK_PYTHON"                     = "./environment/bin/python"
      # lakelog reads and writes its Delta tables itself (delta-rs); no Hive or
      # Glue catalog is used, so the job role needs no Glue permissions.
      "spark.sql.catalogImplementation" = "in-memory"
    },
    { for k, v in local.job_env : "spark.emr-serverless.driverEnv.${k}" => v },
    { for k, v in local.job_env : "spark.executorEnv.${k}" => v },
  )

  spark_submit_parameters = join(" ", [for k in sort(keys(local.spark_conf)) : "--conf ${k}=${local.spark_conf[k]}"])
}

resource "aws_emrserverless_application" "spark" {
  name          = "${var.name}-spark"
  release_label = var.emr_release_label
  type          = "spark"
  architecture  = var.emr_architecture

  maximum_capacity {
    cpu    = "${var.emr_max_vcpu} vCPU"
    memory = "${var.emr_max_memory_gb} GB"
  }

  auto_start_configuration {
    enabled = true
  }

  auto_stop_configuration {
    enabled              = true
    idle_timeout_minutes = var.emr_idle_timeout_minutes
  }

  dynamic "network_configuration" {
    for_each = var.emr_vpc_access ? [1] : []

    content {
      subnet_ids         = local.private_subnet_ids
      security_group_ids = [aws_security_group.emr[0].id]
    }
  }
}

resource "aws_security_group" "emr" {
  count = var.emr_vpc_access ? 1 : 0

  name_prefix = "${var.name}-emr-"
  description = "lakelog ${var.name} Spark jobs: no inbound; HTTPS out to S3"
  vpc_id      = local.vpc_id

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_egress_rule" "emr_https_out" {
  count = var.emr_vpc_access ? 1 : 0

  security_group_id = aws_security_group.emr[0].id
  description       = "HTTPS to S3"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = "0.0.0.0/0"
}

resource "aws_scheduler_schedule_group" "jobs" {
  name = "${var.name}-jobs"
}

resource "aws_scheduler_schedule" "job" {
  for_each = local.jobs

  name                = "${var.name}-${each.key}"
  group_name          = aws_scheduler_schedule_group.jobs.name
  description         = "lakelog ${var.name}: start the ${each.key} Spark job every ${each.value} minutes"
  schedule_expression = "rate(${each.value} minutes)"
  state               = var.schedules_enabled ? "ENABLED" : "DISABLED"

  flexible_time_window {
    mode = "OFF"
  }

  target {
    # Universal target: the EMR Serverless StartJobRun API.
    arn      = "arn:${local.partition}:scheduler:::aws-sdk:emrserverless:startJobRun"
    role_arn = aws_iam_role.scheduler.arn

    input = jsonencode({
      ApplicationId           = aws_emrserverless_application.spark.id
      ExecutionRoleArn        = aws_iam_role.emr_job.arn
      ClientToken             = "<aws.scheduler.execution-id>"
      Name                    = "${var.name}-${each.key}"
      ExecutionTimeoutMinutes = var.job_timeout_minutes
      JobDriver = {
        SparkSubmit = {
          EntryPoint            = local.submit_py_uri
          EntryPointArguments   = [each.key, "--root", local.root_uri]
          SparkSubmitParameters = local.spark_submit_parameters
        }
      }
      ConfigurationOverrides = {
        MonitoringConfiguration = {
          S3MonitoringConfiguration = {
            LogUri = local.emr_logs_uri
          }
        }
      }
    })

    retry_policy {
      maximum_retry_attempts       = 2
      maximum_event_age_in_seconds = 3600
    }
  }
}
