variable "name" {
  description = "Name prefix of the network resources."
  type        = string
}

variable "cidr_block" {
  description = "IPv4 CIDR block of the VPC; split into /20 public and private subnets."
  type        = string
}

variable "az_count" {
  description = "Number of availability zones (2 or 3): one public and one private subnet in each."
  type        = number
}

variable "single_nat_gateway" {
  description = "One NAT gateway for all private subnets (true) or one per availability zone (false)."
  type        = bool
}
