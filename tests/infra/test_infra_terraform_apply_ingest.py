"""The applied stack's ingest tier (tf_stack.py: infra/terraform applied to a local AWS endpoint): private
ECS tasks behind the load balancer (HTTPS, HTTP redirected), only the load balancer and the Kafka port for
the listed CIDRs reachable, the task definition that runs `lakelog serve`, the Kafka bootstrap name in
Cloud Map, the ECR repository and CPU autoscaling."""

from __future__ import annotations

import pytest
from tf_stack import KAFKA_BOOTSTRAP_HOST, KAFKA_CLIENT_CIDRS, NAME, ROOT_PREFIX, task_definition

pytestmark = [pytest.mark.s3, pytest.mark.timeout(900)]


def test_ecs_service_runs_private_tasks_behind_the_load_balancer(stack):
    ecs = stack.client("ecs")
    service = ecs.describe_services(cluster=stack.outputs["ecs_cluster_name"], services=[stack.outputs["ecs_service_name"]])["services"][0]
    assert service["status"] == "ACTIVE"
    assert service["desiredCount"] == 2
    assert service["launchType"] == "FARGATE"
    # (moto does not keep the deployment configuration: the 100 % / 200 %
    # bounds of rolling deployments are checked in the plan test.)
    vpc = service["networkConfiguration"]["awsvpcConfiguration"]
    assert vpc["assignPublicIp"] == "DISABLED"

    ec2 = stack.client("ec2")
    for subnet in ec2.describe_subnets(SubnetIds=vpc["subnets"])["Subnets"]:
        assert not subnet["MapPublicIpOnLaunch"]
        tables = ec2.describe_route_tables(Filters=[{"Name": "association.subnet-id", "Values": [subnet["SubnetId"]]}])["RouteTables"]
        gateways = [r.get("GatewayId", "") for t in tables for r in t["Routes"]]
        assert not any(g.startswith("igw-") for g in gateways), "task subnets must be private"
        assert any(r.get("NatGatewayId") for t in tables for r in t["Routes"]), "task subnets reach AWS APIs through NAT"

    (lb_ref,) = service["loadBalancers"]
    assert lb_ref["containerName"] == "lakelog" and lb_ref["containerPort"] == 8080
    elbv2 = stack.client("elbv2")
    (tg,) = elbv2.describe_target_groups(TargetGroupArns=[lb_ref["targetGroupArn"]])["TargetGroups"]
    assert tg["HealthCheckPath"] == "/readyz"
    assert tg["TargetType"] == "ip" and tg["Port"] == 8080
    assert tg["HealthCheckProtocol"] == "HTTP"
    attributes = {a["Key"]: a["Value"] for a in elbv2.describe_target_group_attributes(TargetGroupArn=tg["TargetGroupArn"])["Attributes"]}
    assert attributes["deregistration_delay.timeout_seconds"] == "35"


def test_load_balancer_serves_https_and_redirects_http(stack):
    elbv2 = stack.client("elbv2")
    (lb,) = [lb for lb in elbv2.describe_load_balancers()["LoadBalancers"] if lb["LoadBalancerName"] == f"{NAME}-api"]
    assert lb["Type"] == "application"  # internet-facing: checked in the plan test (moto omits Scheme)
    assert stack.outputs["api_url"] == f"https://{lb['DNSName']}"
    listeners = {ls["Port"]: ls for ls in elbv2.describe_listeners(LoadBalancerArn=lb["LoadBalancerArn"])["Listeners"]}
    assert set(listeners) == {80, 443}
    https = listeners[443]
    assert https["Protocol"] == "HTTPS"
    assert https["Certificates"][0]["CertificateArn"] == stack.certificate_arn
    assert https["SslPolicy"].startswith("ELBSecurityPolicy-TLS13")
    assert https["DefaultActions"][0]["Type"] == "forward"
    redirect = listeners[80]["DefaultActions"][0]
    assert redirect["Type"] == "redirect"
    assert redirect["RedirectConfig"]["Protocol"] == "HTTPS" and redirect["RedirectConfig"]["Port"] == "443"


def test_only_the_load_balancer_is_reachable_from_outside(stack):
    ec2 = stack.client("ec2")
    groups = ec2.describe_security_groups(Filters=[{"Name": "vpc-id", "Values": [stack.outputs["vpc_id"]]}])["SecurityGroups"]
    by_id = {g["GroupId"]: g for g in groups}
    open_to_world = {
        (g["GroupName"], p.get("FromPort"))
        for g in groups
        for p in g["IpPermissions"]
        if any(r.get("CidrIp") == "0.0.0.0/0" for r in p.get("IpRanges", []))
    }
    assert {port for _, port in open_to_world} == {80, 443}
    assert all(name.startswith(f"{NAME}-alb-") for name, _ in open_to_world), open_to_world

    service = stack.client("ecs").describe_services(cluster=stack.outputs["ecs_cluster_name"], services=[stack.outputs["ecs_service_name"]])["services"][0]
    (task_sg,) = service["networkConfiguration"]["awsvpcConfiguration"]["securityGroups"]
    # The tasks take the service port from the load balancer and from each
    # other (node-to-node requests), and the Kafka port from the listed
    # client CIDR blocks; nothing else.
    by_port = {(p["IpProtocol"], p["FromPort"], p["ToPort"]): p for p in by_id[task_sg]["IpPermissions"]}
    assert set(by_port) == {("tcp", 8080, 8080), ("tcp", 9092, 9092)}
    kafka = by_port[("tcp", 9092, 9092)]
    assert sorted(r["CidrIp"] for r in kafka["IpRanges"]) == sorted(KAFKA_CLIENT_CIDRS)
    assert kafka["UserIdGroupPairs"] == [] and kafka.get("Ipv6Ranges", []) == []
    ingress = [by_port[("tcp", 8080, 8080)]]
    assert all(p["IpRanges"] == [] and p.get("Ipv6Ranges", []) == [] for p in ingress)
    sources = {pair["GroupId"] for p in ingress for pair in p["UserIdGroupPairs"]}
    (alb_sg,) = sources - {task_sg}
    assert by_id[alb_sg]["GroupName"].startswith(f"{NAME}-alb-")
    assert task_sg in sources, "node-to-node: the task security group lets its own members in"
    egress_to_nodes = [p for p in by_id[task_sg]["IpPermissionsEgress"] if any(pair["GroupId"] == task_sg for pair in p["UserIdGroupPairs"])]
    assert [(p["FromPort"], p["ToPort"]) for p in egress_to_nodes] == [(8080, 8080)]


def test_task_definition_runs_lakelog_serve_with_s3_commit_mode_and_secrets(stack):
    td = task_definition(stack)
    assert td["requiresCompatibilities"] == ["FARGATE"] and td["networkMode"] == "awsvpc"
    (container,) = td["containerDefinitions"]
    assert container["image"] == f"{stack.outputs['ecr_repository_url']}:0.1.0"
    root = f"s3://{stack.outputs['bucket']}/{ROOT_PREFIX}"
    # `lakelog serve` through a shell that first sets LAKELOG_ADVERTISE from
    # the task metadata endpoint (run in the plan test).
    assert container["entryPoint"] == ["/bin/sh", "-c"]
    (script,) = container["command"]
    assert "ECS_CONTAINER_METADATA_URI_V4" in script and "export LAKELOG_ADVERTISE" in script
    assert 'LAKELOG_KAFKA_ADVERTISE="$TASK_DNS_NAME:9092"' in script and "export LAKELOG_KAFKA_ADVERTISE" in script
    assert script.rstrip().endswith("exec lakelog serve --host 0.0.0.0 --port 8080")
    assert container["stopTimeout"] == 60
    assert [(m["containerPort"], m["protocol"], m["name"]) for m in container["portMappings"]] == [
        (8080, "tcp", "http"), (9092, "tcp", "kafka")]

    env = {e["name"]: e["value"] for e in container["environment"]}
    assert env["LAKELOG_ROOT"] == root == stack.outputs["root_uri"]
    assert env["LAKELOG_STORAGE__CONDITIONAL_PUT"] == "etag"
    assert env["LAKELOG_STORAGE__AWS_REGION"] == "us-east-1"
    assert env["LAKELOG_JOBS_INTERVAL_S"] == "0", "maintenance runs on EMR Serverless, not in the server"
    assert env["LAKELOG_LINGER_MS"] == "0"
    assert env["LAKELOG_BROKER_HEARTBEAT_INTERVAL_MS"] == "2000"
    assert env["LAKELOG_BROKER_SESSION_TIMEOUT_MS"] == "9000"
    # The Kafka listener: SASL (the API keys) over TLS (the PEM bundle, written
    # by the command to the file lakelog reads).
    assert env["LAKELOG_KAFKA_PORT"] == "9092"
    assert env["LAKELOG_KAFKA_TLS_CERT_FILE"] == "/tmp/lakelog-kafka-tls.pem"
    assert "/tmp/lakelog-kafka-tls.pem" in script and "KAFKA_TLS_PEM" in script
    assert not any("KEY" in name and "API" in name for name in env), "API keys come from Secrets Manager only"
    assert not any("SECRET" in name or "PEM" in name for name in env), "the cluster secret and the TLS key come from Secrets Manager only"
    assert sorted((s["name"], s["valueFrom"]) for s in container["secrets"]) == [
        ("KAFKA_TLS_PEM", stack.outputs["kafka_tls_secret_arn"]),
        ("LAKELOG_API_KEYS_JSON", stack.outputs["api_keys_secret_arn"]),
        ("LAKELOG_CLUSTER_SECRET", stack.outputs["cluster_secret_arn"]),
    ]

    logs = container["logConfiguration"]
    assert logs["logDriver"] == "awslogs"
    assert logs["options"]["awslogs-group"] == stack.outputs["log_group_name"]
    groups = stack.client("logs").describe_log_groups(logGroupNamePrefix=stack.outputs["log_group_name"])["logGroups"]
    assert groups and groups[0]["retentionInDays"] == 30
    assert container["readonlyRootFilesystem"] is True

def test_kafka_bootstrap_name_is_a_cloud_map_service_of_the_tasks(stack):
    sd = stack.client("servicediscovery")
    (namespace,) = [n for n in sd.list_namespaces()["Namespaces"] if n["Name"] == f"{NAME}.internal"]
    assert namespace["Type"] == "DNS_PRIVATE"
    zone = namespace["Properties"]["DnsProperties"]["HostedZoneId"]
    assert stack.client("route53").get_hosted_zone(Id=zone)["HostedZone"]["Config"]["PrivateZone"] is True
    (service,) = [s for s in sd.list_services()["Services"] if s["Name"] == "kafka"]
    service = sd.get_service(Id=service["Id"])["Service"]
    assert service["DnsConfig"]["NamespaceId"] == namespace["Id"]
    assert service["DnsConfig"]["RoutingPolicy"] == "MULTIVALUE"
    assert service["DnsConfig"]["DnsRecords"] == [{"Type": "A", "TTL": 10}]
    assert service["HealthCheckCustomConfig"] == {"FailureThreshold": 1}

    # The ECS service registers its tasks under that name.
    ecs = stack.client("ecs").describe_services(cluster=stack.outputs["ecs_cluster_name"], services=[stack.outputs["ecs_service_name"]])["services"][0]
    assert [r["registryArn"] for r in ecs["serviceRegistries"]] == [service["Arn"]]

    assert stack.outputs["kafka_bootstrap_servers"] == f"{KAFKA_BOOTSTRAP_HOST}:9092"
    assert stack.outputs["kafka_security_protocol"] == "SASL_SSL"
    assert stack.outputs["kafka_tls_dns_names"] == [KAFKA_BOOTSTRAP_HOST, "*.ec2.internal"]

def test_ecr_repository_scans_and_keeps_tags_immutable(stack):
    ecr = stack.client("ecr")
    (repo,) = ecr.describe_repositories(repositoryNames=[NAME])["repositories"]
    assert repo["repositoryUri"] == stack.outputs["ecr_repository_url"]
    assert repo["imageScanningConfiguration"]["scanOnPush"] is True
    assert repo["imageTagMutability"] == "IMMUTABLE"


def test_cpu_autoscaling_scales_between_desired_and_max_task_count(stack):
    aas = stack.client("application-autoscaling")
    resource_id = f"service/{stack.outputs['ecs_cluster_name']}/{stack.outputs['ecs_service_name']}"
    (target,) = aas.describe_scalable_targets(ServiceNamespace="ecs", ResourceIds=[resource_id])["ScalableTargets"]
    assert (target["MinCapacity"], target["MaxCapacity"]) == (2, 6)
    (policy,) = aas.describe_scaling_policies(ServiceNamespace="ecs", ResourceId=resource_id)["ScalingPolicies"]
    config = policy["TargetTrackingScalingPolicyConfiguration"]
    assert config["PredefinedMetricSpecification"]["PredefinedMetricType"] == "ECSServiceAverageCPUUtilization"
    assert config["TargetValue"] == 60
