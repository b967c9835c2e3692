# The bucket that holds the lakelog root (topics, catalog, control tables),
# the Spark job artifacts and the Spark job logs, each under its own prefix.
# With create_bucket = false none of these resources exist and the existing
# bucket's settings are left alone.

resource "aws_s3_bucket" "root" {
  count = var.create_bucket ? 1 : 0

  bucket        = var.bucket_name
  bucket_prefix = var.bucket_name == null ? "${var.name}-" : null
  force_destroy = var.force_destroy
}

resource "aws_s3_bucket_ownership_controls" "root" {
  count = var.create_bucket ? 1 : 0

  bucket = aws_s3_bucket.root[0].id

  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_public_access_block" "root" {
  count = var.create_bucket ? 1 : 0

  bucket                  = aws_s3_bucket.root[0].id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_server_side_encryption_configuration" "root" {
  count = var.create_bucket ? 1 : 0

  bucket = aws_s3_bucket.root[0].id

  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = var.kms_key_arn == null ? "AES256" : "aws:kms"
      kms_master_key_id = var.kms_key_arn
    }
    # Bucket keys cut the KMS request cost of the many small objects a log writes.
    bucket_key_enabled = var.kms_key_arn != null
  }
}

data "aws_iam_policy_document" "bucket" {
  statement {
    sid       = "DenyInsecureTransport"
    effect    = "Deny"
    actions   = ["s3:*"]
    resources = [local.bucket_arn, "${local.bucket_arn}/*"]

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }

  statement {
    sid       = "DenyOutdatedTls"
    effect    = "Deny"
    actions   = ["s3:*"]
    resources = [local.bucket_arn, "${local.bucket_arn}/*"]

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    condition {
      test     = "NumericLessThan"
      variable = "s3:TlsVersion"
      values   = ["1.2"]
    }
  }
}

resource "aws_s3_bucket_policy" "root" {
  count = var.create_bucket ? 1 : 0

  bucket = aws_s3_bucket.root[0].id
  policy = data.aws_iam_policy_document.bucket.json

  # S3 rejects a policy change while the public access block is being applied.
  depends_on = [aws_s3_bucket_public_access_block.root]
}

resource "aws_s3_bucket_lifecycle_configuration" "root" {
  count = var.create_bucket ? 1 : 0

  bucket = aws_s3_bucket.root[0].id

  rule {
    id     = "abort-incomplete-multipart-uploads"
    status = "Enabled"

    filter {}

    abort_incomplete_multipart_upload {
      days_after_initiation = var.abort_incomplete_multipart_upload_days
    }
  }

  rule {
    id     = "expire-spark-job-logs"
    status = "Enabled"

    filter {
      prefix = "${var.emr_logs_prefix}/"
    }

    expiration {
      days = var.emr_log_retention_days
    }
  }
}
