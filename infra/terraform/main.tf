data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}
data "aws_region" "current" {}

module "network" {
  source = "./modules/network"
  count  = var.vpc_id == null ? 1 : 0

  name               = var.name
  cidr_block         = var.vpc_cidr
  az_count           = var.az_count
  single_nat_gateway = var.single_nat_gateway
}

locals {
  account_id = data.aws_caller_identity.current.account_id
  partition  = data.aws_partition.current.partition
  region     = data.aws_region.current.name

  vpc_id             = var.vpc_id == null ? module.network[0].vpc_id : var.vpc_id
  public_subnet_ids  = var.vpc_id == null ? module.network[0].public_subnet_ids : var.public_subnet_ids
  private_subnet_ids = var.vpc_id == null ? module.network[0].private_subnet_ids : var.private_subnet_ids

  # A given bucket_name is used as is, so that policies are known at plan time.
  bucket     = var.bucket_name != null ? var.bucket_name : aws_s3_bucket.root[0].id
  bucket_arn = "arn:${local.partition}:s3:::${local.bucket}"

  root_uri      = "s3://${local.bucket}/${var.root_prefix}"
  artifacts_uri = "s3://${local.bucket}/${var.artifacts_prefix}"
  emr_logs_uri  = "s3://${local.bucket}/${var.emr_logs_prefix}/"

  # Settings shared by the ingest tier and the Spark jobs. conditional_put=etag
  # is the delta-rs S3 commit mode: commits are put-if-absent, so concurrent
  # writers (ingest tier, maintenance jobs) can never overwrite each other's
  # Delta log entries.
  lakelog_env = {
    LAKELOG_ROOT                     = local.root_uri
    LAKELOG_STORAGE__AWS_REGION      = local.region
    LAKELOG_STORAGE__CONDITIONAL_PUT = "etag"
    AWS_REGION                       = local.region
    AWS_DEFAULT_REGION               = local.region
  }

  api_keys_secret_arn = var.api_keys_secret_arn != null ? var.api_keys_secret_arn : aws_secretsmanager_secret.api_keys[0].arn
}
