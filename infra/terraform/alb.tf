# The Application Load Balancer: the only public endpoint of the deployment.

locals {
  https         = var.certificate_arn != null
  listen_ports  = local.https ? [80, 443] : [80]
  ingress_rules = { for pair in setproduct(local.listen_ports, var.allowed_ingress_cidrs) : "${pair[0]}-${pair[1]}" => { port = pair[0], cidr = pair[1] } }
}

resource "aws_security_group" "alb" {
  name_prefix = "${var.name}-alb-"
  description = "lakelog ${var.name} load balancer: listeners from allowed_ingress_cidrs, to the ingest tasks only"
  vpc_id      = local.vpc_id

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "alb_listeners" {
  for_each = local.ingress_rules

  security_group_id = aws_security_group.alb.id
  description       = "lakelog API listener"
  ip_protocol       = "tcp"
  from_port         = each.value.port
  to_port           = each.value.port
  cidr_ipv4         = each.value.cidr
}

resource "aws_vpc_security_group_egress_rule" "alb_to_tasks" {
  security_group_id            = aws_security_group.alb.id
  description                  = "To the ingest tasks"
  ip_protocol                  = "tcp"
  from_port                    = local.container_port
  to_port                      = local.container_port
  referenced_security_group_id = aws_security_group.ingest.id
}

resource "aws_security_group" "ingest" {
  name_prefix = "${var.name}-ingest-"
  # The description predates the node-to-node rules below; it is kept, since
  # changing it would replace the group (and redeploy the tasks) on upgrade.
  description = "lakelog ${var.name} ingest tasks: from the load balancer only; HTTPS out to AWS APIs"
  vpc_id      = local.vpc_id

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "ingest_from_alb" {
  security_group_id            = aws_security_group.ingest.id
  description                  = "From the load balancer"
  ip_protocol                  = "tcp"
  from_port                    = local.container_port
  to_port                      = local.container_port
  referenced_security_group_id = aws_security_group.alb.id
}

# Node-to-node traffic: the tasks forward produce batches and group requests
# to each other (paths under /internal/, authenticated with the cluster
# secret) on the same port the load balancer uses.
resource "aws_vpc_security_group_ingress_rule" "ingest_from_nodes" {
  security_group_id            = aws_security_group.ingest.id
  description                  = "From the other lakelog nodes (node-to-node requests)"
  ip_protocol                  = "tcp"
  from_port                    = local.container_port
  to_port                      = local.container_port
  referenced_security_group_id = aws_security_group.ingest.id
}

resource "aws_vpc_security_group_egress_rule" "ingest_to_nodes" {
  security_group_id            = aws_security_group.ingest.id
  description                  = "To the other lakelog nodes (node-to-node requests)"
  ip_protocol                  = "tcp"
  from_port                    = local.container_port
  to_port                      = local.container_port
  referenced_security_group_id = aws_security_group.ingest.id
}

resource "aws_vpc_security_group_egress_rule" "ingest_https_out" {
  security_group_id = aws_security_group.ingest.id
  description       = "HTTPS to S3, ECR, CloudWatch Logs, Secrets Manager"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = "0.0.0.0/0"
}

resource "aws_lb" "api" {
  name                       = "${var.name}-api"
  load_balancer_type         = "application"
  internal                   = false
  subnets                    = local.public_subnet_ids
  security_groups            = [aws_security_group.alb.id]
  idle_timeout               = var.alb_idle_timeout
  drop_invalid_header_fields = true
  enable_deletion_protection = var.alb_deletion_protection
}

resource "aws_lb_target_group" "ingest" {
  name        = "${var.name}-ingest"
  port        = local.container_port
  protocol    = "HTTP"
  target_type = "ip"
  vpc_id      = local.vpc_id
  # A stopping task first leaves the load balancer: requests already sent to
  # it (fetch long polls of up to 30 s) finish before ECS sends SIGTERM.
  deregistration_delay = var.deregistration_delay_seconds

  health_check {
    path                = "/readyz"
    port                = "traffic-port"
    protocol            = "HTTP"
    matcher             = "200"
    interval            = 15
    timeout             = 5
    healthy_threshold   = 2
    unhealthy_threshold = 3
  }
}

resource "aws_lb_listener" "http" {
  load_balancer_arn = aws_lb.api.arn
  port              = 80
  protocol          = "HTTP"

  # With a certificate, plain HTTP only redirects to HTTPS.
  default_action {
    type             = local.https ? "redirect" : "forward"
    target_group_arn = local.https ? null : aws_lb_target_group.ingest.arn

    dynamic "redirect" {
      for_each = local.https ? [1] : []

      content {
        port        = "443"
        protocol    = "HTTPS"
        status_code = "HTTP_301"
      }
    }
  }
}

resource "aws_lb_listener" "https" {
  count = local.https ? 1 : 0

  load_balancer_arn = aws_lb.api.arn
  port              = 443
  protocol          = "HTTPS"
  ssl_policy        = var.ssl_policy
  certificate_arn   = var.certificate_arn

  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.ingest.arn
  }
}
