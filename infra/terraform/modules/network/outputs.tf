output "vpc_id" {
  description = "ID of the VPC."
  value       = aws_vpc.this.id
}

output "public_subnet_ids" {
  description = "Public subnets (load balancer)."
  value       = aws_subnet.public[*].id
}

output "private_subnet_ids" {
  description = "Private subnets (tasks)."
  value       = aws_subnet.private[*].id
}

output "s3_endpoint_id" {
  description = "ID of the S3 gateway endpoint of the private subnets."
  value       = aws_vpc_endpoint.s3.id
}
