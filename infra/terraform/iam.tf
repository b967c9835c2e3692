# Four roles, each limited to what it uses:
#   ecs_execution  pulls the image, writes the container log, reads the API keys, cluster and Kafka TLS secrets
#   ecs_task       the lakelog server: objects under <root_prefix>/ only
#   emr_job        the Spark jobs: objects under <root_prefix>/, read the artifacts, write job logs
#   scheduler      EventBridge Scheduler: start job runs on this application, pass emr_job only

locals {
  root_objects_arn = "${local.bucket_arn}/${var.root_prefix}/*"
}

# Read, write and delete the lakelog root; nothing else in the bucket.
data "aws_iam_policy_document" "root_prefix_access" {
  statement {
    sid       = "ListRootPrefix"
    actions   = ["s3:ListBucket"]
    resources = [local.bucket_arn]

    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = [var.root_prefix, "${var.root_prefix}/*"]
    }
  }

  statement {
    sid = "ReadWriteRootObjects"
    actions = [
      "s3:GetObject",
      "s3:PutObject",
      "s3:DeleteObject",
      "s3:AbortMultipartUpload",
      "s3:ListMultipartUploadParts",
    ]
    resources = [local.root_objects_arn]
  }

  dynamic "statement" {
    for_each = var.kms_key_arn == null ? [] : [var.kms_key_arn]

    content {
      sid       = "UseBucketKeyThroughS3"
      actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
      resources = [statement.value]

      condition {
        test     = "StringEquals"
        variable = "kms:ViaService"
        values   = ["s3.${local.region}.amazonaws.com"]
      }
    }
  }
}

###############################################################################
# ECS
###############################################################################

data "aws_iam_policy_document" "ecs_tasks_trust" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["ecs-tasks.amazonaws.com"]
    }

    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account_id]
    }

    condition {
      test     = "ArnLike"
      variable = "aws:SourceArn"
      values   = ["arn:${local.partition}:ecs:${local.region}:${local.account_id}:*"]
    }
  }
}

resource "aws_iam_role" "ecs_execution" {
  name_prefix        = "${var.name}-ecs-exec-"
  description        = "lakelog ${var.name}: ECS agent pulls the image, writes logs, reads the API keys and cluster secrets"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_trust.json
}

data "aws_iam_policy_document" "ecs_execution" {
  statement {
    sid = "EcrAuth"
    # GetAuthorizationToken has no resource-level permissions: it returns a
    # registry login token, no data.
    actions   = ["ecr:GetAuthorizationToken"]
    resources = ["*"]
  }

  statement {
    sid       = "PullImage"
    actions   = ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]
    resources = [aws_ecr_repository.lakelog.arn]
  }

  statement {
    sid       = "WriteContainerLogs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.ingest.arn}:*"]
  }

  statement {
    sid       = "ReadSecrets"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = compact([local.api_keys_secret_arn, local.cluster_secret_arn, local.kafka_tls_secret_arn])
  }
}

resource "aws_iam_role_policy" "ecs_execution" {
  name   = "lakelog-ecs-execution"
  role   = aws_iam_role.ecs_execution.id
  policy = data.aws_iam_policy_document.ecs_execution.json
}

resource "aws_iam_role" "ecs_task" {
  name_prefix        = "${var.name}-ecs-task-"
  description        = "lakelog ${var.name}: the ingest tier, limited to s3://${local.bucket}/${var.root_prefix}/"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_trust.json
}

resource "aws_iam_role_policy" "ecs_task" {
  name   = "lakelog-root-prefix"
  role   = aws_iam_role.ecs_task.id
  policy = data.aws_iam_policy_document.root_prefix_access.json
}

###############################################################################
# EMR Serverless job runtime role
###############################################################################

data "aws_iam_policy_document" "emr_trust" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["emr-serverless.amazonaws.com"]
    }

    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account_id]
    }

    condition {
      test     = "ArnLike"
      variable = "aws:SourceArn"
      values   = [aws_emrserverless_application.spark.arn]
    }
  }
}

resource "aws_iam_role" "emr_job" {
  name_prefix        = "${var.name}-emr-job-"
  description        = "lakelog ${var.name}: maintenance Spark jobs, limited to s3://${local.bucket}/${var.root_prefix}/"
  assume_role_policy = data.aws_iam_policy_document.emr_trust.json
}

data "aws_iam_policy_document" "emr_job" {
  source_policy_documents = [data.aws_iam_policy_document.root_prefix_access.json]

  statement {
    sid       = "ReadJobArtifacts"
    actions   = ["s3:GetObject"]
    resources = ["${local.bucket_arn}/${var.artifacts_prefix}/*"]
  }

  statement {
    sid       = "WriteJobLogs"
    actions   = ["s3:PutObject"]
    resources = ["${local.bucket_arn}/${var.emr_logs_prefix}/*"]
  }
}

resource "aws_iam_role_policy" "emr_job" {
  name   = "lakelog-spark-jobs"
  role   = aws_iam_role.emr_job.id
  policy = data.aws_iam_policy_document.emr_job.json
}

###############################################################################
# EventBridge Scheduler
###############################################################################

data "aws_iam_policy_document" "scheduler_trust" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["scheduler.amazonaws.com"]
    }

    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account_id]
    }
  }
}

resource "aws_iam_role" "scheduler" {
  name_prefix        = "${var.name}-sched-"
  description        = "lakelog ${var.name}: EventBridge Scheduler starts the maintenance job runs"
  assume_role_policy = data.aws_iam_policy_document.scheduler_trust.json
}

data "aws_iam_policy_document" "scheduler" {
  statement {
    sid     = "StartJobRuns"
    actions = ["emr-serverless:StartJobRun"]
    resources = [
      aws_emrserverless_application.spark.arn,
      "${aws_emrserverless_application.spark.arn}/jobruns/*",
    ]
  }

  statement {
    sid       = "PassJobRole"
    actions   = ["iam:PassRole"]
    resources = [aws_iam_role.emr_job.arn]

    condition {
      test     = "StringEquals"
      variable = "iam:PassedToService"
      values   = ["emr-serverless.amazonaws.com"]
    }
  }
}

resource "aws_iam_role_policy" "scheduler" {
  name   = "lakelog-start-jobs"
  role   = aws_iam_role.scheduler.id
  policy = data.aws_iam_policy_document.scheduler.json
}
