terraform {
  # 1.9+ for validations that refer to other variables; 1.11+ for the
  # ephemeral random password written to the cluster secret as a write-only
  # attribute (never in a plan or the state).
  required_version = ">= 1.11.0"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "= 5.100.0"
    }
  }
}

provider "aws" {
  region = var.region

  default_tags {
    tags = merge(var.tags, {
      "lakelog:deployment" = var.name
      "managed-by"         = "terraform"
    })
  }
}
