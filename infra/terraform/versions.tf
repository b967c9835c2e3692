terraform {
  # 1.9+ for validations that refer to other variables.
  required_version = ">= 1.9.0"

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
