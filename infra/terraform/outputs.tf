output "api_url" {
  description = "Base URL of the lakelog HTTP API (the load balancer)."
  value       = "${local.https ? "https" : "http"}://${aws_lb.api.dns_name}"
}

output "bucket" {
  description = "S3 bucket holding the log."
  value       = local.bucket
}

output "root_uri" {
  description = "The lakelog root (pass as --root to lakelog commands)."
  value       = local.root_uri
}

output "artifacts_uri" {
  description = "Where to upload submit.py and lakelog-venv.tar.gz for the Spark jobs."
  value       = local.artifacts_uri
}

output "emr_application_id" {
  description = "ID of the EMR Serverless Spark application that runs the maintenance jobs."
  value       = aws_emrserverless_application.spark.id
}

output "emr_job_role_arn" {
  description = "Execution role for job runs on the Spark application (for manual `aws emr-serverless start-job-run`)."
  value       = aws_iam_role.emr_job.arn
}

output "spark_submit_parameters" {
  description = "The sparkSubmitParameters the scheduled jobs use (for manual runs)."
  value       = local.spark_submit_parameters
}

output "ecr_repository_url" {
  description = "ECR repository to push the lakelog image to."
  value       = aws_ecr_repository.lakelog.repository_url
}

output "image" {
  description = "Image the ingest tier runs."
  value       = local.image
}

output "api_keys_secret_arn" {
  description = "Secrets Manager secret holding the API keys JSON (its ARN, not its value)."
  value       = local.api_keys_secret_arn
}

output "cluster_secret_arn" {
  description = "Secrets Manager secret holding the cluster secret that authenticates node-to-node requests (its ARN, not its value)."
  value       = local.cluster_secret_arn
}

output "ecs_cluster_name" {
  description = "ECS cluster of the ingest tier."
  value       = aws_ecs_cluster.this.name
}

output "ecs_service_name" {
  description = "ECS service of the ingest tier."
  value       = aws_ecs_service.ingest.name
}

output "log_group_name" {
  description = "CloudWatch log group of the ingest tier."
  value       = aws_cloudwatch_log_group.ingest.name
}

output "schedule_names" {
  description = "EventBridge Scheduler schedules, by job."
  value       = { for k, s in aws_scheduler_schedule.job : k => s.name }
}

output "schedule_group_name" {
  description = "EventBridge Scheduler group of the job schedules."
  value       = aws_scheduler_schedule_group.jobs.name
}

output "vpc_id" {
  description = "VPC of the deployment."
  value       = local.vpc_id
}

output "region" {
  description = "AWS region of the deployment."
  value       = local.region
}

output "kafka_bootstrap_servers" {
  description = "bootstrap.servers for Kafka clients in the VPC (the Cloud Map name of the tasks, kafka.<namespace>:<kafka_port>); null without the Kafka listener."
  value       = local.kafka ? "${local.kafka_bootstrap_host}:${var.kafka_port}" : null
}

output "kafka_security_protocol" {
  description = "security.protocol for Kafka clients: SASL_SSL (SASL/PLAIN: the principal as user name, its API key as password), SASL_PLAINTEXT with kafka_tls = false; null without the Kafka listener."
  value       = local.kafka ? (local.kafka_tls ? "SASL_SSL" : "SASL_PLAINTEXT") : null
}

output "kafka_tls_dns_names" {
  description = "The DNS names the Kafka listener's certificate must cover (subjectAltName): the bootstrap name and the tasks' private DNS names, which each task advertises. Empty without TLS."
  value       = local.kafka_tls ? [local.kafka_bootstrap_host, "*.${local.kafka_task_domain}"] : []
}

output "kafka_tls_secret_arn" {
  description = "Secrets Manager secret holding the Kafka listener's PEM bundle (certificate chain and private key): its ARN, not its value. Null without TLS."
  value       = local.kafka_tls_secret_arn
}
