# TEST ONLY: variables for `terraform apply` against the local moto endpoint
# (tests/infra/test_infra_terraform_apply_*.py (tests/infra/tf_stack.py)). Everything the test creates must
# go away again with `terraform destroy`.
region                      = "us-east-1"
name                        = "lakelog-test"
force_destroy               = true
secret_recovery_window_days = 0
