# Terraform CLI configuration that installs providers only from a local
# filesystem mirror (no network). The tests render it with @MIRROR@ replaced
# by $LAKELOG_TF_PLUGIN_MIRROR (default /opt/tf-plugins) and point
# TF_CLI_CONFIG_FILE at the result. By hand:
#
#   sed "s#@MIRROR@#/opt/tf-plugins#" infra/mirror.tfrc.tpl > /tmp/mirror.tfrc
#   TF_CLI_CONFIG_FILE=/tmp/mirror.tfrc terraform -chdir=infra/terraform init -backend=false
provider_installation {
  filesystem_mirror {
    path    = "@MIRROR@"
    include = ["registry.terraform.io/hashicorp/*"]
  }
}
