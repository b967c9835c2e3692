# The Kafka listener of the ingest tasks, for Kafka clients in the VPC.
#
# Every task runs lakelog's Kafka listener on kafka_port beside HTTP. A Kafka
# client bootstraps from one DNS name, kafka.<namespace> (Cloud Map: a private
# DNS namespace whose multivalue A record ECS keeps at the IPs of the healthy
# tasks), and then talks to each task at the address the task advertises: its
# own Amazon-provided private DNS name (ip-10-40-1-23.<region>.compute.internal,
# read from the task metadata endpoint at start, see ingest.tf), because Kafka
# clients connect straight to the leader of each partition and the coordinator
# of each group. A load balancer would only serve the first connection.
#
# SASL_SSL by default: SASL/PLAIN is on because the tasks have API keys (the
# user name is the principal, the password its API key); TLS takes the
# certificate chain and key from one Secrets Manager secret (a PEM bundle),
# which the task writes to a file under /tmp at start
# (LAKELOG_KAFKA_TLS_CERT_FILE). The certificate must cover the bootstrap name
# and the tasks' private DNS names (output kafka_tls_dns_names).

locals {
  kafka     = var.kafka_enabled
  kafka_tls = var.kafka_enabled && var.kafka_tls

  kafka_namespace      = var.kafka_dns_namespace != null ? var.kafka_dns_namespace : "${var.name}.internal"
  kafka_bootstrap_host = "kafka.${local.kafka_namespace}"
  # The domain of the Amazon-provided private DNS names of the tasks' network
  # interfaces (what each task advertises to Kafka clients).
  kafka_task_domain = local.region == "us-east-1" ? "ec2.internal" : "${local.region}.compute.internal"

  kafka_client_cidrs = var.kafka_client_cidrs != null ? var.kafka_client_cidrs : [var.vpc_cidr]

  # Where the task writes the PEM bundle from the secret (the tmp volume).
  kafka_tls_pem_path   = "/tmp/lakelog-kafka-tls.pem"
  kafka_tls_secret_arn = !local.kafka_tls ? null : var.kafka_tls_secret_arn != null ? var.kafka_tls_secret_arn : aws_secretsmanager_secret.kafka_tls[0].arn
  kafka_tls_from_files = local.kafka_tls && var.kafka_tls_secret_arn == null && var.kafka_tls_certificate_file != null

  # Added to the ingest tasks' environment (ingest.tf).
  kafka_environment = local.kafka ? merge(
    { LAKELOG_KAFKA_PORT = tostring(var.kafka_port) },
    local.kafka_tls ? { LAKELOG_KAFKA_TLS_CERT_FILE = local.kafka_tls_pem_path } : {},
  ) : { LAKELOG_KAFKA_PORT = "-1" }

  # Part of the container's command (ingest.tf), run after it has read the
  # task's IP and private DNS name from the task metadata endpoint
  # (TASK_IP, TASK_DNS_NAME) and before it starts `lakelog serve`: Kafka
  # clients are told the private DNS name, which a certificate can cover
  # (an IP would need a certificate per task).
  kafka_advertise_command = <<-EOT
    LAKELOG_KAFKA_ADVERTISE="$TASK_DNS_NAME:${var.kafka_port}"
    export LAKELOG_KAFKA_ADVERTISE
    if [ "$TASK_DNS_NAME" = "$TASK_IP" ]; then
      echo "lakelog: warning: the task metadata has no private DNS name (DNS hostnames off in the VPC?): Kafka clients are told the IP, which the certificate does not cover" >&2
    fi
    echo "lakelog: advertising $LAKELOG_KAFKA_ADVERTISE to Kafka clients" >&2
  EOT
  # The PEM bundle comes from the secret in KAFKA_TLS_PEM; it is written to a
  # file only the container's user can read and dropped from the environment.
  # An empty secret stops the task rather than serve Kafka without TLS.
  kafka_tls_command = <<-EOT
    if [ -z "$${KAFKA_TLS_PEM:-}" ]; then
      echo "lakelog: the Kafka TLS secret is empty: put the PEM bundle (certificate chain and private key) into it, see the README" >&2
      exit 1
    fi
    (umask 077 && printf '%s\n' "$KAFKA_TLS_PEM" > ${local.kafka_tls_pem_path})
    unset KAFKA_TLS_PEM
  EOT
  kafka_start_command = join("", concat(
    local.kafka ? [local.kafka_advertise_command] : [],
    local.kafka_tls ? [local.kafka_tls_command] : [],
  ))
}

###############################################################################
# Bootstrap name: Cloud Map service discovery
###############################################################################

resource "aws_service_discovery_private_dns_namespace" "kafka" {
  count = local.kafka ? 1 : 0

  name        = local.kafka_namespace
  description = "lakelog ${var.name}: the Kafka bootstrap name ${local.kafka_bootstrap_host}"
  vpc         = local.vpc_id
}

# ECS registers every task of the service here (service_registries in
# ingest.tf) and removes it when it stops; a task whose container health check
# fails leaves the answer.
resource "aws_service_discovery_service" "kafka" {
  count = local.kafka ? 1 : 0

  name          = "kafka"
  description   = "lakelog ${var.name}: the ingest tasks' Kafka listeners (bootstrap only: clients then reach each task at its advertised private DNS name)"
  force_destroy = true

  dns_config {
    namespace_id   = aws_service_discovery_private_dns_namespace.kafka[0].id
    routing_policy = "MULTIVALUE"

    dns_records {
      type = "A"
      ttl  = 10
    }
  }

  health_check_custom_config {
    failure_threshold = 1
  }
}

###############################################################################
# Who may connect
###############################################################################

resource "aws_vpc_security_group_ingress_rule" "ingest_kafka_clients" {
  for_each = local.kafka ? toset(local.kafka_client_cidrs) : toset([])

  security_group_id = aws_security_group.ingest.id
  description       = "Kafka clients (kafka_client_cidrs)"
  ip_protocol       = "tcp"
  from_port         = var.kafka_port
  to_port           = var.kafka_port
  cidr_ipv4         = each.value
}

###############################################################################
# TLS certificate and key
###############################################################################

resource "aws_secretsmanager_secret" "kafka_tls" {
  count = local.kafka_tls && var.kafka_tls_secret_arn == null ? 1 : 0

  name_prefix             = "${var.name}/kafka-tls-"
  description             = "lakelog ${var.name} Kafka listener TLS: a PEM bundle of the server certificate, its intermediates and its unencrypted private key, valid for ${local.kafka_bootstrap_host} and *.${local.kafka_task_domain}. Injected into the ingest tier, which writes it to ${local.kafka_tls_pem_path}."
  recovery_window_in_days = var.secret_recovery_window_days
}

# Only with kafka_tls_certificate_file and kafka_tls_private_key_file; without
# them the secret is created empty and its value is put with the AWS CLI. The
# key is read from its file into a write-only attribute: it is in no plan and
# no state. The version is derived from the certificate (public), so a new
# certificate writes the secret again.
resource "aws_secretsmanager_secret_version" "kafka_tls" {
  count = local.kafka_tls_from_files ? 1 : 0

  secret_id                = aws_secretsmanager_secret.kafka_tls[0].id
  secret_string_wo         = "${trimspace(file(var.kafka_tls_certificate_file))}\n${trimspace(file(var.kafka_tls_private_key_file))}\n"
  secret_string_wo_version = parseint(substr(sha256(file(var.kafka_tls_certificate_file)), 0, 12), 16)
}
