# The ingest tier: the lakelog server (`lakelog serve`) on ECS Fargate.

locals {
  image          = var.image_uri != null ? var.image_uri : "${aws_ecr_repository.lakelog.repository_url}:${var.image_tag}"
  container_name = "lakelog"
  container_port = 8080

  service_environment = merge(var.service_environment, local.lakelog_env, {
    # The maintenance jobs run on EMR Serverless (spark.tf), not inside the
    # server's embedded local-Spark scheduler (the image has no JVM for it).
    LAKELOG_JOBS_INTERVAL_S = "0"
    LAKELOG_LINGER_MS       = tostring(var.linger_ms)
    # Cluster liveness: each node renews a heartbeat object under the root
    # every interval and is out of the cluster after the session timeout.
    LAKELOG_BROKER_HEARTBEAT_INTERVAL_MS = tostring(var.broker_heartbeat_interval_ms)
    LAKELOG_BROKER_SESSION_TIMEOUT_MS    = tostring(var.broker_session_timeout_ms)
  }, local.kafka_environment)

  cluster_secret_arn = var.cluster_secret_arn != null ? var.cluster_secret_arn : aws_secretsmanager_secret.cluster[0].arn

  # The container's command: `lakelog serve`, with LAKELOG_ADVERTISE (the
  # address the other nodes forward produce batches and group requests to)
  # set to http://<this task's private IP>:<port>. Fargate gives every
  # container the task metadata endpoint (v4) in ECS_CONTAINER_METADATA_URI_V4;
  # the image's python reads the task's awsvpc address, and the private DNS
  # name of its network interface, from it. Without an address the task
  # exits, and ECS starts another one, rather than advertise an address no
  # node can reach.
  # With the Kafka listener, kafka.tf adds its part before `lakelog serve`:
  # LAKELOG_KAFKA_ADVERTISE=<private DNS name>:<kafka_port>, and the TLS file.
  advertise_probe   = <<-EOT
    import json, os, sys, time, urllib.request
    base = os.environ.get("ECS_CONTAINER_METADATA_URI_V4")
    if not base:
        sys.exit("ECS_CONTAINER_METADATA_URI_V4 is not set: cannot find the address to advertise")
    error = None
    for attempt in range(30):
        try:
            with urllib.request.urlopen(base + "/task", timeout=2) as response:
                task = json.load(response)
            network = next(n for c in task["Containers"] for n in c.get("Networks", []) if n.get("IPv4Addresses"))
            ip = network["IPv4Addresses"][0]
            print(ip, network.get("PrivateDNSName") or ip)
            sys.exit(0)
        except Exception as exc:
            error = exc
            time.sleep(1)
    sys.exit("cannot read the private IP of this task from the task metadata endpoint: %r" % error)
  EOT
  advertise_command = <<-EOT
    set -eu
    ADDRESSES="$(python -c '${local.advertise_probe}')"
    TASK_IP="$${ADDRESSES%% *}"
    TASK_DNS_NAME="$${ADDRESSES##* }"
    LAKELOG_ADVERTISE="http://$TASK_IP:${local.container_port}"
    export LAKELOG_ADVERTISE
    echo "lakelog: advertising $LAKELOG_ADVERTISE to the other nodes" >&2
  EOT
  serve_command = join("", [
    local.advertise_command,
    local.kafka_start_command, # kafka.tf: LAKELOG_KAFKA_ADVERTISE, the TLS file ("" without the listener)
    "exec lakelog serve --host 0.0.0.0 --port ${local.container_port}\n",
  ])
}

resource "aws_ecr_repository" "lakelog" {
  name                 = var.name
  image_tag_mutability = var.ecr_image_tag_mutability
  force_delete         = var.force_destroy

  image_scanning_configuration {
    scan_on_push = true
  }

  encryption_configuration {
    encryption_type = "AES256"
  }
}

resource "aws_ecr_lifecycle_policy" "lakelog" {
  repository = aws_ecr_repository.lakelog.name

  policy = jsonencode({
    rules = [
      {
        rulePriority = 1
        description  = "Expire untagged images after 7 days"
        selection    = { tagStatus = "untagged", countType = "sinceImagePushed", countUnit = "days", countNumber = 7 }
        action       = { type = "expire" }
      },
      {
        rulePriority = 2
        description  = "Keep the 20 most recent images"
        selection    = { tagStatus = "any", countType = "imageCountMoreThan", countNumber = 20 }
        action       = { type = "expire" }
      },
    ]
  })
}

resource "aws_cloudwatch_log_group" "ingest" {
  name              = "/lakelog/${var.name}/ingest"
  retention_in_days = var.log_retention_days
}

# The secret is created empty: its value (the API keys) is put with the AWS
# CLI, so it never appears in Terraform variables, plans, state or outputs.
resource "aws_secretsmanager_secret" "api_keys" {
  count = var.api_keys_secret_arn == null ? 1 : 0

  name_prefix             = "${var.name}/api-keys-"
  description             = "lakelog ${var.name} API keys: a JSON object mapping each API key to its principal, e.g. {\"<key>\": \"alice\"}. Injected into the ingest tier as LAKELOG_API_KEYS_JSON."
  recovery_window_in_days = var.secret_recovery_window_days
}

# The cluster secret authenticates node-to-node requests (forwarded produce
# batches and group requests under /internal/). Secrets Manager generates the
# value; Terraform only passes it through as an ephemeral value into a
# write-only attribute, so it appears in no plan, state or output. Every task
# reads it at start (LAKELOG_CLUSTER_SECRET).
ephemeral "aws_secretsmanager_random_password" "cluster" {
  count = var.cluster_secret_arn == null ? 1 : 0

  password_length     = 48
  exclude_punctuation = true
}

resource "aws_secretsmanager_secret" "cluster" {
  count = var.cluster_secret_arn == null ? 1 : 0

  name_prefix             = "${var.name}/cluster-secret-"
  description             = "lakelog ${var.name} cluster secret: authenticates requests between the ingest tasks. Injected into the ingest tier as LAKELOG_CLUSTER_SECRET."
  recovery_window_in_days = var.secret_recovery_window_days
}

resource "aws_secretsmanager_secret_version" "cluster" {
  count = var.cluster_secret_arn == null ? 1 : 0

  secret_id                = aws_secretsmanager_secret.cluster[0].id
  secret_string_wo         = ephemeral.aws_secretsmanager_random_password.cluster[0].random_password
  secret_string_wo_version = 1
}

resource "aws_ecs_cluster" "this" {
  name = var.name

  setting {
    name  = "containerInsights"
    value = var.container_insights ? "enabled" : "disabled"
  }
}

resource "aws_ecs_task_definition" "ingest" {
  family                   = "${var.name}-ingest"
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = var.task_cpu
  memory                   = var.task_memory
  execution_role_arn       = aws_iam_role.ecs_execution.arn
  task_role_arn            = aws_iam_role.ecs_task.arn

  runtime_platform {
    operating_system_family = "LINUX"
    cpu_architecture        = var.cpu_architecture
  }

  # Writable scratch space when the root filesystem is read-only.
  volume {
    name = "tmp"
  }

  container_definitions = jsonencode([
    {
      name      = local.container_name
      image     = local.image
      essential = true
      # `lakelog serve` (the image's entrypoint is `lakelog`), started by a
      # shell that first sets LAKELOG_ADVERTISE (see local.serve_command).
      # The root comes from LAKELOG_ROOT.
      entryPoint = ["/bin/sh", "-c"]
      command    = [local.serve_command]

      portMappings = concat(
        [{ containerPort = local.container_port, protocol = "tcp", name = "http" }],
        local.kafka ? [{ containerPort = var.kafka_port, protocol = "tcp", name = "kafka" }] : [],
      )

      environment = [for k in sort(keys(local.service_environment)) : { name = k, value = local.service_environment[k] }]

      # The API keys also turn SASL/PLAIN on for the Kafka listener.
      secrets = concat(
        [
          { name = "LAKELOG_API_KEYS_JSON", valueFrom = local.api_keys_secret_arn },
          { name = "LAKELOG_CLUSTER_SECRET", valueFrom = local.cluster_secret_arn },
        ],
        local.kafka_tls ? [{ name = "KAFKA_TLS_PEM", valueFrom = local.kafka_tls_secret_arn }] : [],
      )

      readonlyRootFilesystem = var.readonly_root_filesystem
      mountPoints = [
        { sourceVolume = "tmp", containerPath = "/tmp", readOnly = false },
      ]

      # Liveness of the process; the load balancer checks readiness (/readyz).
      healthCheck = {
        command     = ["CMD", "python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:${local.container_port}/healthz', timeout=3)"]
        interval    = 30
        timeout     = 5
        retries     = 3
        startPeriod = 60
      }

      # Time to drain after SIGTERM: the node marks itself draining, finishes
      # its in-flight flushes and forwarded requests and hands its topics and
      # groups over. ECS sends SIGTERM only after the load balancer's
      # deregistration delay, so no new client request reaches it by then.
      stopTimeout = var.stop_timeout_seconds
      linuxParameters = {
        initProcessEnabled = true
      }
      ulimits = [
        { name = "nofile", softLimit = 65536, hardLimit = 65536 },
      ]

      logConfiguration = {
        logDriver = "awslogs"
        options = {
          "awslogs-group"         = aws_cloudwatch_log_group.ingest.name
          "awslogs-region"        = local.region
          "awslogs-stream-prefix" = "ingest"
        }
      }
    },
  ])
}

resource "aws_ecs_service" "ingest" {
  name            = "${var.name}-ingest"
  cluster         = aws_ecs_cluster.this.id
  task_definition = aws_ecs_task_definition.ingest.arn
  launch_type     = "FARGATE"
  desired_count   = var.desired_count

  # Rolling deployments with no downtime: the new tasks start and join the
  # cluster (up to twice desired_count in all) and pass the /readyz check
  # before any old task stops; an old task then leaves the load balancer
  # (deregistration delay) and drains (stopTimeout), handing its topics and
  # groups over to the nodes that remain.
  deployment_minimum_healthy_percent = 100
  deployment_maximum_percent         = 200

  health_check_grace_period_seconds = 60
  enable_ecs_managed_tags           = true
  propagate_tags                    = "SERVICE"
  wait_for_steady_state             = false

  deployment_circuit_breaker {
    enable   = true
    rollback = true
  }

  network_configuration {
    subnets          = local.private_subnet_ids
    security_groups  = [aws_security_group.ingest.id]
    assign_public_ip = false
  }

  load_balancer {
    target_group_arn = aws_lb_target_group.ingest.arn
    container_name   = local.container_name
    container_port   = local.container_port
  }

  # The Kafka bootstrap name (kafka.tf): ECS keeps each running task's IP in it.
  dynamic "service_registries" {
    for_each = local.kafka ? [aws_service_discovery_service.kafka[0].arn] : []

    content {
      registry_arn = service_registries.value
    }
  }

  # The cluster secret (and the Kafka TLS secret, when written from files)
  # must have its value before a task reads it.
  depends_on = [aws_lb_listener.http, aws_lb_listener.https, aws_iam_role_policy.ecs_execution, aws_iam_role_policy.ecs_task, aws_secretsmanager_secret_version.cluster, aws_secretsmanager_secret_version.kafka_tls]
}

# CPU target tracking between desired_count and max_task_count tasks. A new
# task joins the cluster with its first heartbeat and takes its share of the
# topics and groups (rendezvous hashing over the live nodes); a task removed
# by scale-in drains and hands its share over before it exits.
resource "aws_appautoscaling_target" "ingest" {
  service_namespace  = "ecs"
  resource_id        = "service/${aws_ecs_cluster.this.name}/${aws_ecs_service.ingest.name}"
  scalable_dimension = "ecs:service:DesiredCount"
  min_capacity       = var.desired_count
  max_capacity       = var.max_task_count
}

resource "aws_appautoscaling_policy" "ingest_cpu" {
  name               = "${var.name}-ingest-cpu"
  policy_type        = "TargetTrackingScaling"
  service_namespace  = aws_appautoscaling_target.ingest.service_namespace
  resource_id        = aws_appautoscaling_target.ingest.resource_id
  scalable_dimension = aws_appautoscaling_target.ingest.scalable_dimension

  target_tracking_scaling_policy_configuration {
    target_value       = var.autoscaling_cpu_target
    scale_in_cooldown  = 300
    scale_out_cooldown = 60

    predefined_metric_specification {
      predefined_metric_type = "ECSServiceAverageCPUUtilization"
    }
  }
}
