###############################################################################
# General
###############################################################################

variable "region" {
  description = "AWS region to deploy into (the bucket, the ingest tier and the Spark application all live here)."
  type        = string
  default     = "us-east-1"

  validation {
    condition     = can(regex("^[a-z]{2}(-[a-z]+)+-[0-9]$", var.region))
    error_message = "region must be an AWS region name such as us-east-1 or eu-west-1."
  }
}

variable "name" {
  description = "Name of this deployment; prefixes every resource name (load balancer, roles, cluster, schedules). Lowercase letters, digits and hyphens, at most 20 characters."
  type        = string
  default     = "lakelog"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,18}[a-z0-9]$", var.name))
    error_message = "name must be 2-20 characters of lowercase letters, digits and hyphens, start with a letter and not end with a hyphen (the load balancer and target group names derived from it are limited to 32 characters)."
  }
}

variable "tags" {
  description = "Extra tags applied to every resource."
  type        = map(string)
  default     = {}
}

###############################################################################
# Network
###############################################################################

variable "vpc_id" {
  description = "Existing VPC to deploy into. Leave null to create a VPC (public subnets for the load balancer, private subnets with a NAT gateway for the tasks). When set, public_subnet_ids and private_subnet_ids are required."
  type        = string
  default     = null

  validation {
    condition     = var.vpc_id == null || can(regex("^vpc-[0-9a-f]+$", var.vpc_id))
    error_message = "vpc_id must look like vpc-0123456789abcdef0, or be null to create a VPC."
  }

  validation {
    condition     = var.vpc_id == null || (length(var.public_subnet_ids) >= 2 && length(var.private_subnet_ids) >= 1)
    error_message = "With an existing vpc_id, give at least two public_subnet_ids (in different availability zones, for the load balancer) and at least one private_subnet_ids (for the tasks; they need outbound access to ECR, CloudWatch Logs, Secrets Manager and S3)."
  }
}

variable "public_subnet_ids" {
  description = "Existing public subnets (at least two availability zones) for the load balancer. Only used with vpc_id."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for s in var.public_subnet_ids : can(regex("^subnet-[0-9a-f]+$", s))])
    error_message = "public_subnet_ids must be subnet ids (subnet-...)."
  }
}

variable "private_subnet_ids" {
  description = "Existing private subnets for the ECS tasks (and the EMR Serverless application when emr_vpc_access is true). They need outbound access to ECR, CloudWatch Logs, Secrets Manager and S3 (NAT gateway or VPC endpoints). Only used with vpc_id."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for s in var.private_subnet_ids : can(regex("^subnet-[0-9a-f]+$", s))])
    error_message = "private_subnet_ids must be subnet ids (subnet-...)."
  }
}

variable "vpc_cidr" {
  description = "CIDR block of the VPC created when vpc_id is null. Split into /20 public and private subnets."
  type        = string
  default     = "10.40.0.0/16"

  validation {
    condition     = can(cidrhost(var.vpc_cidr, 0)) && tonumber(split("/", var.vpc_cidr)[1]) <= 20
    error_message = "vpc_cidr must be a valid IPv4 CIDR block of size /20 or larger (e.g. 10.40.0.0/16)."
  }
}

variable "az_count" {
  description = "Number of availability zones used by the created VPC (2 or 3). The load balancer needs at least two."
  type        = number
  default     = 2

  validation {
    condition     = var.az_count >= 2 && var.az_count <= 3 && floor(var.az_count) == var.az_count
    error_message = "az_count must be 2 or 3."
  }
}

variable "single_nat_gateway" {
  description = "Create one NAT gateway shared by all private subnets (cheaper) instead of one per availability zone (survives the loss of a zone). Only used when the VPC is created."
  type        = bool
  default     = true
}

###############################################################################
# Storage
###############################################################################

variable "create_bucket" {
  description = "Create the S3 bucket that holds the log. When false, bucket_name must name an existing bucket in the same account and region; its encryption, public access block, policy and lifecycle rules are then yours to manage."
  type        = bool
  default     = true
}

variable "bucket_name" {
  description = "Name of the S3 bucket. With create_bucket = true, null generates a unique name from var.name; with create_bucket = false, the name of the existing bucket (required)."
  type        = string
  default     = null

  validation {
    condition     = var.bucket_name == null || can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.bucket_name))
    error_message = "bucket_name must be a valid S3 bucket name (3-63 lowercase letters, digits, dots and hyphens)."
  }

  validation {
    condition     = var.create_bucket || var.bucket_name != null
    error_message = "bucket_name is required when create_bucket is false (it names the existing bucket)."
  }
}

variable "root_prefix" {
  description = "Key prefix of the lakelog root inside the bucket: the root URI is s3://<bucket>/<root_prefix>. The ingest tier and the Spark jobs are only allowed to touch keys under it."
  type        = string
  default     = "lakelog"

  validation {
    condition     = can(regex("^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$", var.root_prefix))
    error_message = "root_prefix must be a non-empty key prefix without leading or trailing slash (letters, digits, '_', '.', '-', '/'); an empty prefix would grant access to the whole bucket."
  }
}

variable "artifacts_prefix" {
  description = "Key prefix for the Spark job artifacts (submit.py and lakelog-venv.tar.gz), outside the root. Read-only for the Spark jobs, not readable by the ingest tier."
  type        = string
  default     = "lakelog-artifacts"

  validation {
    condition     = can(regex("^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$", var.artifacts_prefix))
    error_message = "artifacts_prefix must be a non-empty key prefix without leading or trailing slash."
  }

  validation {
    condition     = !startswith("${var.artifacts_prefix}/", "${var.root_prefix}/") && !startswith("${var.root_prefix}/", "${var.artifacts_prefix}/")
    error_message = "artifacts_prefix and root_prefix must not contain one another (the ingest tier may write anywhere under the root, so artifacts under it could be replaced)."
  }
}

variable "emr_logs_prefix" {
  description = "Key prefix where EMR Serverless writes the Spark driver and executor logs of the scheduled jobs."
  type        = string
  default     = "lakelog-emr-logs"

  validation {
    condition     = can(regex("^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$", var.emr_logs_prefix))
    error_message = "emr_logs_prefix must be a non-empty key prefix without leading or trailing slash."
  }

  validation {
    condition = alltrue([for p in [var.root_prefix, var.artifacts_prefix] :
      !startswith("${var.emr_logs_prefix}/", "${p}/") && !startswith("${p}/", "${var.emr_logs_prefix}/")
    ])
    error_message = "emr_logs_prefix must not contain, or be inside, root_prefix or artifacts_prefix."
  }
}

variable "kms_key_arn" {
  description = "ARN of a customer managed KMS key for bucket encryption (SSE-KMS, with an S3 bucket key). Null uses SSE-S3 (AES-256). The roles are granted use of this key only through S3."
  type        = string
  default     = null

  validation {
    condition     = var.kms_key_arn == null || can(regex("^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/[0-9a-zA-Z-]+$", var.kms_key_arn))
    error_message = "kms_key_arn must be a KMS key ARN (arn:aws:kms:<region>:<account>:key/<id>), not an alias, or null for SSE-S3."
  }
}

variable "force_destroy" {
  description = "Let `terraform destroy` delete the bucket (with all topics in it) and the ECR repository (with its images) even when they are not empty. Keep false for real data."
  type        = bool
  default     = false
}

variable "abort_incomplete_multipart_upload_days" {
  description = "Days after which S3 aborts incomplete multipart uploads (left behind by crashed writers) so that their parts stop costing storage."
  type        = number
  default     = 1

  validation {
    condition     = var.abort_incomplete_multipart_upload_days >= 1 && floor(var.abort_incomplete_multipart_upload_days) == var.abort_incomplete_multipart_upload_days
    error_message = "abort_incomplete_multipart_upload_days must be a whole number of days, at least 1."
  }
}

variable "emr_log_retention_days" {
  description = "Days after which the Spark job logs under emr_logs_prefix expire."
  type        = number
  default     = 30

  validation {
    condition     = var.emr_log_retention_days >= 1 && floor(var.emr_log_retention_days) == var.emr_log_retention_days
    error_message = "emr_log_retention_days must be a whole number of days, at least 1."
  }
}

###############################################################################
# Ingest tier (ECS Fargate behind an Application Load Balancer)
###############################################################################

variable "image_tag" {
  description = "Tag of the lakelog image in the ECR repository created here (push it with the commands in the README). Ignored when image_uri is set."
  type        = string
  default     = "0.1.0"

  validation {
    condition     = can(regex("^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$", var.image_tag))
    error_message = "image_tag must be a valid image tag."
  }
}

variable "image_uri" {
  description = "Full image reference to run instead of <ECR repository>:<image_tag>, e.g. an image in another registry or pinned by digest."
  type        = string
  default     = null
}

variable "ecr_image_tag_mutability" {
  description = "IMMUTABLE (a pushed tag can never be overwritten: deploy a new version with a new image_tag) or MUTABLE."
  type        = string
  default     = "IMMUTABLE"

  validation {
    condition     = contains(["IMMUTABLE", "MUTABLE"], var.ecr_image_tag_mutability)
    error_message = "ecr_image_tag_mutability must be IMMUTABLE or MUTABLE."
  }
}

variable "task_cpu" {
  description = "CPU units of the ingest task (1024 = 1 vCPU). Valid Fargate sizes: 256, 512, 1024, 2048, 4096, 8192, 16384."
  type        = number
  default     = 1024

  validation {
    condition     = contains([256, 512, 1024, 2048, 4096, 8192, 16384], var.task_cpu)
    error_message = "task_cpu must be a Fargate CPU size: 256, 512, 1024, 2048, 4096, 8192 or 16384."
  }
}

variable "task_memory" {
  description = "Memory of the ingest task in MiB; must be a valid Fargate combination with task_cpu (e.g. 1024 CPU: 2048-8192 MiB)."
  type        = number
  default     = 2048

  validation {
    condition     = var.task_memory >= 512 && var.task_memory <= 122880 && var.task_memory % 512 == 0
    error_message = "task_memory must be between 512 and 122880 MiB, in steps of 512 (and a valid Fargate combination with task_cpu)."
  }
}

variable "cpu_architecture" {
  description = "CPU architecture of the ingest task (X86_64 or ARM64); the image must be built for it."
  type        = string
  default     = "X86_64"

  validation {
    condition     = contains(["X86_64", "ARM64"], var.cpu_architecture)
    error_message = "cpu_architecture must be X86_64 or ARM64."
  }
}

variable "desired_count" {
  description = "Number of ingest tasks (lakelog nodes) kept running, and the lower bound of CPU autoscaling; 0 stops the API. Every node serves any request: the nodes form a cluster through the root (a heartbeat object per node), each topic is written by one leader node and each consumer group has one coordinator node, chosen among the live nodes, and the others forward to them. The default 2 puts one task in each of the two default availability zones, so that the loss of a task or a zone, and every rolling deployment, leaves a node serving; 3 spreads the leaders over more nodes."
  type        = number
  default     = 2

  validation {
    condition     = var.desired_count >= 0 && var.desired_count <= 100 && floor(var.desired_count) == var.desired_count
    error_message = "desired_count must be a whole number between 0 (stops the service) and 100."
  }
}

variable "max_task_count" {
  description = "Upper bound of CPU autoscaling: target tracking (autoscaling_cpu_target) adds tasks up to this many and removes them again down to desired_count. A task that is removed drains first: it stops taking requests, hands its topics and groups over to the other nodes and exits."
  type        = number
  default     = 6

  validation {
    condition     = var.max_task_count >= 1 && var.max_task_count <= 100 && floor(var.max_task_count) == var.max_task_count
    error_message = "max_task_count must be a whole number between 1 and 100."
  }

  validation {
    condition     = var.max_task_count >= var.desired_count
    error_message = "max_task_count must be at least desired_count."
  }
}

variable "broker_heartbeat_interval_ms" {
  description = "LAKELOG_BROKER_HEARTBEAT_INTERVAL_MS: how often each node renews its heartbeat object under the root (one PUT and one LIST per node per interval; see the costs in the README)."
  type        = number
  default     = 2000

  validation {
    condition     = var.broker_heartbeat_interval_ms >= 100 && var.broker_heartbeat_interval_ms <= 60000 && floor(var.broker_heartbeat_interval_ms) == var.broker_heartbeat_interval_ms
    error_message = "broker_heartbeat_interval_ms must be a whole number of milliseconds between 100 and 60000."
  }
}

variable "broker_session_timeout_ms" {
  description = "LAKELOG_BROKER_SESSION_TIMEOUT_MS: a node that has not renewed its heartbeat for this long is out of the cluster, and the other nodes take over its topics and groups. Bounds the unavailability of the topics and groups of a node that dies without draining."
  type        = number
  default     = 9000

  validation {
    condition     = var.broker_session_timeout_ms >= 2 * var.broker_heartbeat_interval_ms && var.broker_session_timeout_ms <= 300000 && floor(var.broker_session_timeout_ms) == var.broker_session_timeout_ms
    error_message = "broker_session_timeout_ms must be a whole number of milliseconds, at least twice broker_heartbeat_interval_ms (one late renewal must not expel a node) and at most 300000."
  }
}

variable "cluster_secret_arn" {
  description = "ARN of an existing Secrets Manager secret whose value is the cluster secret that authenticates node-to-node requests (LAKELOG_CLUSTER_SECRET). Null creates a secret with a random value generated by Secrets Manager, written without passing through Terraform plans or state."
  type        = string
  default     = null

  validation {
    condition     = var.cluster_secret_arn == null || can(regex("^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:.+$", var.cluster_secret_arn))
    error_message = "cluster_secret_arn must be a Secrets Manager secret ARN or null."
  }
}

variable "stop_timeout_seconds" {
  description = "Seconds a task has after SIGTERM to drain (stop taking requests, finish in-flight flushes and forwarded requests, hand its topics and groups over) before it is killed. Fargate allows at most 120."
  type        = number
  default     = 60

  validation {
    condition     = var.stop_timeout_seconds >= 10 && var.stop_timeout_seconds <= 120 && floor(var.stop_timeout_seconds) == var.stop_timeout_seconds
    error_message = "stop_timeout_seconds must be a whole number between 10 and 120 (the Fargate maximum)."
  }
}

variable "deregistration_delay_seconds" {
  description = "Seconds the load balancer lets requests already sent to a stopping task finish before ECS sends it SIGTERM. Keep it above the longest fetch long poll (the server's LAKELOG_MAX_POLL_TIMEOUT_MS, 30 s by default), so that no long poll is cut."
  type        = number
  default     = 35

  validation {
    condition     = var.deregistration_delay_seconds >= 0 && var.deregistration_delay_seconds <= 3600 && floor(var.deregistration_delay_seconds) == var.deregistration_delay_seconds
    error_message = "deregistration_delay_seconds must be a whole number between 0 and 3600."
  }
}

variable "autoscaling_cpu_target" {
  description = "Average CPU utilisation (percent) that the target-tracking autoscaling policy keeps the service at."
  type        = number
  default     = 60

  validation {
    condition     = var.autoscaling_cpu_target >= 10 && var.autoscaling_cpu_target <= 90
    error_message = "autoscaling_cpu_target must be between 10 and 90 percent."
  }
}

variable "certificate_arn" {
  description = "ACM certificate ARN for an HTTPS listener on port 443 (HTTP on port 80 then redirects to HTTPS). Null serves plain HTTP on port 80 only: API keys would cross the network in clear text, so use it only for trials."
  type        = string
  default     = null

  validation {
    condition     = var.certificate_arn == null || can(regex("^arn:aws[a-z-]*:acm:[a-z0-9-]+:[0-9]{12}:certificate/[0-9a-zA-Z-]+$", var.certificate_arn))
    error_message = "certificate_arn must be an ACM certificate ARN or null."
  }
}

variable "ssl_policy" {
  description = "TLS policy of the HTTPS listener."
  type        = string
  default     = "ELBSecurityPolicy-TLS13-1-2-2021-06"
}

variable "allowed_ingress_cidrs" {
  description = "IPv4 CIDR blocks allowed to reach the load balancer listener(s). The load balancer is the only public endpoint."
  type        = list(string)
  default     = ["0.0.0.0/0"]

  validation {
    condition     = length(var.allowed_ingress_cidrs) > 0 && alltrue([for c in var.allowed_ingress_cidrs : can(cidrhost(c, 0))])
    error_message = "allowed_ingress_cidrs must be a non-empty list of IPv4 CIDR blocks."
  }
}

variable "alb_idle_timeout" {
  description = "Idle timeout of the load balancer in seconds; must exceed the longest fetch long-poll (timeout_ms) clients use."
  type        = number
  default     = 120

  validation {
    condition     = var.alb_idle_timeout >= 1 && var.alb_idle_timeout <= 4000
    error_message = "alb_idle_timeout must be between 1 and 4000 seconds."
  }
}

variable "alb_deletion_protection" {
  description = "Enable deletion protection on the load balancer (then `terraform destroy` needs it turned off first)."
  type        = bool
  default     = false
}

variable "api_keys_secret_arn" {
  description = "ARN of an existing Secrets Manager secret holding the API keys JSON ({\"<api key>\": \"<principal>\"}). Null creates an empty secret whose value you put with the AWS CLI; the value never passes through Terraform variables, state or outputs."
  type        = string
  default     = null

  validation {
    condition     = var.api_keys_secret_arn == null || can(regex("^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:.+$", var.api_keys_secret_arn))
    error_message = "api_keys_secret_arn must be a Secrets Manager secret ARN or null."
  }
}

variable "secret_recovery_window_days" {
  description = "Days Secrets Manager keeps the created API keys and cluster secrets after `terraform destroy` before deleting them (0 deletes at once, 7-30 otherwise)."
  type        = number
  default     = 7

  validation {
    condition     = var.secret_recovery_window_days == 0 || (var.secret_recovery_window_days >= 7 && var.secret_recovery_window_days <= 30)
    error_message = "secret_recovery_window_days must be 0 or between 7 and 30."
  }
}

variable "log_retention_days" {
  description = "Retention of the ingest tier's CloudWatch log group, in days."
  type        = number
  default     = 30

  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.log_retention_days)
    error_message = "log_retention_days must be a CloudWatch Logs retention value (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, ...)."
  }
}

variable "container_insights" {
  description = "Enable CloudWatch Container Insights on the ECS cluster (extra metrics, extra cost)."
  type        = bool
  default     = false
}

variable "readonly_root_filesystem" {
  description = "Run the container with a read-only root filesystem (a writable volume is mounted on /tmp)."
  type        = bool
  default     = true
}

variable "linger_ms" {
  description = "linger.ms of the ingest tier: how long a node journal flush waits for more calls after the first. Each flush is one S3 PUT for every topic of the node; at 0 (a group commit) a flush is written at once when no PUT is out and calls gather while one is, so PUTs stay near one per round trip whatever the load (see the README's costs)."
  type        = number
  default     = 0

  validation {
    condition     = var.linger_ms >= 0 && var.linger_ms <= 60000 && floor(var.linger_ms) == var.linger_ms
    error_message = "linger_ms must be a whole number of milliseconds between 0 and 60000."
  }
}

variable "service_environment" {
  description = "Extra non-secret LAKELOG_* settings for the ingest tier, e.g. { LAKELOG_LOG_LEVEL = \"info\" }. Secrets belong in the API keys or cluster secret, never here."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for k in keys(var.service_environment) : can(regex("^LAKELOG_[A-Z0-9_]+$", k))])
    error_message = "service_environment keys must be LAKELOG_* environment variable names."
  }

  validation {
    condition = alltrue([for k in keys(var.service_environment) : !contains(
      [
        "LAKELOG_API_KEYS_JSON", "LAKELOG_CLUSTER_SECRET", "LAKELOG_ROOT", "LAKELOG_STORAGE__CONDITIONAL_PUT", "LAKELOG_STORAGE__AWS_REGION",
        "LAKELOG_JOBS_INTERVAL_S", "LAKELOG_ADVERTISE", "LAKELOG_LINGER_MS", "LAKELOG_BROKER_HEARTBEAT_INTERVAL_MS", "LAKELOG_BROKER_SESSION_TIMEOUT_MS",
      ], k
    )])
    error_message = "service_environment must not set LAKELOG_API_KEYS_JSON or LAKELOG_CLUSTER_SECRET (they come from Secrets Manager), nor LAKELOG_ROOT, LAKELOG_STORAGE__CONDITIONAL_PUT, LAKELOG_STORAGE__AWS_REGION, LAKELOG_JOBS_INTERVAL_S or LAKELOG_ADVERTISE (set by the module), nor LAKELOG_LINGER_MS, LAKELOG_BROKER_HEARTBEAT_INTERVAL_MS or LAKELOG_BROKER_SESSION_TIMEOUT_MS (use the linger_ms, broker_heartbeat_interval_ms and broker_session_timeout_ms variables)."
  }

  validation {
    condition = alltrue([for k in keys(var.service_environment) : !contains(
      ["LAKELOG_KAFKA_PORT", "LAKELOG_KAFKA_HOST", "LAKELOG_KAFKA_ADVERTISE", "LAKELOG_KAFKA_TLS_CERT_FILE", "LAKELOG_KAFKA_TLS_KEY_FILE"], k
    )])
    error_message = "service_environment must not set LAKELOG_KAFKA_PORT, LAKELOG_KAFKA_HOST, LAKELOG_KAFKA_ADVERTISE, LAKELOG_KAFKA_TLS_CERT_FILE or LAKELOG_KAFKA_TLS_KEY_FILE: the module sets the Kafka listener up from the kafka_* variables."
  }
}

###############################################################################
# Kafka listener (kafka.tf)
###############################################################################

variable "kafka_enabled" {
  description = "Run lakelog's Kafka listener in every ingest task, for Kafka clients in the VPC: they bootstrap from one DNS name (Cloud Map, output kafka_bootstrap_servers) and then reach each task at the private address it advertises. False turns the listener off (LAKELOG_KAFKA_PORT=-1): HTTP only."
  type        = bool
  default     = true
}

variable "kafka_port" {
  description = "TCP port of the Kafka listener in each task (LAKELOG_KAFKA_PORT), on the tasks' private addresses."
  type        = number
  default     = 9092

  validation {
    condition     = var.kafka_port >= 1 && var.kafka_port <= 65535 && floor(var.kafka_port) == var.kafka_port && var.kafka_port != 8080
    error_message = "kafka_port must be a whole TCP port number between 1 and 65535, other than the HTTP port 8080."
  }
}

variable "kafka_client_cidrs" {
  description = "IPv4 CIDR blocks the Kafka clients connect from: the tasks' security group admits kafka_port from these and nothing else. Null admits the VPC created by the module (vpc_cidr); with an existing vpc_id, list them (e.g. the VPC's CIDR), or [] to admit none."
  type        = list(string)
  default     = null

  validation {
    condition     = var.kafka_client_cidrs == null ? true : alltrue([for c in var.kafka_client_cidrs : can(cidrhost(c, 0)) && !can(regex(":", c))])
    error_message = "kafka_client_cidrs must be a list of IPv4 CIDR blocks (e.g. 10.40.0.0/16)."
  }

  validation {
    condition     = var.kafka_client_cidrs != null || var.vpc_id == null || !var.kafka_enabled
    error_message = "With an existing vpc_id, kafka_client_cidrs must list the CIDR blocks of the Kafka clients (e.g. the VPC's CIDR), or be [] to admit none."
  }
}

variable "kafka_dns_namespace" {
  description = "Private DNS namespace (Cloud Map, a Route 53 private hosted zone on the VPC) of the bootstrap name kafka.<namespace>. Null uses <name>.internal. The VPC must have DNS support and DNS hostnames on (the created VPC has)."
  type        = string
  default     = null

  validation {
    condition     = var.kafka_dns_namespace == null || can(regex("^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\\.)+[a-z][a-z0-9-]{0,61}[a-z0-9]$", coalesce(var.kafka_dns_namespace, "x")))
    error_message = "kafka_dns_namespace must be a lowercase DNS domain of at least two labels, such as lakelog.internal."
  }
}

variable "kafka_tls" {
  description = "TLS on the Kafka listener, so that clients use SASL_SSL (SASL/PLAIN with a principal and its API key, inside TLS). False serves SASL_PLAINTEXT: API keys would cross the network in clear text, so use it only for trials. The certificate and its key come from a Secrets Manager secret (kafka_tls_secret_arn, or the one the module creates)."
  type        = bool
  default     = true
}

variable "kafka_tls_secret_arn" {
  description = "ARN of an existing Secrets Manager secret whose value is the Kafka listener's PEM bundle: the server certificate, its intermediates and its private key (unencrypted), in one string. Null creates the secret; its value then comes from kafka_tls_certificate_file and kafka_tls_private_key_file, or from you with `aws secretsmanager put-secret-value` (see the README)."
  type        = string
  default     = null

  validation {
    condition     = var.kafka_tls_secret_arn == null || can(regex("^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:.+$", coalesce(var.kafka_tls_secret_arn, "x")))
    error_message = "kafka_tls_secret_arn must be a Secrets Manager secret ARN or null."
  }
}

variable "kafka_tls_certificate_file" {
  description = "Path of a PEM file with the Kafka listener's certificate chain (server certificate first), valid for the names in the output kafka_tls_dns_names. With kafka_tls_private_key_file, the module writes both into the secret it creates, through a write-only attribute: neither file's content is in any plan or state; a new certificate rewrites the secret. Keep both files where every plan can read them. A relative path is relative to infra/terraform."
  type        = string
  default     = null

  validation {
    condition     = var.kafka_tls_certificate_file == null || can(regex("-----BEGIN CERTIFICATE-----", file(coalesce(var.kafka_tls_certificate_file, "/"))))
    error_message = "kafka_tls_certificate_file must be a readable PEM file holding a certificate (-----BEGIN CERTIFICATE-----)."
  }

  validation {
    condition     = (var.kafka_tls_certificate_file == null) == (var.kafka_tls_private_key_file == null)
    error_message = "Give kafka_tls_certificate_file and kafka_tls_private_key_file together, or neither."
  }

  validation {
    condition     = var.kafka_tls_certificate_file == null || var.kafka_tls_secret_arn == null
    error_message = "kafka_tls_certificate_file goes into the secret the module creates: it cannot be combined with an existing kafka_tls_secret_arn."
  }
}

variable "kafka_tls_private_key_file" {
  description = "Path of the unencrypted PEM private key of kafka_tls_certificate_file. Read at every plan and written only through a write-only attribute (never in a plan or the state)."
  type        = string
  default     = null

  validation {
    condition     = var.kafka_tls_private_key_file == null || can(regex("-----BEGIN ([A-Z]+ )?PRIVATE KEY-----", file(coalesce(var.kafka_tls_private_key_file, "/"))))
    error_message = "kafka_tls_private_key_file must be a readable, unencrypted PEM private key (-----BEGIN PRIVATE KEY----- or -----BEGIN RSA/EC PRIVATE KEY-----)."
  }
}

###############################################################################
# Spark jobs (EMR Serverless + EventBridge Scheduler)
###############################################################################

variable "emr_release_label" {
  description = "EMR Serverless release of the Spark application. lakelog's data source and jobs need Spark 4.0 (emr-spark-8.0.0 ships Spark 4.0.2)."
  type        = string
  default     = "emr-spark-8.0.0"

  validation {
    condition     = can(regex("^emr-spark-8\\.[0-9]+\\.[0-9]+$", var.emr_release_label))
    error_message = "emr_release_label must be a Spark 4 release (emr-spark-8.x.y): lakelog's Spark data source uses the Python data source API of Spark 4.0."
  }
}

variable "emr_architecture" {
  description = "CPU architecture of the EMR Serverless application (X86_64 or ARM64); the packed venv must be built for it."
  type        = string
  default     = "X86_64"

  validation {
    condition     = contains(["X86_64", "ARM64"], var.emr_architecture)
    error_message = "emr_architecture must be X86_64 or ARM64."
  }
}

variable "emr_max_vcpu" {
  description = "Maximum vCPUs the Spark application may use at once, across all running jobs (a cost ceiling)."
  type        = number
  default     = 16

  validation {
    condition     = var.emr_max_vcpu >= 1 && var.emr_max_vcpu <= 4000 && floor(var.emr_max_vcpu) == var.emr_max_vcpu
    error_message = "emr_max_vcpu must be a whole number between 1 and 4000."
  }
}

variable "emr_max_memory_gb" {
  description = "Maximum memory (GB) the Spark application may use at once, across all running jobs."
  type        = number
  default     = 64

  validation {
    condition     = var.emr_max_memory_gb >= 2 && var.emr_max_memory_gb <= 16000 && floor(var.emr_max_memory_gb) == var.emr_max_memory_gb
    error_message = "emr_max_memory_gb must be a whole number between 2 and 16000."
  }
}

variable "emr_idle_timeout_minutes" {
  description = "Minutes after the last job before the Spark application stops (it starts again automatically for the next scheduled run)."
  type        = number
  default     = 15

  validation {
    condition     = var.emr_idle_timeout_minutes >= 1 && var.emr_idle_timeout_minutes <= 10080
    error_message = "emr_idle_timeout_minutes must be between 1 and 10080."
  }
}

variable "emr_vpc_access" {
  description = "Attach the Spark application to the private subnets (its S3 traffic then goes through the VPC's S3 gateway endpoint). False runs it in the EMR Serverless service network, which reaches S3 in the same region."
  type        = bool
  default     = false
}

variable "job_spark_conf" {
  description = "Spark configuration (--conf key=value) added to every scheduled job run, for sizing. The venv, Python and storage settings are set by the module."
  type        = map(string)
  default = {
    "spark.driver.cores"                       = "1"
    "spark.driver.memory"                      = "3g"
    "spark.executor.cores"                     = "2"
    "spark.executor.memory"                    = "6g"
    "spark.dynamicAllocation.initialExecutors" = "1"
    "spark.dynamicAllocation.maxExecutors"     = "4"
  }

  validation {
    condition     = alltrue([for k in keys(var.job_spark_conf) : can(regex("^spark\\.[A-Za-z0-9_.-]+$", k))])
    error_message = "job_spark_conf keys must be Spark configuration names (spark.*)."
  }
}

variable "job_timeout_minutes" {
  description = "A scheduled job run is cancelled after this many minutes."
  type        = number
  default     = 120

  validation {
    condition     = var.job_timeout_minutes >= 5 && var.job_timeout_minutes <= 1440
    error_message = "job_timeout_minutes must be between 5 and 1440."
  }
}

variable "schedules_enabled" {
  description = "Start the scheduled jobs. Set false until the artifacts (submit.py, lakelog-venv.tar.gz) are uploaded, or to pause maintenance."
  type        = bool
  default     = true
}

variable "retention_interval_minutes" {
  description = "Minutes between two runs of the retention job (deletes closed segments past retention.ms / retention.bytes)."
  type        = number
  default     = 60

  validation {
    condition     = var.retention_interval_minutes >= 5 && floor(var.retention_interval_minutes) == var.retention_interval_minutes
    error_message = "retention_interval_minutes must be a whole number, at least 5."
  }
}

variable "roll_interval_minutes" {
  description = "Minutes between two runs of the segment-roll job (merges the small files of each flush into segments)."
  type        = number
  default     = 30

  validation {
    condition     = var.roll_interval_minutes >= 5 && floor(var.roll_interval_minutes) == var.roll_interval_minutes
    error_message = "roll_interval_minutes must be a whole number, at least 5."
  }
}

variable "compact_interval_minutes" {
  description = "Minutes between two runs of the log-compaction job (topics with cleanup.policy=compact)."
  type        = number
  default     = 360

  validation {
    condition     = var.compact_interval_minutes >= 5 && floor(var.compact_interval_minutes) == var.compact_interval_minutes
    error_message = "compact_interval_minutes must be a whole number, at least 5."
  }
}

variable "vacuum_interval_minutes" {
  description = "Minutes between two runs of the vacuum job (physically deletes files removed by retention, roll and compaction once file.delete.delay.ms has passed)."
  type        = number
  default     = 1440

  validation {
    condition     = var.vacuum_interval_minutes >= 5 && floor(var.vacuum_interval_minutes) == var.vacuum_interval_minutes
    error_message = "vacuum_interval_minutes must be a whole number, at least 5."
  }
}
