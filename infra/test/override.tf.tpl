# TEST ONLY. Copied as override.tf into a temporary copy of infra/terraform by
# tests/infra/test_infra_terraform_apply_*.py (tests/infra/tf_stack.py), with @ENDPOINT@ replaced by the URL of
# a moto server on 127.0.0.1. Terraform merges it into the provider block of
# versions.tf: every AWS service the module uses is pointed at the local
# endpoint, with fake credentials and no call to the real AWS.
provider "aws" {
  access_key = "testing"
  secret_key = "testing"
  # Not a secret: the fake credentials moto accepts.
  token = "testing"

  skip_credentials_validation = true
  skip_metadata_api_check     = true
  skip_region_validation      = true
  skip_requesting_account_id  = false
  s3_use_path_style           = true

  endpoints {
    acm                    = "@ENDPOINT@"
    applicationautoscaling = "@ENDPOINT@"
    cloudwatch             = "@ENDPOINT@"
    ec2                    = "@ENDPOINT@"
    ecr                    = "@ENDPOINT@"
    ecs                    = "@ENDPOINT@"
    elbv2                  = "@ENDPOINT@"
    emrserverless          = "@ENDPOINT@"
    iam                    = "@ENDPOINT@"
    kms                    = "@ENDPOINT@"
    logs                   = "@ENDPOINT@"
    route53                = "@ENDPOINT@"
    s3                     = "@ENDPOINT@"
    scheduler              = "@ENDPOINT@"
    secretsmanager         = "@ENDPOINT@"
    servicediscovery       = "@ENDPOINT@"
    sts                    = "@ENDPOINT@"
  }
}
